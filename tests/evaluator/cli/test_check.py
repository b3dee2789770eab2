"""`skynet-eval check`: the steps printed, --json, exit codes and usage errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from evaluator._cli import main
from tests._helpers import write

ROOT = Path(__file__).resolve().parents[3]
METRICS = ROOT / "examples" / "metrics"
LABELS = METRICS / "labels.jsonl"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["check", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def failed_step(report: dict) -> dict:  # type: ignore[type-arg]
    return next(s for s in report["steps"] if not s["ok"])


class TestCheckCommand:
    def test_pass(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A passing metric prints every step with a pass mark and exits 0."""
        assert main(["check", str(METRICS / "exact_match.py"), "--data", str(LABELS)]) == 0
        out = capsys.readouterr().out
        assert "✓ Metric file" in out and "✓ Metric return value" in out and "passed" in out

    def test_fail_return_value(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A string score fails Metric return value, naming the example and the fix; exit 1."""
        assert main(["check", str(METRICS / "broken_score.py"), "--data", str(LABELS)]) == 1
        out = capsys.readouterr().out
        assert "✗ Metric return value" in out
        assert "example 'q1': the score is a str ('1.0'); return a number" in out

    def test_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--json prints one object with the steps' names, marks, messages and example ids."""
        code, report = run_json(capsys, str(METRICS / "broken_score.py"), "--data", str(LABELS))
        assert code == 1 and report["ok"] is False
        assert [set(s) for s in report["steps"]] == [{"name", "ok", "message", "example_id"}] * 4
        step = failed_step(report)
        assert step["name"] == "Metric return value" and step["example_id"] == "q1"

    def test_syntax_error(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A syntax error fails Metric file with the file and line."""
        path = write(tmp_path, "metric.py", "def score(i, o):\n    return (1.0, {'feedback': ''}\n")
        code, report = run_json(capsys, str(path), "--data", str(LABELS))
        step = failed_step(report)
        assert code == 1 and step["name"] == "Metric file"
        assert f"{path.resolve()}:2" in step["message"] or f"{path.resolve()}:1" in step["message"]

    def test_bad_signature(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A one-argument score fails Metric signature after Metric file passes."""
        code, report = run_json(
            capsys,
            str(write(tmp_path, "metric.py", "def score(x):\n    pass\n")),
            "--data",
            str(LABELS),
        )
        assert code == 1 and [s["ok"] for s in report["steps"]] == [True, False]
        assert report["steps"][1]["name"] == "Metric signature"

    def test_metric_raises(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A metric that raises fails Metric runs, naming the example and the line."""
        path = write(tmp_path, "metric.py", "def score(i, o, e=None):\n    return 1.0 / 0\n")
        code, report = run_json(capsys, str(path), "--data", str(LABELS))
        step = failed_step(report)
        assert code == 1 and step["name"] == "Metric runs" and step["example_id"] == "q1"
        assert "ZeroDivisionError" in step["message"] and "metric.py:2" in step["message"]

    @pytest.mark.slow
    def test_hang_times_out(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A hung metric fails Metric runs with the timeout named, without waiting for it (guard: 30 s)."""
        path = write(
            tmp_path, "metric.py", "import time\ndef score(i, o, e=None):\n    time.sleep(1000)\n"
        )
        started = time.monotonic()
        code, report = run_json(capsys, str(path), "--data", str(LABELS), "--timeout", "1")
        assert time.monotonic() - started < 30
        step = failed_step(report)
        assert code == 1 and step["name"] == "Metric runs" and "metric_timeout" in step["message"]

    @pytest.mark.parametrize("timeout", ["900", "0", "-1"])
    def test_timeout_refused(self, timeout: str, capsys: pytest.CaptureFixture[str]) -> None:
        """A timeout above 600 or not positive is refused with exit 2 and says so."""
        assert (
            main(
                [
                    "check",
                    str(METRICS / "exact_match.py"),
                    "--data",
                    str(LABELS),
                    "--timeout",
                    timeout,
                ]
            )
            == 2
        )
        assert "greater than 0 and at most 600 seconds" in capsys.readouterr().err

    def test_missing_files(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A missing metric or dataset is a usage error, exit 2, one line."""
        assert main(["check", str(tmp_path / "nope.py"), "--data", str(LABELS)]) == 2
        assert (
            main(["check", str(METRICS / "exact_match.py"), "--data", str(tmp_path / "no.jsonl")])
            == 2
        )
        err = capsys.readouterr().err
        assert "nope.py" in err and "no.jsonl" in err and "Traceback" not in err

    def test_bad_flag(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown flag is a usage error: main returns 2 and says which flag."""
        assert (
            main(["check", str(METRICS / "exact_match.py"), "--data", str(LABELS), "--bogus"]) == 2
        )
        assert "--bogus" in capsys.readouterr().err
