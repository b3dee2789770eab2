"""The page's judge metric under ``dspy.Evaluate(num_threads=16)``: one engine for all threads.

    python benchmarks/bench_dspy_judge.py [--smoke]

The simulator runs in its own process (a core of its own), enforcing an RPM limit over a
sliding window and answering each call after a fixed latency (full mode: 600 RPM over any
10 s window, 200 ms). Two judges score the same fixed answers with ``dspy.Evaluate`` and
16 threads, each against a fresh simulator with that configuration:

1. ours: ``to_dspy_metric("examples/metrics/judge.py", lm=dspy.LM(...), rpm=600)``, the
   page's judge metric (``from skynet import llm``); every thread's call goes through the
   adapter's one engine (one governor, retries, metering). Targets: no 429 and at least
   0.95 of the limit.
2. theirs: the same judge written with ``dspy.LM`` directly (litellm, its default
   ``num_retries=3``): its 429 share, its failures and its time.

Figures are from one run; ratios are printed so that runs on different machines compare.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

# dspy and litellm read these when imported: the bundled cost map (no network), a private
# cache directory.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="bench-dspy-judge-"))

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import dspy  # noqa: E402
from bench_llm import sim_stats, simulator  # noqa: E402

from evaluator.dspy import to_dspy_metric  # noqa: E402

# The contender sends the judge's two messages as the page's metric does; dspy 3.4 warns
# that messages= will go in 3.5, once per call.
warnings.filterwarnings("ignore", "Passing OpenAI-style message", DeprecationWarning)

JUDGE = ROOT / "examples" / "metrics" / "judge.py"
INSTRUCTION = "Answer PASS or FAIL, then give one sentence of reasons."  # the page's judge
MODEL = "gpt-4o-mini"  # a name genai-prices knows, so the judge's cost is measured
THREADS = 16


class Answer(dspy.Module):  # type: ignore[misc]
    """A program with no model: fixed answers, so the judge's calls are the only ones."""

    def forward(self, question: str) -> Any:
        n = int(question.split()[2])
        return dspy.Prediction(answer=str(2 * n if n % 3 else n + 1))


def devset(n: int) -> list[Any]:
    return [
        dspy.Example(question=f"What is {i} + {i}?", answer=str(2 * i)).with_inputs("question")
        for i in range(n)
    ]


def evaluate(metric: Any, n: int) -> tuple[Any, float]:
    evaluator = dspy.Evaluate(
        devset=devset(n),
        metric=metric,
        num_threads=THREADS,
        display_progress=False,
        max_errors=n + 1,  # count every failure; never stop the run early
        provide_traceback=False,
    )
    started = time.perf_counter()
    result = evaluator(Answer())
    return result, time.perf_counter() - started


def run_ours(url: str, n: int, rpm: float) -> dict[str, Any]:
    lm = dspy.LM(f"openai/{MODEL}", api_base=url, api_key="x", cache=False)
    with to_dspy_metric(JUDGE, output_field="answer", lm=lm, rpm=rpm) as metric:
        result, wall = evaluate(metric, n)
        stats = metric.statistics()
    return {"wall": wall, "score": result.score, "stats": stats}


def run_dspy_lm(url: str, n: int) -> dict[str, Any]:
    lm = dspy.LM(f"openai/{MODEL}", api_base=url, api_key="x", cache=False, engine="litellm")
    failures: dict[str, int] = {}

    def metric(example: Any, prediction: Any, trace: Any = None) -> float:
        messages = [
            {"role": "system", "content": INSTRUCTION},
            {
                "role": "user",
                "content": f"Question: {example.question}\nAnswer: {prediction.answer}",
            },
        ]
        try:
            verdict = lm(messages=messages)[0]
        except Exception as exc:  # what a DSPy user would see, counted by kind
            name = type(exc).__name__
            failures[name] = failures.get(name, 0) + 1
            raise
        return 1.0 if str(verdict).strip().upper().startswith("PASS") else 0.0

    result, wall = evaluate(metric, n)
    return {"wall": wall, "score": result.score, "failures": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run of the same shape")
    args = parser.parse_args()
    # A window's allowance of at least 100 requests: the governor paces 2% under the limit,
    # which leaves room for its burst of 2 in any window that long.
    n, rpm, window, latency = (80, 3000.0, 1.0, 50) if args.smoke else (400, 600.0, 10.0, 200)
    limit = rpm / 60.0
    sim_args = ("--rpm", str(rpm), "--window", str(window), "--latency-ms", str(latency))
    load = os.getloadavg()
    print(
        f"dspy.Evaluate({THREADS} threads), the page's judge metric, {n} examples; simulator "
        f"{rpm:g} RPM over any {window:g} s window, {latency} ms latency "
        f"(load average {load[0]:.2f} on {os.cpu_count()} cores)"
    )

    with simulator(*sim_args) as url:
        ours = run_ours(url, n, rpm)
        seen = sim_stats(url, window)
    stats = ours["stats"]
    judge = stats.judge
    share = seen["rate_limited"] / max(1, seen["requests"])
    cost = "unmeasured" if judge.cost_usd is None else f"${judge.cost_usd:.5f}"
    print(
        f"  to_dspy_metric(rpm={rpm:g})  : achieved/limit {n / ours['wall'] / limit:.3f} "
        f"(target >= 0.95), 429s {seen['rate_limited']} (target 0), share {share:.3f}; "
        f"{stats.scored} scored / {sum(stats.failures.values())} failed; "
        f"wall {ours['wall']:.1f} s; peak in a window {seen['peak_accepted']} "
        f"(limit {int(limit * window)}); judge {judge.llm_calls} calls, "
        f"{judge.input_tokens + judge.output_tokens} tokens, {cost}"
    )

    with simulator(*sim_args) as url:
        theirs = run_dspy_lm(url, n)
        seen = sim_stats(url, window)
    share = seen["rate_limited"] / max(1, seen["requests"])
    failed = sum(theirs["failures"].values())
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(theirs["failures"].items())) or "none"
    print(
        f"  dspy.LM judge (litellm)   : 429 share {share:.3f} ({seen['rate_limited']} of "
        f"{seen['requests']} requests); {n - failed} scored / {failed} failed ({kinds}) "
        f"after litellm's default retries, each failure scored 0 by dspy; "
        f"wall {theirs['wall']:.1f} s"
    )
    # A sliding window lets a client that bursts take the first window's whole allowance at
    # once: over n calls nobody can beat n / ((n - allowance) / limit).
    allowance = int(limit * window)
    best = n / max(1e-9, (n - allowance) / limit) / limit if n > allowance else float("inf")
    print(
        f"  (a client bursting the first window's {allowance} requests could reach at most "
        f"{best:.2f}x the limit over {n} calls)"
    )
    print(
        f"  ratios: time dspy.LM / ours {theirs['wall'] / ours['wall']:.2f}; "
        f"examples judged dspy.LM / ours {(n - failed) / max(1, stats.scored):.2f}; "
        f"score dspy.LM / ours {theirs['score'] / max(ours['score'], 1e-9):.2f}"
    )


if __name__ == "__main__":
    main()
