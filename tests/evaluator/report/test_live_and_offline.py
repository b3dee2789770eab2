"""The live report of a run and the offline report of its results file are one Report:
the same builder over the same results, so every number agrees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator._cli import main
from evaluator._report._stats import offline_report, summarize, summary_of
from evaluator._results_file._load import load_results_file

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "openai"

# Some examples fail (a metric error with its message), the others return named scores;
# the first ones pass, so that the contract check before the run does.
LATE = ("10 + 25", "21 + 28", "38 + 38", "28 + 11", "28 + 9")
METRIC = (
    f"LATE = {LATE!r}\n"
    + """

def score(input, output, expected=None):
    if input["question"].removeprefix("What is ").removesuffix("?") in LATE:
        raise ValueError("no verdict for " + input["question"])
    ok = float(output == expected["verdict"])
    return ok, {"feedback": "checked", "scores": {"verdict": ok, "half": ok / 2}}
"""
)

#: What only the run knows: its clock, its executors, its models' budgets.
RUN_ONLY = {"wall_s", "throughput", "executors", "model_budgets", "detail"}


def test_the_live_report_and_the_report_of_its_file_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run over the simulator (metered program calls, costs, errors, named scores)
    prints a --json report equal, number for number, to the report of its --output."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-simulated")
    metric = tmp_path / "metric.py"
    metric.write_text(METRIC)
    out = tmp_path / "results.jsonl"
    argv = [
        "run",
        "--program", str(EXAMPLE / "program.py"),
        "--metric", str(metric),
        "--artifact", str(EXAMPLE / "prompt.txt"),
        "--data", str(EXAMPLE / "data.jsonl"),
        "--simulator", str(EXAMPLE / "simulator.json"),
        "--output", str(out),
        "--json",
    ]  # fmt: skip
    main(argv)  # its exit code is the run's (errors among the results): not what is tested
    live: dict[str, Any] = json.loads(capsys.readouterr().out)
    offline = offline_report(load_results_file(out).results)
    again: dict[str, Any] = json.loads(msgspec.json.encode(offline))
    assert live["errors"] and live["scores"] and live["program_llm_calls"] == live["n"]
    assert live["program_cost_usd"] > 0 and live["failures"]
    assert {k: v for k, v in live.items() if k not in RUN_ONLY} == {
        k: v for k, v in again.items() if k not in RUN_ONLY
    }
    # The page's numbers are that report's, named for the page.
    page = summarize(load_results_file(out).results)
    assert page == summary_of(offline)
    assert (page.n, page.ok, page.errors) == (live["n"], live["ok"], live["errors"])
    assert (
        page.mean_score == live["mean_score"]
        and page.program_cost_usd == (live["program_cost_usd"])
    )
    assert page.program_ms.p95 == live["program_latency"]["p95_ms"]
    assert page.metric_ms.p50 == live["metric_latency"]["p50_ms"]
