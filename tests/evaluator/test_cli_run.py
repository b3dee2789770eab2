"""`skynet-eval run`: the main command, its exit codes, --output and --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[2]
CLASSIFY = ROOT / "examples" / "classify"

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
