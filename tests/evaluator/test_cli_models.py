"""The product page's judge and reward metrics, verbatim, through `skynet-eval run`."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[2]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
JUDGES = ROOT / "examples" / "judges"
CLASSIFY = ROOT / "examples" / "classify"


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class TestJudgeMetric:
    @pytest.mark.parametrize("execution", ["thread", "process"])
    def test_page_judge_on_the_simulator(self, tmp_path: Path, execution: str) -> None:
        """The page's judge runs unchanged in threads (its default) and forced into worker
        processes (calls relayed to the engine): same verdicts, one metered call each."""
        out = tmp_path / "r.jsonl"
        args = [
            "run",
            "--metric",
            str(JUDGE),
            "--data",
            str(JUDGES / "data.jsonl"),
            "--metric-model",
            "judge-mini",
            "--simulator",
            str(JUDGES / "simulator.json"),
            "--price-input",
            "0.15",
            "--price-output",
            "0.6",
            "--output",
            str(out),
            "--json",
        ]
        if execution == "process":
            args += ["--execution", "process"]
        assert main(args) == 0
        rows = results(out)
        assert len(rows) == 40 and all(r["error"] is None for r in rows)
        assert all(r["judge"]["llm_calls"] == 1 and r["judge"]["cost_usd"] > 0 for r in rows)
        assert {r["score"] for r in rows} == {0.0, 1.0}
        assert all(r["feedback"].startswith(("PASS", "FAIL")) for r in rows)

    def test_thread_and_process_agree(self, tmp_path: Path) -> None:
        """Deterministic replies: the same verdicts whichever executor runs the judge."""
        got = {}
        for execution in ("thread", "process"):
            out = tmp_path / f"{execution}.jsonl"
            assert (
                main(
                    [
                        "run",
                        "--metric",
                        str(JUDGE),
                        "--data",
                        str(JUDGES / "data.jsonl"),
                        "--metric-model",
                        "judge-mini",
                        "--simulator",
                        str(JUDGES / "simulator.json"),
                        "--execution",
                        execution,
                        "--output",
                        str(out),
                        "--json",
                    ]
                )
                == 0
            )
            got[execution] = {r["example_id"]: r["score"] for r in results(out)}
        assert got["thread"] == got["process"]

    def test_unknown_price_is_unmeasured(self, tmp_path: Path) -> None:
        """A judge model with no known price leaves the judge cost None, with the reason."""
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(JUDGE),
                    "--data",
                    str(JUDGES / "data.jsonl"),
                    "--metric-model",
                    "judge-mini",
                    "--simulator",
                    str(JUDGES / "simulator.json"),
                    "--output",
                    str(out),
                    "--json",
                ]
            )
            == 0
        )
        rows = results(out)
        assert all(r["judge"]["cost_usd"] is None for r in rows)
        assert all(any("judge-mini" in n for n in r["judge"]["notes"]) for r in rows)

    def test_no_model_is_a_clear_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The judge without any model configured: each example's error names the option."""
        out = tmp_path / "r.jsonl"
        code = main(
            [
                "run",
                "--metric",
                str(JUDGE),
                "--data",
                str(JUDGES / "data.jsonl"),
                "--output",
                str(out),
                "--json",
            ]
        )
        assert code == 1  # the contract check's Metric runs step fails
        assert "--metric-model" in capsys.readouterr().err


class TestRewardMetric:
    def test_page_reward_through_run(self, tmp_path: Path) -> None:
        """The page's reward example runs unchanged with a program whose time is controlled:
        speed = r/(r + ms) from the measured time, cost 0 gives a cost component of 1."""
        program = tmp_path / "program.py"
        program.write_text(
            textwrap.dedent("""
            import time
            def run(artifact, input):
                time.sleep(0.05)
                return "billing"
        """)
        )
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(CLASSIFY / "reward_metric.py"),
                    "--program",
                    str(program),
                    "--data",
                    str(CLASSIFY / "data.jsonl"),
                    "--output",
                    str(out),
                    "--json",
                ]
            )
            == 0
        )
        rows = results(out)
        assert len(rows) == 30
        for r in rows:
            obs = r["observation"]
            own = obs["duration_ms"] - obs["queued_ms"]
            assert 50 <= own < 2000  # slept 50 ms; generous guard for a loaded machine
            assert r["scores"]["speed"] == pytest.approx(2000 / (2000 + own), rel=1e-6)
            assert r["scores"]["cost"] == 1.0
            accuracy = r["scores"]["accuracy"]
            assert accuracy in (0.0, 1.0)
            want = 0.7 * accuracy + 0.2 * r["scores"]["speed"] + 0.1 * 1.0
            assert r["score"] == pytest.approx(want, rel=1e-9)
            assert "speed" in r["feedback"].lower() and "cost" in r["feedback"].lower()

    def test_score_only_has_no_speed(self, tmp_path: Path) -> None:
        """Score-only, time is not measured: speed is 0 and the feedback says why."""
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(ROOT / "examples" / "metrics" / "reward_blend.py"),
                    "--data",
                    str(ROOT / "examples" / "metrics" / "labels.jsonl"),
                    "--output",
                    str(out),
                    "--json",
                ]
            )
            == 0
        )
        for r in results(out):
            assert r["scores"]["speed"] == 0.0
            assert "not measured" in r["feedback"]


class TestCheckResultsKept:
    def test_check_examples_are_not_run_twice(self, tmp_path: Path) -> None:
        """The contract check's three examples are the run's own results: each example's
        metric runs once, and each id is in the results file once."""
        calls = tmp_path / "calls.txt"
        metric = tmp_path / "metric.py"
        metric.write_text(
            textwrap.dedent(f"""
            EXECUTION = "inline"
            def score(input, output, expected=None):
                with open({str(calls)!r}, "a") as fh:
                    fh.write(str(input["n"]) + "\\n")
                return 1.0, {{"feedback": "ok"}}
        """)
        )
        data = tmp_path / "d.jsonl"
        data.write_text(
            "".join(json.dumps({"id": i, "input": {"n": i}, "output": i}) + "\n" for i in range(7))
        )
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(metric),
                    "--data",
                    str(data),
                    "--output",
                    str(out),
                    "--json",
                ]
            )
            == 0
        )
        assert sorted(int(x) for x in calls.read_text().split()) == list(range(7))
        assert sorted(r["example_id"] for r in results(out)) == list(range(7))
