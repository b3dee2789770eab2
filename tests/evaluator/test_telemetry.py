"""OpenTelemetry spans and metrics: checked with the SDK's in-memory exporter and reader.

Model calls go over real HTTP to the simulator on 127.0.0.1; the program and the judge metric
call it with ``skynet.llm``. Providers are passed to the Evaluator, so no global state is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

from evaluator import ConfigError, Evaluator, Models
from llm_client import ModelConfig, Simulator, SimulatorConfig
from tests._helpers import write

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-telemetry-secret-0123456789"
#: The expected value of every example: it must appear in no span and no metric.
EXPECTED = "EXPECTED-zq8-never-exported"

PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["q"])
"""

JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    verdict = llm("Answer PASS or FAIL.", input=f"{output} vs {expected['label']}")
    if input["q"] == "q-bad":
        raise ValueError(f"bad example, expected {expected['label']}")
    return 1.0, {"feedback": f"verdict {verdict}; expected {expected['label']}"}
"""

EXACT = """
def score(input, output, expected=None):
    return (1.0 if output == expected["label"] else 0.0), {"feedback": f"want {expected['label']}"}
"""


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig(api_key=KEY)) as simulator:
        yield simulator


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SKYNET_TEST_TELEMETRY_KEY", KEY)
    return "SKYNET_TEST_TELEMETRY_KEY"


class Otel:
    """An SDK tracer provider with an in-memory exporter, and a meter with a reader."""

    def __init__(self, sampler: Any = None) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(**({"sampler": sampler} if sampler else {}))
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Each metric's points as (attributes, value or histogram sum)."""
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)  # type: ignore[union-attr]
                        found.setdefault(metric.name, []).append(
                            (dict(point.attributes or {}), value)
                        )
        return found

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Otel]:
    telemetry = Otel()
    yield telemetry
    telemetry.close()


def _models(sim: Simulator, key_env: str) -> Models:
    config = ModelConfig(
        model="sim-model",
        base_url=sim.base_url,
        api_key_env=key_env,
        price_input=1.0,
        price_output=2.0,
    )
    return Models(program=config, metric=config)


def _examples(n: int) -> list[dict[str, Any]]:
    rows = [{"id": f"ex-{i}", "q": f"q-{i}", "label": EXPECTED} for i in range(n)]
    rows[-1]["q"] = "q-bad"
    return rows


def _as_text(spans: tuple[ReadableSpan, ...], metrics: Any) -> str:
    return json.dumps(
        [span.to_json() for span in spans] + [repr(metrics)], default=str, ensure_ascii=False
    )


