"""`skynet-eval run`: the main command, its exit codes, --output and --resume, and the
product page's judge and reward metrics, verbatim, through it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[3]
CLASSIFY = ROOT / "examples" / "classify"
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
JUDGES = ROOT / "examples" / "judges"

SLOW_METRIC = """
import time
EXECUTION = "inline"

def score(input, output, expected=None):
    time.sleep(0.004)
    return float(output == expected["label"]), {"feedback": "ok"}
"""


def _dataset(path: Path, n: int) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            row = {"id": f"r{i}", "input": {"n": i}, "expected": {"label": "a"}, "output": "a"}
            fh.write(json.dumps(row) + "\n")
    return path


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evaluator", "run", *args]


class TestRun:
    def test_readme_command_on_the_classify_example(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The README's main command runs the shipped example and exits 0 (accuracy 0.6)."""
        code = main(
            [
                "run",
                "--metric", str(CLASSIFY / "metric.py"),
                "--program", str(CLASSIFY / "program.py"),
                "--artifact", str(CLASSIFY / "prompt.txt"),
                "--data", str(CLASSIFY / "data.jsonl"),
                "--json",
            ]
        )  # fmt: skip
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        assert report["n"] == 30 and report["ok"] == 30
        assert report["mean_score"] == pytest.approx(0.6)

    def test_readme_command_on_the_openai_example(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The README's own-SDK command: the openai client's calls are served by the
        simulator and metered, the program's cost measured."""
        monkeypatch.setenv("OPENAI_API_KEY", "sk-simulated")
        example = ROOT / "examples" / "openai"
        code = main(
            [
                "run",
                "--program", str(example / "program.py"),
                "--metric", str(example / "metric.py"),
                "--artifact", str(example / "prompt.txt"),
                "--data", str(example / "data.jsonl"),
                "--simulator", str(example / "simulator.json"),
                "--json",
            ]
        )  # fmt: skip
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        assert report["n"] == report["ok"] == 24
        assert report["program_llm_calls"] == 24
        assert report["program_cost_usd"] > 0 and report["program_cost_unmeasured"] == 0

    def test_table_and_output_file(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --json the report is a table; --output gets one line per example."""
        out = tmp_path / "results.jsonl"
        code = main(
            [
                "run",
                "--metric", str(CLASSIFY / "metric.py"),
                "--program", str(CLASSIFY / "program.py"),
                "--artifact-text", "refund -> billing",
                "--data", str(CLASSIFY / "data.jsonl"),
                "--output", str(out),
            ]
        )  # fmt: skip
        assert code == 0
        text = capsys.readouterr().out
        assert "Metric return value" in text and "mean score" in text
        lines = out.read_text().splitlines()
        assert sorted(json.loads(line)["example_id"] for line in lines) == [
            f"t{i:02d}" for i in range(1, 31)
        ]

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--timeout", "900"], "--timeout must be between 0 and 600 seconds, got 900"),
            (["--data", "nope.jsonl"], "nope.jsonl: no such file"),
            (["--metric", "missing.py"], "--metric: no such file 'missing.py'"),
            (["--resume"], "--resume needs --output"),
        ],
    )
    def test_usage_errors_exit_2_with_one_line(
        self, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A user's mistake is one clear line on stderr and exit code 2, no traceback."""
        base = {
            "--metric": str(CLASSIFY / "metric.py"),
            "--data": str(CLASSIFY / "data.jsonl"),
        }
        for flag, value in zip(args[::2], args[1::2], strict=False):
            base[flag] = value
        argv = ["run"]
        for flag, value in base.items():
            argv += [flag, value]
        if args == ["--resume"]:
            argv.append("--resume")
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1

    def test_failed_contract_check_exits_1(self, tmp_path: Path) -> None:
        """A metric that breaks the contract stops the run before it starts (exit 1)."""
        metric = tmp_path / "bad.py"
        metric.write_text("def score(i, o, e=None):\n    return 0.5\n")
        data = _dataset(tmp_path / "d.jsonl", 5)
        out = tmp_path / "r.jsonl"
        code = main(["run", "--metric", str(metric), "--data", str(data), "--output", str(out)])
        assert code == 1
        assert not out.exists() or out.read_text() == ""


class TestResume:
    def test_kill_then_resume_gives_each_id_once(self, tmp_path: Path) -> None:
        """After SIGKILL mid-run, --resume completes the file: every id exactly once, and
        the lines written before the kill are kept as they were (none redone)."""
        metric = tmp_path / "slow.py"
        metric.write_text(textwrap.dedent(SLOW_METRIC))
        data = _dataset(tmp_path / "d.jsonl", 600)
        out = tmp_path / "r.jsonl"
        args = _cli("--metric", str(metric), "--data", str(data), "--output", str(out))
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if out.exists() and out.read_bytes().count(b"\n") >= 100:
                    break
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(10)
        kept = out.read_bytes()
        whole = kept[: kept.rfind(b"\n") + 1]
        assert 100 <= whole.count(b"\n") < 600
        out.write_bytes(whole + b'{"example_id": "r599", "sc')  # a torn last line as well
        resumed = subprocess.run(
            [*args, "--resume", "--json"], capture_output=True, text=True, timeout=90
        )
        assert resumed.returncode == 0, resumed.stderr
        final = out.read_bytes()
        assert final.startswith(whole)
        ids = [json.loads(line)["example_id"] for line in final.splitlines()]
        assert sorted(ids) == sorted(f"r{i}" for i in range(600))
        report = json.loads(resumed.stdout)
        assert report["n"] == 600 and report["resumed"] == whole.count(b"\n")
        assert "incomplete last line" in resumed.stderr

    def test_existing_output_needs_resume(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An --output that already holds results is not overwritten without --resume."""
        data = _dataset(tmp_path / "d.jsonl", 5)
        out = tmp_path / "r.jsonl"
        argv = ["run", "--metric", str(CLASSIFY / "metric.py"), "--data", str(data)]
        assert main([*argv, "--output", str(out), "--json"]) == 0
        capsys.readouterr()
        assert main([*argv, "--output", str(out)]) == 2
        assert "pass --resume" in capsys.readouterr().err

    @pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
    def test_ctrl_c_prints_the_partial_report_and_exits_130(self, tmp_path: Path) -> None:
        """SIGINT mid-run: the report of what was done is printed, results kept, exit 130."""
        metric = tmp_path / "slow.py"
        metric.write_text(textwrap.dedent(SLOW_METRIC))
        data = _dataset(tmp_path / "d.jsonl", 3000)
        out = tmp_path / "r.jsonl"
        proc = subprocess.Popen(
            _cli("--metric", str(metric), "--data", str(data), "--output", str(out), "--json"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and out.read_bytes().count(b"\n") >= 50:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130, stderr
        report = json.loads(stdout)
        lines = out.read_text().splitlines()
        assert report["n"] == len(lines) and 50 <= len(lines) < 3000
        assert "interrupted" in stderr


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
