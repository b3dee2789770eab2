"""`skynet-eval run --cache DIR` and `skynet-eval cache stats|clear DIR`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[3]
OPENAI = ROOT / "examples" / "openai"


def _run(cache: Path) -> list[str]:
    return [
        "run",
        "--program", str(OPENAI / "program.py"),
        "--metric", str(OPENAI / "metric.py"),
        "--artifact", str(OPENAI / "prompt.txt"),
        "--data", str(OPENAI / "data.jsonl"),
        "--simulator", str(OPENAI / "simulator.json"),
        "--execution", "inline",
        "--cache", str(cache),
        "--json",
    ]  # fmt: skip


class TestRunWithCache:
    def test_second_run_pays_nothing_and_says_what_it_saved(
        self,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A second `run --cache DIR` takes every result from the cache: the JSON report
        gives requested vs executed examples, $0 spent now and the cost saved, and the
        same mean score."""
        monkeypatch.setenv("OPENAI_API_KEY", "sk-simulated")
        assert main(_run(tmp_path / "cache")) == 0
        first = json.loads(capsys.readouterr().out)
        assert main(_run(tmp_path / "cache")) == 0
        second = json.loads(capsys.readouterr().out)
        assert first["cache"]["executed"] == first["cache"]["requested"] == 24
        cache = second["cache"]
        assert (cache["requested"], cache["executed"], cache["cached"]) == (24, 0, 24)
        assert cache["cost_spent_usd"] == 0.0
        assert cache["cost_saved_usd"] == pytest.approx(first["cache"]["cost_spent_usd"])
        assert first["cache"]["cost_spent_usd"] > 0
        assert second["mean_score"] == first["mean_score"]

    def test_table_has_the_cache_rows(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --json the report's table says how many examples came from the cache."""
        classify = ROOT / "examples" / "classify"
        args = [
            "run",
            "--metric", str(classify / "metric.py"),
            "--program", str(classify / "program.py"),
            "--artifact", str(classify / "prompt.txt"),
            "--data", str(classify / "data.jsonl"),
            "--execution", "inline",
            "--program-execution", "inline",
            "--cache", str(tmp_path / "c"),
        ]  # fmt: skip
        assert main(args) == 0
        capsys.readouterr()
        assert main(args) == 0
        out = capsys.readouterr().out
        assert "30 of 30 examples from the cache" in out

    def test_cache_that_is_a_file_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--cache FILE` is a usage error naming the flag, one line, exit 2."""
        path = tmp_path / "file"
        path.write_text("x")
        code = main([*_run(path)[:-3], "--cache", str(path)])
        assert code == 2
        err = capsys.readouterr().err
        assert "--cache must be a directory" in err and "Traceback" not in err


class TestCacheCommand:
    def test_stats_and_clear(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`cache stats` counts the entries a run stored; `cache clear` deletes them."""
        classify = ROOT / "examples" / "classify"
        cache = tmp_path / "c"
        args = [
            "run",
            "--metric", str(classify / "metric.py"),
            "--program", str(classify / "program.py"),
            "--artifact", str(classify / "prompt.txt"),
            "--data", str(classify / "data.jsonl"),
            "--execution", "inline",
            "--program-execution", "inline",
            "--cache", str(cache),
            "--json",
        ]  # fmt: skip
        assert main(args) == 0
        capsys.readouterr()
        assert main(["cache", "stats", str(cache), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["entries"] == 30
        assert main(["cache", "stats", str(cache)]) == 0
        assert "entries 30" in capsys.readouterr().out
        assert main(["cache", "clear", str(cache)]) == 0
        assert "cleared 30 entries" in capsys.readouterr().out
        assert main(["cache", "stats", str(cache), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["entries"] == 0

    def test_directory_without_a_cache_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`cache stats DIR` on a directory with no cache says so in one line, exit 2,
        and creates nothing."""
        assert main(["cache", "stats", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "holds no result cache" in err and "Traceback" not in err
        assert list(tmp_path.iterdir()) == []


class TestWarnings:
    @pytest.mark.filterwarnings("default::evaluator.CacheWarning")
    def test_corrupt_cache_is_one_warning_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A corrupt cache file is one warning line on stderr naming where it was moved;
        the command succeeds on the new cache."""
        (tmp_path / "results.sqlite3").write_bytes(b"garbage" * 10)
        assert main(["cache", "stats", str(tmp_path)]) == 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith("skynet-eval cache: warning: result cache ")
        assert "moved it to results.sqlite3.bad-" in err[0]