class TestSpans:
    async def test_with_a_cache_each_call_is_under_the_example_that_made_it(
        self, tmp_path: Path, sim: Simulator, key_env: str, otel: Otel
    ) -> None:
        """In a chunk of cached and fresh examples, only the fresh ones ran: each model
        call's span is a child of its own example's span, and a cached example has none."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "metric.py", EXACT)
        rows = [{"id": f"ex-{i}", "input": {"q": f"q-{i}"}, "expected": {"label": "x"}}
                for i in range(4)]  # fmt: skip
        async with Evaluator(
            metric,
            program,
            models=_models(sim, key_env),
            cache=True,
            execution="inline",
            tracer_provider=otel.tracer_provider,
            meter_provider=otel.meter_provider,
        ) as ev:
            await ev.evaluate_many("Answer briefly.", [rows[0], rows[2]])
            otel.exporter.clear()
            results = await ev.evaluate_many("Answer briefly.", rows)
        assert [r.cached for r in results] == [True, False, True, False]
        spans = otel.spans()
        by_id: dict[str, Any] = {
            str((s.attributes or {})["skynet.example.id"]): s.context.span_id
            for s in spans
            if s.name == "skynet.example"
        }
        parents = sorted(
            next(i for i, sid in by_id.items() if sid == s.parent.span_id)
            for s in spans
            if s.name == "chat sim-model" and s.parent is not None
        )
        assert parents == ["ex-1", "ex-3"]

    async def test_example_and_model_call_spans_under_the_callers_span(
        self, tmp_path: Path, sim: Simulator, key_env: str, otel: Otel
    ) -> None:
        """Each example's span is a child of the caller's current span, and each of its
        model calls (program and judge) a child of the example's span, with GenAI
        attributes; the failed example's span has its error kind and an error status."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "metric.py", JUDGE)
        tracer = otel.tracer_provider.get_tracer("service")
        rows = _examples(4)
        async with Evaluator(
            metric,
            program,
            models=_models(sim, key_env),
            tracer_provider=otel.tracer_provider,
            meter_provider=otel.meter_provider,
        ) as ev:
            with tracer.start_as_current_span("POST /evaluate") as request:
                results = await ev.evaluate_many(
                    "Answer briefly.",
                    [
                        {"id": r["id"], "input": {"q": r["q"]}, "expected": {"label": r["label"]}}
                        for r in rows
                    ],
                )
        assert [r.error.kind if r.error else None for r in results] == [None] * 3 + ["metric_error"]
        spans = otel.spans()
        examples = [s for s in spans if s.name == "skynet.example"]
        calls = [s for s in spans if s.name == "chat sim-model"]
        assert len(examples) == 4 and len(calls) == 8  # a program call and a judge call each
        request_id = request.get_span_context().span_id
        assert all(s.parent is not None and s.parent.span_id == request_id for s in examples)
        by_id = {s.context.span_id: s for s in examples}
        for call in calls:
            assert call.parent is not None and call.parent.span_id in by_id
            assert call.kind is SpanKind.CLIENT
            attrs = call.attributes or {}
            assert attrs["gen_ai.request.model"] == "sim-model"
            assert attrs["gen_ai.usage.input_tokens"] > 0  # type: ignore[operator]
            assert attrs["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
            assert attrs["server.address"] == "127.0.0.1" and attrs["server.port"] == sim.port
            assert attrs["skynet.retries"] == 0 and attrs["skynet.rate_limited"] == 0
            assert attrs["skynet.cost_usd"] > 0  # type: ignore[operator]
            parent = by_id[call.parent.span_id]
            assert parent.start_time <= call.start_time <= call.end_time <= parent.end_time  # type: ignore[operator]
        stages = sorted(
            str((by_id[c.parent.span_id].attributes or {})["skynet.example.id"])  # type: ignore[union-attr]
            + ":"
            + str((c.attributes or {})["skynet.stage"])
            for c in calls
        )
        assert stages == sorted(f"{r['id']}:{s}" for r in rows for s in ("run", "score"))
        ids = {(s.attributes or {})["skynet.example.id"]: s for s in examples}
        ok, bad = ids["ex-0"], ids["ex-3"]
        assert (ok.attributes or {})["skynet.score"] == 1.0
        assert (ok.attributes or {})["skynet.duration_ms"] > 0  # type: ignore[operator]
        assert (ok.attributes or {})["skynet.cost_usd"] > 0  # type: ignore[operator]
        assert "error.type" not in (ok.attributes or {})
        assert (bad.attributes or {})["error.type"] == "metric_error"
        assert bad.status.status_code is StatusCode.ERROR

    async def test_no_key_and_no_expected_in_any_span_or_metric(
        self, tmp_path: Path, sim: Simulator, key_env: str, otel: Otel
    ) -> None:
        """The API key and the examples' expected values (quoted by the metric's feedback
        and error message) appear in no exported span, attribute, event or metric point."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "metric.py", JUDGE)
        rows = _examples(3)
        async with Evaluator(
            metric,
            program,
            models=_models(sim, key_env),
            tracer_provider=otel.tracer_provider,
            meter_provider=otel.meter_provider,
        ) as ev:
            results = await ev.evaluate_many(
                "Answer.",
                [
                    {"id": r["id"], "input": {"q": r["q"]}, "expected": {"label": r["label"]}}
                    for r in rows
                ],
            )
        assert EXPECTED in results[0].feedback and EXPECTED in (results[-1].error or "").__str__()
        text = _as_text(otel.spans(), otel.metrics())
        assert len(otel.spans()) == 9
        assert KEY not in text and EXPECTED not in text

    async def test_unsampled_trace_makes_no_spans(self, tmp_path: Path) -> None:
        """Under a parent-based sampler, a caller whose own span is not sampled gets no
        example spans at all (and every example its result), while a later caller whose
        span is sampled gets one span per example from the same Evaluator."""
        from opentelemetry import context

        sampled_out = Otel(sampler=ParentBased(TraceIdRatioBased(0.0)))
        rows = [
            {"id": i, "input": {}, "output": "a", "expected": {"label": "a"}} for i in range(50)
        ]

        def remote(span_id: int, sampled: bool) -> Any:
            flags = TraceFlags(TraceFlags.SAMPLED if sampled else 0)
            span_context = SpanContext(
                trace_id=7, span_id=span_id, is_remote=True, trace_flags=flags
            )
            return set_span_in_context(NonRecordingSpan(span_context))

        try:
            metric = write(tmp_path, "metric.py", EXACT)
            async with Evaluator(
                metric, execution="inline", tracer_provider=sampled_out.tracer_provider
            ) as ev:
                token = context.attach(remote(9, sampled=False))
                try:
                    results = await ev.evaluate_many(None, rows)
                finally:
                    context.detach(token)
                assert len(results) == 50 and all(r.ok for r in results)
                assert sampled_out.spans() == ()
                token = context.attach(remote(10, sampled=True))
                try:
                    await ev.evaluate_many(None, rows)
                finally:
                    context.detach(token)
            spans = sampled_out.spans()
            assert len(spans) == 50 and all(s.parent and s.parent.span_id == 10 for s in spans)
        finally:
            sampled_out.close()

    async def test_stream_spans_are_children_of_the_consumers_span(
        self, tmp_path: Path, otel: Otel
    ) -> None:
        """Results read with ``stream`` inside a span get example spans under that span."""
        metric = write(tmp_path, "metric.py", EXACT)
        tracer = otel.tracer_provider.get_tracer("service")
        rows = [
            {"id": i, "input": {}, "output": "a", "expected": {"label": "a"}} for i in range(30)
        ]
        async with Evaluator(
            metric, execution="inline", tracer_provider=otel.tracer_provider
        ) as ev:
            with tracer.start_as_current_span("request") as request:
                seen = [r.example_id async for r in ev.stream(None, rows)]
        assert sorted(seen) == list(range(30))
        examples = [s for s in otel.spans() if s.name == "skynet.example"]
        assert sorted(str((s.attributes or {})["skynet.example.id"]) for s in examples) == sorted(
            repr(i) for i in range(30)
        )
        want = request.get_span_context().span_id
        assert all(s.parent is not None and s.parent.span_id == want for s in examples)


class TestFailedCalls:
    async def test_a_failed_call_has_its_status_as_error_type(
        self, tmp_path: Path, key_env: str, otel: Otel
    ) -> None:
        """A model call the server answers 500 (retried once, then given up) has a span
        with `error.type` "500", an error status and its retry count; its example's span
        has the `llm_error` kind."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "metric.py", EXACT)
        async with Simulator(SimulatorConfig(api_key=KEY, error_500_rate=1.0)) as sim:
            config = ModelConfig(
                model="sim-model", base_url=sim.base_url, api_key_env=key_env, max_retries=1
            )
            async with Evaluator(
                metric,
                program,
                execution="inline",
                models=Models(program=config),
                tracer_provider=otel.tracer_provider,
            ) as ev:
                (result,) = await ev.evaluate_many(
                    "Answer.", [{"id": "x", "input": {"q": "q"}, "expected": {"label": "y"}}]
                )
        assert result.error is not None and result.error.kind == "llm_error"
        spans = otel.spans()
        (call,) = [s for s in spans if s.name == "chat sim-model"]
        (example,) = [s for s in spans if s.name == "skynet.example"]
        attrs = call.attributes or {}
        assert attrs["error.type"] == "500" and attrs["skynet.retries"] == 1
        assert "gen_ai.usage.input_tokens" not in attrs  # no reply: no usage, never a 0
        assert call.status.status_code is StatusCode.ERROR
        assert (example.attributes or {})["error.type"] == "llm_error"
        assert KEY not in _as_text(spans, None)


SDK_PROGRAM = """
import openai

def run(artifact, input):
    client = openai.OpenAI(base_url=artifact["url"], api_key=artifact["key"], max_retries=0)
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": input["q"]}]
    ).choices[0].message.content
"""


class TestRoutedSDKSpans:
    async def test_an_sdk_call_gets_its_span_and_its_key_stays_out(
        self, tmp_path: Path, sim: Simulator, otel: Otel
    ) -> None:
        """A call the program makes with its own openai client (routed by the engine) gets
        a model-call span under its example's, with the server's host and port and the
        tokens, and the SDK's own key appears nowhere in the export."""
        program = write(tmp_path, "program.py", SDK_PROGRAM)
        metric = write(tmp_path, "metric.py", EXACT)
        artifact = {"url": sim.base_url, "key": KEY}
        rows = [
            {"id": i, "input": {"q": f"q{i}"}, "expected": {"label": EXPECTED}} for i in range(3)
        ]
        async with Evaluator(
            metric,
            program,
            execution="inline",
            tracer_provider=otel.tracer_provider,
            meter_provider=otel.meter_provider,
        ) as ev:
            results = await ev.evaluate_many(artifact, rows)
        assert all(r.ok and r.observation.llm_calls == 1 for r in results)
        spans = otel.spans()
        examples = {s.context.span_id for s in spans if s.name == "skynet.example"}
        calls = [s for s in spans if s.name == "chat gpt-4o-mini"]
        assert len(examples) == 3 and len(calls) == 3
        for call in calls:
            attrs = call.attributes or {}
            assert call.parent is not None and call.parent.span_id in examples
            assert attrs["server.address"] == "127.0.0.1" and attrs["server.port"] == sim.port
            assert attrs["gen_ai.usage.input_tokens"] > 0  # type: ignore[operator]
            assert attrs["skynet.stage"] == "run"
        text = _as_text(spans, otel.metrics())
        assert KEY not in text and EXPECTED not in text


class TestMetrics:
    async def test_examples_errors_tokens_cost_and_queue_wait(
        self, tmp_path: Path, sim: Simulator, key_env: str, otel: Otel
    ) -> None:
        """Examples and errors by kind are counted per example; tokens, cost and queue
        wait per model call, by stage, matching the results' own figures."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "metric.py", JUDGE)
        rows = _examples(5)
        async with Evaluator(
            metric, program, models=_models(sim, key_env), meter_provider=otel.meter_provider
        ) as ev:
            results = await ev.evaluate_many(
                "Answer.",
                [
                    {"id": r["id"], "input": {"q": r["q"]}, "expected": {"label": r["label"]}}
                    for r in rows
                ],
            )
        found = otel.metrics()
        assert found["skynet.examples"] == [({}, 5)]
        assert found["skynet.errors"] == [({"error.type": "metric_error"}, 1)]
        tokens = {
            (a["skynet.stage"], a["gen_ai.token.type"]): v for a, v in found["skynet.model.tokens"]
        }
        assert tokens[("run", "input")] == sum(r.observation.input_tokens for r in results)
        assert tokens[("run", "output")] == sum(r.observation.output_tokens for r in results)
        assert tokens[("score", "input")] == sum(r.judge.input_tokens for r in results)
        cost = {a["skynet.stage"]: v for a, v in found["skynet.model.cost"]}
        assert cost["run"] == pytest.approx(sum(r.observation.cost_usd or 0 for r in results))
        calls = {a["skynet.stage"]: v for a, v in found["skynet.model.calls"]}
        assert calls == {"run": 5, "score": 5}
        waits = {a["skynet.stage"]: v for a, v in found["skynet.model.queue_wait"]}
        assert waits["run"][0] == 5 and waits["score"][0] == 5  # one point per call
        assert "skynet.model.cost_unmeasured" not in found

    async def test_unpriced_calls_are_counted_apart_never_as_zero(
        self, tmp_path: Path, sim: Simulator, key_env: str, otel: Otel
    ) -> None:
        """A model without a price adds no cost point; its calls are counted as unmeasured."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "metric.py", EXACT)
        config = ModelConfig(model="sim-unpriced-model", base_url=sim.base_url, api_key_env=key_env)
        async with Evaluator(
            metric,
            program,
            execution="inline",
            models=Models(program=config),
            meter_provider=otel.meter_provider,
        ) as ev:
            results = await ev.evaluate_many(
                "Answer.",
                [{"id": i, "input": {"q": "x"}, "expected": {"label": "y"}} for i in range(3)],
            )
        assert all(r.observation.cost_usd is None for r in results)
        found = otel.metrics()
        assert "skynet.model.cost" not in found
        assert found["skynet.model.cost_unmeasured"] == [
            ({"skynet.stage": "run", "gen_ai.request.model": "sim-unpriced-model"}, 3)
        ]


class TestOptions:
    def test_a_provider_that_is_not_one_is_refused(self, tmp_path: Path) -> None:
        """`tracer_provider` must have `get_tracer`: anything else is a ConfigError naming it."""
        metric = write(tmp_path, "metric.py", EXACT)
        with pytest.raises(ConfigError, match="`tracer_provider` must be an OpenTelemetry"):
            Evaluator(metric, tracer_provider="jaeger")


WITHOUT_OTEL = """
import asyncio, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

if sys.argv[1] == "blocked":
    sys.meta_path.insert(0, Block())

import evaluator
assert not any(m.startswith("opentelemetry") for m in sys.modules), "imported at import"
from evaluator import ConfigError, Evaluator

async def main():
    async with Evaluator(sys.argv[2], execution="inline") as ev:
        results = await ev.evaluate_many(None, [{"id": i, "input": {}, "output": "a", "expected": {"label": "a"}} for i in range(20)])
    assert len(results) == 20 and all(r.ok for r in results)
    loaded = any(m.startswith("opentelemetry") for m in sys.modules)
    print("loaded" if loaded else "not loaded")
    if sys.argv[1] == "blocked":
        try:
            Evaluator(sys.argv[2], tracer_provider=object())
        except ConfigError as exc:
            print(exc)

asyncio.run(main())
"""


class TestWithoutOpenTelemetry:
    @pytest.mark.parametrize("mode", ["blocked", "installed"])
    def test_import_evaluator_never_imports_it_and_runs_without_it(
        self, tmp_path: Path, mode: str
    ) -> None:
        """Neither `import evaluator` nor an evaluation imports OpenTelemetry when nobody
        else did; with the package missing an evaluation runs as usual (tracing a no-op)
        and a provider option names the extra."""
        metric = write(tmp_path, "metric.py", EXACT)
        script = write(tmp_path, "check.py", WITHOUT_OTEL)
        done = subprocess.run(
            [sys.executable, str(script), mode, str(metric)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.splitlines()
        if mode == "blocked":
            assert lines[0] == "not loaded"
            assert "`tracer_provider` needs OpenTelemetry" in lines[1]
            assert "pip install 'skynet-eval[otel]'" in lines[1]
        else:
            assert lines == ["not loaded"]  # installed but unused: never imported by the engine
