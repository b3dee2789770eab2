"""Tracing overhead: the cheap-metric benchmark (bench_pipeline.py, section 1) with
OpenTelemetry off and on; throughput ratios from one run.

    python benchmarks/bench_tracing.py            # 50,000 examples, best of 10 per case
    python benchmarks/bench_tracing.py --smoke    # CI: 10,000 examples, one run per case

The docs' exact-match metric, score-only, on the inline and the process executor, inside a
caller's span (the service's request); one Evaluator, its telemetry switched between runs,
the cases' runs interleaved so that the machine's load falls on every case alike:

- ``off``: the engine as in a process that never imported OpenTelemetry: its hooks are
  one ``is None`` test per chunk;
- ``api``: the API imported, no SDK provider set (a service that has not configured
  tracing): metrics and spans go to the API's no-op proxies, per chunk;
- ``unsampled``: the SDK's tracer and meter providers, the caller's span not sampled
  (``ParentBased``: a request the service's sampler dropped): per chunk, one span decision
  and the metrics;
- ``sampled``: the SDK, the caller's span sampled, a ``BatchSpanProcessor`` exporting to an
  exporter that discards: a span per example, made and exported.

Target: tracing on costs <= 5% of throughput (ratio to ``off`` >= 0.95). This machine is
shared, and whole runs of the same case differ by more than 5%; so beside the throughput
ratio the benchmark times the tracing hooks themselves (``in hooks``: their share of the
run's wall time, on the event loop, which the loop cannot spend on examples). A span per example
costs the SDK tens of microseconds, while the engine scores an exact-match example in a few:
the ``sampled`` row says what a span per example costs (µs per span), measured, not hidden.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXACT = """
def score(input, output, expected=None):
    want = expected["label"]
    if output == want:
        return 1.0, {"feedback": "Correct."}
    return 0.0, {"feedback": f"Expected {want!r}, got {output!r}."}
"""

CASES = ("off", "api", "unsampled", "sampled")
#: Spans the discarding exporter received, in this interpreter.
_EXPORTED = [0]
TARGET = 0.95


class _Case:
    """One configuration: its providers, the caller's span, its exporter's count."""

    def __init__(self, name: str) -> None:
        from opentelemetry import trace

        self.name = name
        self.exported: int | None = None
        self.tracer_provider: Any = None
        self.meter_provider: Any = None
        self.tracer = trace.get_tracer("bench")  # the API's proxy: no SDK set globally
        if name in ("unsampled", "sampled"):
            self._sdk(name)

    def _sdk(self, name: str) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased

        case = self
        case.exported = 0

        class Discard(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                case.exported = (case.exported or 0) + len(spans)
                return SpanExportResult.SUCCESS

        root = ALWAYS_ON if name == "sampled" else ALWAYS_OFF
        self.tracer_provider = TracerProvider(sampler=ParentBased(root))
        processor = BatchSpanProcessor(Discard(), max_queue_size=65536)
        self.tracer_provider.add_span_processor(processor)
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        self.tracer = self.tracer_provider.get_tracer("bench")

    def close(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()  # flushes the batch processor
            self.meter_provider.shutdown()


async def _rates(execution: str, n: int, reps: int) -> dict[str, dict[str, Any]]:
    """Best examples/s of each case, the cases' runs interleaved on one Evaluator.

    One Evaluator, its telemetry swapped between runs: with one Evaluator per case, each
    one's chunk sizer settled on its own chunk size, which moved throughput by more than
    tracing does.
    """
    from evaluator._data._dataset import Example
    from evaluator._pipeline import Evaluator
    from evaluator._telemetry import Telemetry

    examples = [
        Example(id=i, input={"q": i}, expected={"label": "a"}, output="a" if i % 4 else "b")
        for i in range(n)
    ]
    cases = [_Case(name) for name in CASES]
    best = dict.fromkeys(CASES, 0.0)
    with tempfile.TemporaryDirectory() as folder:
        metric = Path(folder) / "metric.py"
        metric.write_text(EXACT)
        async with Evaluator(metric, execution=execution) as ev:
            flow = ev._flow
            assert flow.router is not None
            telemetry = {
                case.name: None
                if case.name == "off"  # as in a process that never imported OpenTelemetry
                else _timed(Telemetry(case.tracer_provider, case.meter_provider))
                for case in cases
            }
            hooks = dict.fromkeys(CASES, 0.0)
            await ev.evaluate_many(None, examples[: min(n, 20_000)])  # warm up
            for _ in range(reps):
                for case in cases:
                    hooked = flow.telemetry = flow.router.telemetry = telemetry[case.name]
                    spent = _HOOK_S[0]
                    with case.tracer.start_as_current_span("request"):
                        started = time.perf_counter()
                        results = await ev.evaluate_many(None, examples)
                        wall = time.perf_counter() - started
                    assert len(results) == n
                    if n / wall > best[case.name]:
                        best[case.name] = n / wall
                        hooks[case.name] = (_HOOK_S[0] - spent) / wall if hooked else 0.0
    for case in cases:
        case.close()
    return {
        c.name: {"rate": best[c.name], "spans": c.exported, "hooks": hooks[c.name]} for c in cases
    }


#: Seconds spent in the telemetry hooks, in this interpreter.
_HOOK_S = [0.0]


def _timed(telemetry: Any) -> Any:
    """``telemetry`` with its chunk hook timed (the engine's whole cost of tracing here:
    the model-call hook never runs, there are no model calls)."""
    chunk = telemetry.chunk

    def timed(*args: Any) -> None:
        started = time.perf_counter()
        try:
            chunk(*args)
        finally:
            _HOOK_S[0] += time.perf_counter() - started

    telemetry.chunk = timed
    return telemetry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes for CI")
    args = parser.parse_args(argv)
    n, reps = (10_000, 1) if args.smoke else (50_000, 10)
    print(f"cheap metric, score-only, {n:,} examples, best of {reps}; ratio = rate / off")
    print(
        f"{'execution':<10}{'case':<11}{'examples/s':>12}{'ratio':>8}"
        f"{'+µs/example':>13}{'in hooks':>10}{'spans exported':>16}"
    )
    worst: dict[str, float] = {}
    share_of: dict[str, float] = {}
    for execution in ("inline", "process"):
        rates = asyncio.run(_rates(execution, n, reps))
        off = rates["off"]["rate"]
        for case in CASES:
            rate = rates[case]["rate"]
            ratio = rate / off
            extra_us = (1 / rate - 1 / off) * 1e6
            spans = rates[case]["spans"]
            shown = "-" if spans is None else f"{spans:,}"
            share = f"{rates[case]['hooks']:.2%}"
            print(
                f"{execution:<10}{case:<11}{rate:>12,.0f}{ratio:>8.3f}{extra_us:>+13.2f}"
                f"{share:>10}{shown:>16}"
            )
            if case != "off":
                worst[case] = min(worst.get(case, ratio), ratio)
                share_of[case] = max(share_of.get(case, 0.0), rates[case]["hooks"])
    print()
    print(f"target: tracing costs <= {1 - TARGET:.0%} of throughput")
    for case in CASES[1:]:
        by_rate = "meets" if worst[case] >= TARGET else "misses"
        by_hooks = "meets" if share_of[case] <= 1 - TARGET else "misses"
        print(
            f"{case:<11} worst throughput ratio {worst[case]:.3f} ({by_rate}); "
            f"the hooks' own time at most {share_of[case]:.2%} of the run ({by_hooks})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
