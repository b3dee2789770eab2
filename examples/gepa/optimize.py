"""Optimize the classification prompt with GEPA on skynet-eval, offline.

    python examples/gepa/optimize.py

GEPA proposes new versions of ``examples/classify/prompt.txt``; the engine runs
``examples/classify/program.py`` on each and scores it with ``examples/classify/metric.py``.
The reflection model here is a plain deterministic function standing in for a real model:
it reads the feedback in GEPA's reflective prompt ("Expected 'billing', got 'other'.") and
adds a "keyword -> label" rule for the message that was misclassified. It never sees the
expected values themselves: only the feedback text the metric wrote.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import gepa

from evaluator import load_examples
from evaluator.gepa import EvaluatorAdapter

CLASSIFY = Path(__file__).resolve().parent.parent / "classify"

# Words too common to tell one label from another.
STOPWORDS = frozenset(
    {
        *("a", "an", "and", "are", "can", "did", "do", "does", "for", "from", "have", "how"),
        *("i", "in", "is", "it", "me", "my", "not", "of", "on", "or", "the", "this", "to"),
        *("was", "what", "when", "where", "why", "with", "you", "your"),
    }
)


def reflect(prompt: str) -> str:
    """The stand-in reflection model: one new rule per "Expected X, got Y" in the feedback.

    GEPA's prompt shows the current instruction in the first ``` block, then one section
    per example: ``## Inputs`` / ``### message``, ``## Generated Outputs``, ``## Feedback``.
    """
    current = re.search(r"```\n(.*?)\n```", prompt, re.S)
    lines = (current.group(1) if current else "").rstrip("\n").splitlines()
    # New rules go before the fallback line, so the prompt keeps reading top to bottom.
    at = next((i for i, line in enumerate(lines) if line.startswith("Otherwise")), len(lines))
    for block in prompt.split("\n# Example ")[1:]:
        message = re.search(r"### message\n(.*?)\n", block)
        wanted = re.search(r"Expected '([^']+)', got '([^']*)'", block)
        if not (message and wanted):
            continue
        words = [
            w for w in re.findall(r"[a-z0-9]+", message.group(1).lower()) if w not in STOPWORDS
        ]
        if not words:
            continue
        keyword = max(words, key=len)  # the longest word is the most specific one
        rule = f"{keyword} -> {wanted.group(1)}"
        if rule not in lines:
            lines.insert(at, rule)
            at += 1
    return "```\n" + "\n".join(lines) + "\n```"


class Progress:
    """A GEPA logger that prints only the score of each candidate it accepts."""

    def log(self, message: str) -> None:
        found = re.match(
            r"Iteration (\d+): (?:Base program full valset score|Valset score for new program): ([0-9.]+)",
            message,
        )
        if found:
            iteration, score = found.groups()
            print(f"iteration {int(iteration):>2}: valset score {float(score):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-metric-calls", type=int, default=300)
    parser.add_argument("--execution", default="inline", help="where the metric runs")
    parser.add_argument("--classify", type=Path, default=CLASSIFY, help="the example's folder")
    parser.add_argument(
        "--no-cache", action="store_true", help="score every (candidate, example) again"
    )
    args = parser.parse_args(argv)
    folder: Path = args.classify

    rows: list[Any] = list(load_examples(folder / "data.jsonl"))
    seed = {"prompt": (folder / "prompt.txt").read_text()}
    with EvaluatorAdapter.open(
        metric=str(folder / "metric.py"),
        program=str(folder / "program.py"),
        execution=args.execution,
        cache=not args.no_cache,
    ) as adapter:
        result = gepa.optimize(
            seed_candidate=seed,
            trainset=rows,
            adapter=adapter,
            reflection_lm=reflect,
            max_metric_calls=args.max_metric_calls,
            reflection_minibatch_size=3,
            logger=Progress(),
            seed=0,
        )
        before = adapter.evaluate(rows, seed)
        after = adapter.evaluate(rows, result.best_candidate)
        stats = adapter.statistics()
    mean_before = sum(before.scores) / len(before.scores)
    mean_after = sum(after.scores) / len(after.scores)
    print(f"candidates: {len(result.candidates)}, metric calls: {result.total_metric_calls}")
    cache = stats.cache
    if cache is not None:
        hits = cache.memory_hits + cache.disk_hits
        print(
            f"examples scored: {stats.examples}, of which {hits} from the cache "
            f"({stats.examples - hits} executed)"
        )
    print(f"score: {mean_before:.3f} -> {mean_after:.3f}")
    print("best prompt:")
    print(result.best_candidate["prompt"].rstrip())
    return 0 if mean_after > mean_before else 1


if __name__ == "__main__":
    sys.exit(main())
