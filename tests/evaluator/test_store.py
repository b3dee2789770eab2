"""The results file: append, flush per write, resume past a torn last line."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluator._exceptions import ConfigError
from evaluator._results import ErrorInfo, Observation, Result
from evaluator._store import ResultsWriter, ResumeWarning, done_ids, read_results


def _results(ids: range) -> list[Result]:
    return [
        Result(
            example_id=i if i % 2 else f"s{i}",
            score=0.5,
            scores={"a": 1.0},
            feedback="fb",
            error=ErrorInfo("metric_error", "x") if i % 3 == 0 else None,
            observation=Observation(duration_ms=1.5, notes=("n",)),
            output={"k": [1, 2]},
        )
        for i in ids
    ]


class TestResultsWriter:
    def test_round_trip_and_flush_per_write(self, tmp_path: Path) -> None:
        """Each write is on disk at once, whole lines, and reads back equal."""
        path = tmp_path / "out" / "results.jsonl"
        first, second = _results(range(5)), _results(range(5, 9))
        with ResultsWriter(path) as writer:
            writer.write(first)
            assert path.read_bytes().count(b"\n") == 5  # flushed before close
            writer.write(second)
        assert list(read_results(path)) == first + second
        assert done_ids(path) == {r.example_id for r in first + second}


class TestReadResults:
    def test_incomplete_last_line_is_dropped_and_cut(self, tmp_path: Path) -> None:
        """A torn last line is dropped with a warning and cut off the file."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(3)))
        whole = path.read_bytes()
        path.write_bytes(whole + b'{"example_id": 7, "sco')
        with pytest.warns(ResumeWarning, match="incomplete last line"):
            assert len(list(read_results(path))) == 3
        assert path.read_bytes() == whole
        with ResultsWriter(path) as writer:  # appending goes on cleanly
            writer.write(_results(range(3, 4)))
        assert len(list(read_results(path))) == 4

    def test_damaged_middle_line_is_an_error(self, tmp_path: Path) -> None:
        """A broken line before the last is refused, naming the file and line."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(2)))
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(lines[0] + b"\nnot json\n" + lines[1] + b"\n")
        with pytest.raises(ConfigError, match=r"r\.jsonl:2: not a result line"):
            list(read_results(path))

    def test_missing_file_has_no_results(self, tmp_path: Path) -> None:
        """A results file that does not exist yet reads as empty."""
        assert done_ids(tmp_path / "none.jsonl") == set()
