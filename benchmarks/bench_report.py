"""`skynet-eval report` on a large run: build time, page size, and the page in Chromium.

Writes two synthetic results files of N examples (default 100,000) shaped like a judged
run: feedback of 40-400 characters, short outputs, program and judge costs, 4 % errors of
several kinds, a header line; the second is the first with some scores changed, a few
examples missing and a few new, as a baseline. Then measures, in this process:

- reading both files, building the page against the baseline, writing it (wall time);
- the page's size;
- with Chromium installed (/usr/bin/chromium, driven by Playwright): the time until the
  page is ready (its table drawn), a search over every feedback, a sort by score, and
  opening an example; and that the table keeps only a window of rows in the DOM.

    python benchmarks/bench_report.py            # 100,000 examples
    python benchmarks/bench_report.py --smoke    # 5,000
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' helpers

from evaluator import ErrorInfo, Observation, Result, Usage
from evaluator._report.html import build_report, load_results_file
from evaluator._report.html._build import write_file
from tests._helpers import CHROMIUM, CHROMIUM_ARGS

WORDS = [
    "the",
    "answer",
    "names",
    "the",
    "right",
    "city",
    "but",
    "misses",
    "the",
    "date",
    "and",
    "the",
    "second",
    "clause",
    "of",
    "the",
    "question",
    "which",
    "asks",
    "for",
    "a",
    "reason",
    "grounded",
    "in",
    "the",
    "passage",
]
KINDS = ("metric_timeout", "program_error", "llm_error", "invalid_return")


def synthetic(n: int, seed: int) -> list[Result]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.randint(6, 60)
        feedback = " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."
        error = None
        score = rng.choice((0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0))
        if rng.random() < 0.04:
            kind = rng.choice(KINDS)
            seconds = rng.randint(1, 60)
            error = ErrorInfo(kind, f"{kind}: example ex{i:06d} failed after {seconds} s")
            score = 0.0
            feedback = error.message
        out.append(
            Result(
                example_id=f"ex{i:06d}",
                score=score,
                scores={"accuracy": score, "format": rng.choice((0.0, 1.0))},
                feedback=feedback,
                error=error,
                observation=Observation(
                    duration_ms=rng.lognormvariate(5.5, 0.6),
                    cost_usd=rng.uniform(1e-5, 4e-4),
                    input_tokens=rng.randint(200, 900),
                    output_tokens=rng.randint(10, 200),
                    llm_calls=1,
                ),
                judge=Usage(llm_calls=1, cost_usd=rng.uniform(1e-5, 1e-4), input_tokens=300),
                metric_ms=rng.lognormvariate(5.0, 0.5),
                output=rng.choice(("Paris", "Lyon, 1789", "no answer", "Marseille")),
            )
        )
    return out


def write_results(path: Path, results: list[Result]) -> None:
    header = {"skynet_eval_results": 1, "created": "2026-01-01T00:00:00Z", "dataset": "synthetic"}
    with path.open("wb") as fh:
        fh.write(msgspec.json.encode(header) + b"\n")
        fh.write(msgspec.json.Encoder().encode_lines(results))


def baseline_of(results: list[Result], seed: int) -> list[Result]:
    """The run with 10 % of its scores changed, its first 50 examples missing (new in the
    run), and 30 examples the run does not have (missing from it)."""
    rng = random.Random(seed)
    out = [
        msgspec.structs.replace(r, score=rng.choice((0.0, 0.5, 1.0)), error=None)
        if rng.random() < 0.1
        else r
        for r in results[50:]
    ]
    gone = synthetic(30, seed)
    return out + [msgspec.structs.replace(r, example_id=f"old{i}") for i, r in enumerate(gone)]


def browser(page_path: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    figures: dict[str, float] = {}
    with sync_playwright() as p:
        chrome = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = chrome.new_page(viewport={"width": 1400, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            started = time.perf_counter()
            page.goto(page_path.as_uri(), timeout=120_000)
            page.wait_for_selector("body[data-ready='1']", timeout=120_000)
            figures["ready_s"] = time.perf_counter() - started
            figures["rows_in_dom"] = page.locator("#window .row").count()
            before = page.get_attribute("#count", "data-shown")
            started = time.perf_counter()
            page.fill("#q", "second clause")
            # The page's policy forbids eval, so waits are selectors, not script predicates.
            page.wait_for_selector(f"#count:not([data-shown='{before}'])", timeout=60_000)
            figures["search_s"] = time.perf_counter() - started
            started = time.perf_counter()
            page.click(".thead [data-key='sc']")
            page.wait_for_selector(".thead [data-key='sc'][aria-sort]", timeout=60_000)
            figures["sort_s"] = time.perf_counter() - started
            started = time.perf_counter()
            page.click("#window .row >> nth=3")
            page.wait_for_selector("#detail:not([hidden])", timeout=60_000)
            figures["open_example_s"] = time.perf_counter() - started
            if errors:
                raise SystemExit(f"page errors: {errors}")
        finally:
            chrome.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--smoke", action="store_true", help="5,000 examples")
    args = parser.parse_args()
    n = 5_000 if args.smoke else args.n
    with tempfile.TemporaryDirectory() as tmp:
        run, base, page = Path(tmp, "run.jsonl"), Path(tmp, "base.jsonl"), Path(tmp, "run.html")
        results = synthetic(n, 1)
        write_results(run, results)
        write_results(base, baseline_of(results, 2))
        # Wall and CPU time: on a machine shared with other work, CPU time is the steadier.
        started, cpu = time.perf_counter(), time.process_time()
        single = build_report(load_results_file(run))
        write_file(single.html, Path(tmp, "single.html"))
        alone, alone_cpu = time.perf_counter() - started, time.process_time() - cpu
        started, cpu = time.perf_counter(), time.process_time()
        current = load_results_file(run)
        baseline = load_results_file(base)
        loaded = time.perf_counter() - started
        built = build_report(current, baseline=baseline)
        write_file(built.html, page)
        total, total_cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"examples: {n:,} (results file {run.stat().st_size / 1e6:,.1f} MB)")
        print(
            f"report of the run alone, read + built + written: {alone:.2f} s "
            f"(CPU {alone_cpu:.2f} s), page {Path(tmp, 'single.html').stat().st_size / 1e6:,.1f} MB"
        )
        print(
            f"report against the baseline: {total:.2f} s (CPU {total_cpu:.2f} s; reading both "
            f"files {loaded:.2f} s), page {page.stat().st_size / 1e6:,.1f} MB"
        )
        c = built.comparison
        assert c is not None and c.difference is not None
        print(
            f"comparison: {c.worse:,} worse, {c.better:,} better, {c.only_baseline} missing, "
            f"{c.only_current} new; mean difference {c.difference.mean:+.4f} "
            f"[{c.difference.low:+.4f}, {c.difference.high:+.4f}]"
        )
        if not CHROMIUM.exists():
            print("Chromium not installed: page timings skipped", file=sys.stderr)
            return
        figures = browser(page)
        print(
            f"in Chromium: ready {figures['ready_s']:.2f} s, search {figures['search_s']:.2f} s, "
            f"sort {figures['sort_s']:.2f} s, open an example {figures['open_example_s']:.2f} s; "
            f"{figures['rows_in_dom']:.0f} rows in the DOM"
        )


if __name__ == "__main__":
    main()
