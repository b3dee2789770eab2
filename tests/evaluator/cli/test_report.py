"""`skynet-eval report`: the command, its files, its exit codes and its errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from evaluator import ErrorInfo, Observation, Result
from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[3]
CLASSIFY = ROOT / "examples" / "classify"


def _write(path: Path, scores: dict[str, float], errors: tuple[str, ...] = ()) -> Path:
    results = [
        Result(
            example_id=key,
            score=score,
            feedback=f"feedback of {key}",
            error=ErrorInfo("metric_error", "boom") if key in errors else None,
            observation=Observation(duration_ms=5.0),
        )
        for key, score in scores.items()
    ]
    path.write_bytes(msgspec.json.Encoder().encode_lines(results))
    return path


def _run_classify(tmp_path: Path, name: str, artifact: Path) -> Path:
    out = tmp_path / f"{name}.jsonl"
    code = main(
        [
            "run",
            "--metric", str(CLASSIFY / "metric.py"),
            "--program", str(CLASSIFY / "program.py"),
            "--artifact", str(artifact),
            "--data", str(CLASSIFY / "data.jsonl"),
            "--output", str(out),
            "--execution", "inline",
            "--program-execution", "inline",
            "--json",
        ]
    )  # fmt: skip
    assert code == 0
    return out


class TestReport:
    def test_the_readme_flow_on_the_classify_example(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Two runs of the shipped example (the second with a rule removed) and a report of
        the second against the first: the page is written, the terminal shows the counts
        and the regression the change caused."""
        before = _run_classify(tmp_path, "before", CLASSIFY / "prompt.txt")
        changed = tmp_path / "prompt.txt"
        changed.write_text((CLASSIFY / "prompt.txt").read_text().replace("refund -> billing\n", ""))
        after = _run_classify(tmp_path, "after", changed)
        capsys.readouterr()
        code = main(
            [
                "report",
                str(after),
                "--baseline",
                str(before),
                "--data",
                str(CLASSIFY / "data.jsonl"),
            ]
        )
        out = capsys.readouterr().out
        assert code == 0
        page = tmp_path / "after.html"
        assert page.exists() and f"report: {page}" in out
        assert re.search(r"examples in both runs\s*│\s*30\s", out)
        assert "largest regressions: t02 −1.0000" in out
        assert "worse / better / same" in out and "1 / 0 / 29" in out

    def test_html_goes_where_asked(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--html OUT writes there; --no-html writes nothing."""
        results = _write(tmp_path / "r.jsonl", {"a": 1.0})
        assert main(["report", str(results), "--html", str(tmp_path / "x" / "page.html")]) == 0
        assert (tmp_path / "x" / "page.html").exists()
        assert main(["report", str(results), "--no-html"]) == 0
        assert not (tmp_path / "r.html").exists()

    def test_json_summary(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--json prints the summary, the comparison and the regressions as one object."""
        run = _write(tmp_path / "run.jsonl", {"a": 0.0, "b": 1.0, "c": 1.0}, errors=("a",))
        base = _write(tmp_path / "base.jsonl", {"a": 1.0, "b": 1.0, "d": 1.0})
        assert main(["report", str(run), "--baseline", str(base), "--json", "--no-html"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["summary"]["n"] == 3 and payload["summary"]["errors"] == {"metric_error": 1}
        c = payload["comparison"]
        assert (c["matched"], c["worse"], c["same"], c["only_current"], c["only_baseline"]) == (
            2, 1, 1, 1, 1,
        )  # fmt: skip
        assert c["newly_failing"] == 1
        assert payload["regressions"] == [{"example_id": "a", "difference": -1.0}]
        assert payload["html"] is None

    def test_fail_on_regression(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A run clearly worse than its baseline exits 1 and says why; an unclear one 0."""
        n = 40
        good = _write(tmp_path / "good.jsonl", {f"e{i}": 1.0 for i in range(n)})
        bad = _write(tmp_path / "bad.jsonl", {f"e{i}": 0.0 if i % 2 else 1.0 for i in range(n)})
        code = main(
            ["report", str(bad), "--baseline", str(good), "--no-html", "--fail-on-regression"]
        )
        err = capsys.readouterr().err
        assert code == 1
        assert "regression: the mean score fell by 0.5000" in err and "wholly below 0" in err
        assert (
            main(
                ["report", str(good), "--baseline", str(good), "--no-html", "--fail-on-regression"]
            )
            == 0
        )

    def test_fail_on_missing_examples(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A run that misses baseline examples fails --fail-on-regression: a missing case
        is not a passing case."""
        run = _write(tmp_path / "run.jsonl", {"a": 1.0})
        base = _write(tmp_path / "base.jsonl", {"a": 1.0, "b": 1.0})
        assert (
            main(["report", str(run), "--baseline", str(base), "--no-html", "--fail-on-regression"])
            == 1
        )
        assert "1 example(s) of the baseline are missing from this run" in capsys.readouterr().err


class TestUserErrors:
    def test_a_torn_line_is_one_clear_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A damaged results file exits 2 with the file and line named, no traceback."""
        path = _write(tmp_path / "r.jsonl", {"a": 1.0})
        with path.open("ab") as fh:
            fh.write(b'{"example_id": "b", "sc')
        assert main(["report", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"skynet-eval report: error: {path}:2: the last line is cut short")
        assert "Traceback" not in err and not (tmp_path / "r.html").exists()

    def test_the_page_never_overwrites_the_results(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--html pointing at the results file is refused and the file is untouched."""
        path = _write(tmp_path / "r.jsonl", {"a": 1.0})
        content = path.read_bytes()
        assert main(["report", str(path), "--html", str(path)]) == 2
        assert "would destroy the results" in capsys.readouterr().err
        assert path.read_bytes() == content

    @pytest.mark.parametrize(
        ("extra", "message"),
        [
            (["--fail-on-regression"], "--fail-on-regression compares with a baseline"),
            (["--input-cols", "q"], "--input-cols/--output-cols describe --data"),
            (["--tolerance", "-1"], "--tolerance must be 0 or more"),
            (["--data", "nope.jsonl"], "--data nope.jsonl: no such file"),
        ],
    )
    def test_bad_options(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
    ) -> None:
        """Options that cannot work together are a usage error naming them."""
        path = _write(tmp_path / "r.jsonl", {"a": 1.0})
        assert main(["report", str(path), "--no-html", *extra]) == 2
        assert message in capsys.readouterr().err

    def test_a_missing_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A results path that does not exist is named."""
        assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
        assert "the results file does not exist" in capsys.readouterr().err


class TestEntryPoint:
    def test_python_dash_m(self, tmp_path: Path) -> None:
        """The subcommand is registered on the real command line."""
        path = _write(tmp_path / "r.jsonl", {"a": 1.0, "b": 0.0})
        done = subprocess.run(
            [sys.executable, "-m", "evaluator", "report", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["summary"]["n"] == 2
        assert (tmp_path / "r.html").exists()
