"""`skynet-eval run` keeps a model-bound stage at its model budget, and its report (table
and --json) says which executor each stage used, why, and the model budget in force."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main
from llm_client import Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[3]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
EXACT = ROOT / "examples" / "metrics" / "exact_match.py"
CLASSIFY = ROOT / "examples" / "classify"


def judge_data(path: Path, n: int) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            row = {
                "id": i,
                "input": {"question": f"What is {i} + {i}?"},
                "output": str(2 * i),
                "expected": {"answer": str(2 * i)},
            }
            fh.write(json.dumps(row) + "\n")
    return path


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(SimulatorConfig(latency_ms=200)).running_in_thread() as simulator:
        yield simulator


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["run", *args, "--json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def judge_args(sim: Simulator, data: Path) -> list[str]:
    return [
        "--metric", str(JUDGE), "--data", str(data), "--metric-model", "judge-1",
        "--metric-base-url", sim.base_url, "--api-key-env", "none",
    ]  # fmt: skip


@pytest.mark.slow
class TestModelBoundRun:
    def test_judge_keeps_at_least_64_calls_in_flight_and_says_why(
        self, sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The page's judge metric with default settings keeps >= 60 calls in flight at
        a server that allows any number, and --json says: threads as many as the model's
        in-flight limit (64 at the start, growing while latency stays flat), because it
        calls skynet.llm; the budget is the default one, with no rate limit."""
        report = run_json(capsys, *judge_args(sim, judge_data(tmp_path / "d.jsonl", 300)))
        assert report["n"] == report["ok"] == 300
        assert sim.statistics().peak_in_flight >= 60
        (executor,) = report["executors"]
        assert executor == {
            "stage": "score",
            "kind": "thread",
            "parallelism": executor["parallelism"],
            "source": "automatic",
            "reason": "calls skynet.llm (model-bound)",
            "option": None,
        }
        (budget,) = report["model_budgets"]
        assert executor["parallelism"] == max(64, budget["in_flight_limit"])
        assert budget["in_flight_start"] == 64 and budget["in_flight_max"] >= 64
        assert budget["in_flight_source"] in ("start", "adaptive (latency)")
        assert {k: budget[k] for k in ("model", "roles", "max_concurrency", "rpm", "tpm")} == {
            "model": "judge-1",
            "roles": ["judge"],
            "max_concurrency": 1024,
            "rpm": None,
            "tpm": None,
        }
        assert budget["source"] == "none"

    def test_concurrency_caps_the_run(
        self, sim: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--concurrency caps the calls in flight at the server and the threads."""
        data = judge_data(tmp_path / "d.jsonl", 60)
        report = run_json(capsys, *judge_args(sim, data), "--concurrency", "12")
        assert report["ok"] == 60
        assert sim.statistics().peak_in_flight == 12
        assert report["executors"][0]["parallelism"] == 12

    def test_table_shows_the_executor_and_the_configured_budget(
        self,
        sim: Simulator,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The table names the metric's executor and reason, and the model budget with
        the configured rpm."""
        monkeypatch.setenv("COLUMNS", "200")  # one row per line, whatever the terminal
        data = judge_data(tmp_path / "d.jsonl", 6)
        assert main(["run", *judge_args(sim, data), "--rpm", "6000"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "metric executor │ thread x64: calls skynet.llm (model-bound)" in out
        # rate x latency needs far fewer than 64 here: the limit stays at its start.
        assert (
            "model budget: judge-1 (judge) │ 64 in flight (cap 1024), 6000 rpm, no tpm limit "
            "(configured)" in out
        ), out


class TestExecutorReasons:
    def test_options_are_named_as_flags(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A stage placed by --execution / --program-execution says so, with the flag."""
        monkeypatch.setenv("COLUMNS", "200")
        code = main(
            [
                "run",
                "--metric", str(CLASSIFY / "metric.py"),
                "--program", str(CLASSIFY / "program.py"),
                "--artifact", str(CLASSIFY / "prompt.txt"),
                "--data", str(CLASSIFY / "data.jsonl"),
                "--execution", "inline", "--program-execution", "thread", "--workers", "3",
            ]
        )  # fmt: skip
        assert code == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "program executor │ thread x3: option --program-execution" in out
        assert "metric executor │ inline x1: option --execution" in out

    def test_execution_in_the_file_and_the_automatic_cpu_choice(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--json names the file's EXECUTION as the reason, and a plain sync metric as
        CPU-bound in worker processes (as many as it really runs)."""
        metric = tmp_path / "metric.py"
        metric.write_text('EXECUTION = "inline"\n' + EXACT.read_text())
        rows = tmp_path / "labels.jsonl"
        rows.write_text(
            "".join(
                json.dumps({"id": i, "input": {}, "output": "a", "expected": {"label": "a"}}) + "\n"
                for i in range(4)
            )
        )
        from_file = run_json(capsys, "--metric", str(metric), "--data", str(rows))
        assert from_file["executors"][0] == {
            "stage": "score",
            "kind": "inline",
            "parallelism": 1,
            "source": "EXECUTION",
            "reason": "EXECUTION in metric.py",
            "option": None,
        }
        cpu = tmp_path / "cpu.py"
        cpu.write_text(textwrap.dedent(EXACT.read_text()))
        automatic = run_json(capsys, "--metric", str(cpu), "--data", str(rows), "--workers", "2")
        (stage,) = automatic["executors"]
        assert (stage["kind"], stage["parallelism"], stage["reason"]) == (
            "process",
            2,
            "plain sync function (calls no model)",
        )
        assert automatic["model_budgets"] == []
