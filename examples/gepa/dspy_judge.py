"""The page's judge metric under dspy.Evaluate, with the judge's cost.

    python examples/gepa/dspy_judge.py                       # offline: a local simulator
    python examples/gepa/dspy_judge.py --lm openai/gpt-4o-mini  # a real model (OPENAI_API_KEY)

``examples/metrics/judge.py`` asks a model for PASS or FAIL (``from skynet import llm``).
``to_dspy_metric`` gives that model to the metric and serves every call from DSPy's 16
threads through one engine (one rate limit, retries, metering); ``statistics()`` then
says what the judge cost. Offline, a local simulator stands in for the model: its
verdicts are a stable hash of the prompt (PASS for 90% of prompts), not a judgement, so
the score is the same on every run; with --lm a real model judges.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import dspy

from evaluator.dspy import to_dspy_metric

JUDGE = Path(__file__).resolve().parent.parent / "metrics" / "judge.py"

QUESTIONS = [
    ("What is the capital of France?", "Paris"),
    ("How many legs does a spider have?", "8"),
    ("What is 12 times 12?", "144"),
    ("Which planet is known as the red planet?", "Mars"),
    ("What is the boiling point of water at sea level in Celsius?", "100"),
    ("Who wrote 'Pride and Prejudice'?", "Jane Austen"),
    ("What is the square root of 81?", "9"),
    ("What gas do plants absorb from the air?", "Carbon dioxide"),
]


class Answer(dspy.Module):  # type: ignore[misc]
    """The program being judged: fixed answers here, one of them wrong on purpose."""

    def forward(self, question: str) -> Any:
        answers = dict(QUESTIONS)
        answers["What is 12 times 12?"] = "142"
        return dspy.Prediction(answer=answers[question])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lm", help="the judge's model, e.g. openai/gpt-4o-mini (default: simulator)"
    )
    parser.add_argument("--rpm", type=float, default=600, help="the judge's requests per minute")
    args = parser.parse_args(argv)

    devset = [dspy.Example(question=q, answer=a).with_inputs("question") for q, a in QUESTIONS]
    serving: dict[str, Any] = (
        {"lm": dspy.LM(args.lm)}
        if args.lm
        else {"lm": "openai/gpt-4o-mini", "simulator": {"latency_ms": 200, "pass_rate": 0.9}}
    )
    with to_dspy_metric(JUDGE, output_field="answer", rpm=args.rpm, **serving) as metric:
        evaluate = dspy.Evaluate(
            devset=devset, metric=metric, num_threads=16, display_progress=False
        )
        result = evaluate(Answer())
        stats = metric.statistics()

    judge = stats.judge
    cost = "not measured" if judge.cost_usd is None else f"${judge.cost_usd:.6f}"
    print(f"score: {result.score:.1f}% of {len(devset)} examples")
    print(
        f"judge {stats.model}: {judge.llm_calls} calls, {judge.input_tokens} input + "
        f"{judge.output_tokens} output tokens, cost {cost}, {judge.rate_limited} rate limited, "
        f"{judge.retries} retries"
    )
    print(f"metric failures: {stats.failures or 'none'}")
    return 0 if not stats.failures else 1


if __name__ == "__main__":
    sys.exit(main())
