"""The results file: header, append, lock, resume with fingerprints, repair, write failures."""

from __future__ import annotations

import errno
import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._results import ErrorInfo, Observation, Result, Usage
from evaluator._exceptions import (
    ConfigError,
    NotAResultsFile,
    ResultsFileError,
    ResultsLocked,
    ResultsWriteError,
    ResumeMismatch,
)
from evaluator._fingerprint import HEADER_KEY, Fingerprints, fingerprint_run
from evaluator._results_file._store import (
    ResultsWriter,
    ResumeWarning,
    done_ids,
    open_results,
    read_results,
)

#: A score-only result line as skynet-eval wrote it before it left defaults out.
OLD_LINE = (
    '{"example_id":0,"score":0.0,"scores":{},"feedback":"Expected \'a\', got \'b\'."'
    ',"error":null,"observation":{"input_tokens":0,"output_tokens":0'
    ',"cached_tokens":0,"reasoning_tokens":0,"duration_ms":null,"queued_ms":0.0'
    ',"cost_usd":null,"llm_calls":0,"retries":0,"rate_limited":0'
    ',"notes":["time not measured: score-only run (no program)"'
    ',"cost not measured: score-only run (no program)"]},"judge":{"input_tokens":0'
    ',"output_tokens":0,"cached_tokens":0,"reasoning_tokens":0,"llm_calls":0'
    ',"cost_usd":0.0,"queued_ms":0.0,"retries":0,"rate_limited":0,"notes":[]}'
    ',"metric_ms":0.00699,"output":"b","extra":{},"cached":false}'
)


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


def _ids(n: int) -> list[Any]:
    return [r.example_id for r in _results(range(n))]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A dataset and a metric to fingerprint."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": i, "input": {"i": i}}) + "\n" for i in _ids(10)))
    metric = tmp_path / "metric.py"
    metric.write_text("def score(input, output):\n    return 1.0, {'feedback': ''}\n")
    return {"data": data, "metric": metric}


def _prints(files: dict[str, Path]) -> Fingerprints:
    return fingerprint_run(dataset=files["data"], metric=files["metric"])


class Failing:
    """A raw file stand-in that writes ``allow`` bytes, then fails with ``code``."""

    def __init__(self, fh: Any, code: int, allow: int = 0) -> None:
        self.fh = fh
        self.code = code
        self.allow = allow

    def write(self, data: Any) -> int:
        if self.allow <= 0:
            raise OSError(self.code, "injected failure")
        n: int = self.fh.write(bytes(data)[: self.allow])
        self.allow -= n
        return n

    def fileno(self) -> int:
        return int(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


def _hold_lock(path: str, ready: Any, release: Any) -> None:
    with ResultsWriter(path):
        ready.set()
        release.wait(30)


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

    def test_second_writer_is_refused_while_the_first_is_open(self, tmp_path: Path) -> None:
        """One file, one writer: another open is refused at once, and allowed after close."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(2)))
            with pytest.raises(ResultsLocked, match="another skynet-eval run is writing"):
                ResultsWriter(path).__enter__()
        with ResultsWriter(path) as again:
            again.write(_results(range(2, 3)))
        assert len(list(read_results(path))) == 3

    def test_writer_in_another_process_is_refused(self, tmp_path: Path) -> None:
        """The lock holds across processes: a run in another process is refused."""
        path = tmp_path / "r.jsonl"
        ctx = multiprocessing.get_context("spawn")
        ready, release = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_hold_lock, args=(str(path), ready, release))
        proc.start()
        try:
            assert ready.wait(60)
            with pytest.raises(ResultsLocked):
                open_results(path, fingerprints=None)
        finally:
            release.set()
            proc.join(30)
        writer, _ = open_results(path, fingerprints=None)
        writer.close()

    def test_write_failure_is_one_clear_error_and_keeps_whole_lines(self, tmp_path: Path) -> None:
        """A disk error mid-batch raises ResultsWriteError (path, counts, how to resume);
        the half-written batch is cut off, and later writes raise the same error."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(3)))
            writer._fh = Failing(writer._fh, errno.EIO, allow=50)
            with pytest.raises(ResultsWriteError) as info:
                writer.write(_results(range(3, 6)))
            error = info.value
            assert (error.written, error.in_file, error.errno) == (3, 3, errno.EIO)
            assert str(path) in str(error) and "--resume" in str(error) and "EIO" in str(error)
            with pytest.raises(ResultsWriteError):
                writer.write(_results(range(6, 7)))
        assert path.read_bytes().endswith(b"\n")
        assert [r.example_id for r in read_results(path)] == _ids(3)

    def test_write_failure_after_resume_counts_the_whole_file(self, tmp_path: Path) -> None:
        """After a resume, the error counts this run's results and the file's separately."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(3)))
        writer, _ = open_results(path, fingerprints=None, resume=True)
        with writer:
            writer.write(_results(range(3, 5)))
            writer._fh = Failing(writer._fh, errno.ENOSPC)
            with pytest.raises(ResultsWriteError) as info:
                writer.write(_results(range(5, 6)))
        assert (info.value.written, info.value.in_file) == (2, 5)

    @pytest.mark.parametrize(
        ("code", "words"),
        [(errno.ENOSPC, "disk is full"), (errno.EROFS, "read-only"), (errno.EDQUOT, "quota")],
    )
    def test_write_failure_says_what_to_do(self, tmp_path: Path, code: int, words: str) -> None:
        """Each common disk failure names its cause and the fix before the resume."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer._fh = Failing(writer._fh, code)
            with pytest.raises(ResultsWriteError, match=words):
                writer.write(_results(range(1)))
        assert path.read_bytes() == b""

    def test_header_goes_before_the_first_result_of_a_new_file(
        self, tmp_path: Path, files: dict[str, Path]
    ) -> None:
        """A new file's first line is the header; it is written with the first result."""
        path = tmp_path / "r.jsonl"
        writer, resumed = open_results(path, fingerprints=_prints(files))
        with writer:
            assert path.read_bytes() == b""  # nothing yet: a run that stops writes nothing
            writer.write(_results(range(2)))
        first = json.loads(path.read_text().splitlines()[0])
        assert next(iter(first)) == HEADER_KEY and first[HEADER_KEY] == 1
        assert first["dataset"]["path"] == str(files["data"])
        assert len(first["metric"]["sha256"]) == 64
        assert resumed.done_ids == set()

    def test_bare_writer_refuses_a_file_that_is_not_results(self, tmp_path: Path) -> None:
        """Appending to a dataset through a bare writer is refused; the file is unchanged."""
        path = tmp_path / "data.jsonl"
        path.write_text('{"input": {"q": 1}}\n')
        with pytest.raises(NotAResultsFile):
            ResultsWriter(path).__enter__()
        assert path.read_text() == '{"input": {"q": 1}}\n'

    def test_bare_writer_refuses_a_torn_file(self, tmp_path: Path) -> None:
        """A bare writer never glues a result onto a torn line: it asks for a resume."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(1)))
        path.write_bytes(path.read_bytes() + b'{"example_id": 9, "sc')
        with pytest.raises(ResultsFileError, match="incomplete line"):
            ResultsWriter(path).__enter__()

    def test_changes_are_counted_and_kept(self, tmp_path: Path) -> None:
        """A value JSON cannot hold is replaced; the writer returns and keeps the change."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            changes = writer.write([Result(example_id="c", score=1.0, output=2j)])
        assert [c.field for c in changes] == ["output"]
        assert writer.changed == 1 and writer.changes == changes
        (back,) = read_results(path)
        assert back.score == 1.0 and back.output == {"skynet_unstored": "complex", "repr": "2j"}


class TestResultLines:
    """A result line leaves out the fields at their defaults; every reader fills them."""

    def test_defaults_are_left_out_and_read_back(self, tmp_path: Path) -> None:
        """A result of defaults is written as its id and score, and reads back equal."""
        path = tmp_path / "r.jsonl"
        plain = Result(example_id="a", score=1.0)
        with ResultsWriter(path) as writer:
            writer.write([plain])
        assert json.loads(path.read_bytes()) == {"example_id": "a", "score": 1.0}
        assert list(read_results(path)) == [plain]

    def test_values_equal_to_a_default_are_kept(self, tmp_path: Path) -> None:
        """Only a field that is its default is left out: -0.0, 0 and empty values the
        program made stay as they were, and every other field round-trips."""
        path = tmp_path / "r.jsonl"
        full = Result(
            example_id=0,
            score=-0.0,
            scores={"a": 0.0},
            feedback="f",
            error=ErrorInfo("metric_error", "m"),
            observation=Observation(duration_ms=0.0, queued_ms=-0.0, cost_usd=None, notes=("n",)),
            judge=Usage(input_tokens=3, llm_calls=1, cost_usd=0.25),
            metric_ms=0.0,
            output=[],
            extra={"k": None},
            cached=True,
            repeat=2,
        )
        with ResultsWriter(path) as writer:
            writer.write([full])
        (back,) = read_results(path)
        assert back == full
        assert str(back.score) == "-0.0" and str(back.observation.queued_ms) == "-0.0"

    def test_a_line_with_every_field_reads_the_same(self, tmp_path: Path) -> None:
        """A line that spells out every field (as files were written before defaults
        were left out) reads back equal to the same result written now, resumed too."""
        old = tmp_path / "old.jsonl"
        old.write_text(OLD_LINE + "\n")
        (result,) = read_results(old)
        new = tmp_path / "new.jsonl"
        with ResultsWriter(new) as writer:
            writer.write([result])
        assert len(new.read_bytes()) < len(OLD_LINE) / 2
        assert list(read_results(new)) == [result]
        assert result.observation.notes and result.judge == Usage() and result.error is None
        seen: list[Result] = []
        writer, resumed = open_results(
            old, fingerprints=None, resume=True, dataset_ids=[0], on_result=seen.append
        )
        writer.close()
        assert resumed.done_ids == {0} and seen == [result]


class TestOpenResults:
    def write(self, path: Path, files: dict[str, Path], n: int) -> None:
        writer, _ = open_results(path, fingerprints=_prints(files))
        with writer:
            writer.write(_results(range(n)))

    def test_existing_results_need_resume(self, tmp_path: Path, files: dict[str, Path]) -> None:
        """A file with results is not appended to without resume."""
        path = tmp_path / "r.jsonl"
        self.write(path, files, 2)
        with pytest.raises(ResultsFileError, match="already holds 2 result"):
            open_results(path, fingerprints=_prints(files))

    def test_resume_counts_dataset_ids_once(self, tmp_path: Path, files: dict[str, Path]) -> None:
        """Duplicates and ids outside the dataset are never counted, and are reported."""
        path = tmp_path / "r.jsonl"
        self.write(path, files, 4)
        with ResultsWriter(path) as writer:  # a second run's lines, and another dataset's
            writer.write(_results(range(2)))
            writer.write([Result(example_id="elsewhere", score=1.0)])
        kept: list[Result] = []
        writer, resumed = open_results(
            path,
            fingerprints=_prints(files),
            resume=True,
            dataset_ids=_ids(10),
            on_result=kept.append,
        )
        writer.close()
        assert resumed.done_ids == set(_ids(4)) and resumed.results == 4
        assert (resumed.duplicates, resumed.foreign) == (2, 1)
        assert [r.example_id for r in kept] == _ids(4)
        notes = " ".join(resumed.notes)
        assert "ignored 1 result line(s) for ids that are not in the dataset" in notes
        assert "ignored 2 repeated" in notes

    def test_ids_match_by_type(self, tmp_path: Path, files: dict[str, Path]) -> None:
        """A result for id "1" does not count for the dataset's id 1 (nor True for 1)."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write([Result(example_id="1", score=1.0), Result(example_id=True, score=1.0)])
        writer, resumed = open_results(path, fingerprints=None, resume=True, dataset_ids=[1])
        writer.close()
        assert resumed.done_ids == set() and resumed.foreign == 2

    def test_changed_metric_is_refused_naming_it(
        self, tmp_path: Path, files: dict[str, Path]
    ) -> None:
        """A resume with an edited metric is refused, naming the metric and both digests."""
        path = tmp_path / "r.jsonl"
        self.write(path, files, 3)
        files["metric"].write_text("def score(input, output):\n    return 0.0, {'feedback': ''}\n")
        before = path.read_bytes()
        with pytest.raises(ResumeMismatch) as info:
            open_results(path, fingerprints=_prints(files), resume=True, dataset_ids=_ids(10))
        assert "the metric changed" in str(info.value) and "force" in str(info.value)
        assert info.value.results == 3 and len(info.value.changes) == 1
        assert path.read_bytes() == before

    def test_force_keeps_results_and_marks_the_switch(
        self, tmp_path: Path, files: dict[str, Path]
    ) -> None:
        """Forced, the old results count, the note says what was kept, and a new header
        is appended before this run's first result."""
        path = tmp_path / "r.jsonl"
        self.write(path, files, 3)
        files["data"].write_text(files["data"].read_text() + '{"id": "new", "input": {}}\n')
        ids = [*_ids(10), "new"]
        writer, resumed = open_results(
            path, fingerprints=_prints(files), resume=True, force=True, dataset_ids=ids
        )
        with writer:
            writer.write([Result(example_id="new", score=1.0)])
        assert resumed.done_ids == set(_ids(3))
        assert resumed.forced and "the dataset changed" in resumed.forced[0]
        assert any("forced" in n for n in resumed.notes)
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert HEADER_KEY in lines[-2] and "forced" in lines[-2]["note"]
        # The appended header is now the one in force: the next resume is clean.
        writer, again = open_results(
            path, fingerprints=_prints(files), resume=True, dataset_ids=ids
        )
        writer.close()
        assert again.forced == [] and again.done_ids == {*_ids(3), "new"}

    def test_moved_files_are_a_note(self, tmp_path: Path, files: dict[str, Path]) -> None:
        """The same content at another path resumes, with a note naming the move."""
        path = tmp_path / "r.jsonl"
        self.write(path, files, 2)
        moved = files["data"].rename(tmp_path / "moved.jsonl")
        prints = fingerprint_run(dataset=moved, metric=files["metric"])
        writer, resumed = open_results(path, fingerprints=prints, resume=True)
        writer.close()
        assert resumed.forced == [] and any("moved.jsonl" in n for n in resumed.notes)

    def test_legacy_file_resumes_with_a_note_and_gains_a_header(
        self, tmp_path: Path, files: dict[str, Path]
    ) -> None:
        """A file from before headers is accepted, said to be unchecked, and given a header."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(2)))
        writer, resumed = open_results(path, fingerprints=_prints(files), resume=True)
        with writer:
            writer.write(_results(range(2, 3)))
        assert resumed.legacy and "predates fingerprints" in resumed.notes[0]
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        assert HEADER_KEY in lines[2] and len(lines) == 4

    def test_newer_format_is_refused(self, tmp_path: Path) -> None:
        """A header of a format this version cannot read is refused unless forced."""
        path = tmp_path / "r.jsonl"
        path.write_text(json.dumps({HEADER_KEY: 2, "created": "x", "new": 1}) + "\n")
        with ResultsWriter(path) as writer:
            writer.write(_results(range(1)))
        with pytest.raises(ResultsFileError, match="format 2"):
            open_results(path, fingerprints=None, resume=True)
        writer, resumed = open_results(path, fingerprints=None, resume=True, force=True)
        writer.close()
        assert resumed.results == 1

    def test_torn_line_is_cut_and_whole_line_is_finished(
        self, tmp_path: Path, files: dict[str, Path]
    ) -> None:
        """A cut-short last line is cut off; a whole last line missing its newline gets one."""
        path = tmp_path / "r.jsonl"
        self.write(path, files, 2)
        whole = path.read_bytes()
        path.write_bytes(whole + b'{"example_id": 7, "sco')
        writer, resumed = open_results(path, fingerprints=_prints(files), resume=True)
        writer.close()
        assert path.read_bytes() == whole and any("cut off" in n for n in resumed.notes)
        line = json.dumps({"example_id": "w", "score": 1.0}).encode()
        path.write_bytes(whole + line)
        writer, resumed = open_results(path, fingerprints=_prints(files), resume=True)
        writer.close()
        assert path.read_bytes() == whole + line + b"\n" and "w" in resumed.done_ids

    def test_complete_bad_last_line_is_never_deleted(
        self, tmp_path: Path, files: dict[str, Path]
    ) -> None:
        """A complete last line that is not a result is an error, and stays in the file."""
        path = tmp_path / "r.jsonl"
        self.write(path, files, 2)
        path.write_bytes(path.read_bytes() + b'{"note": "mine"}\n')
        before = path.read_bytes()
        with pytest.raises(ResultsFileError, match=r"r\.jsonl:4: not a result line"):
            open_results(path, fingerprints=_prints(files), resume=True)
        assert path.read_bytes() == before

    def test_dataset_as_output_is_never_changed(self, files: dict[str, Path]) -> None:
        """Pointing the output at the dataset is refused, with or without resume."""
        before = files["data"].read_bytes()
        for resume in (False, True):
            with pytest.raises(NotAResultsFile, match="not a results file"):
                open_results(files["data"], fingerprints=_prints(files), resume=resume)
        assert files["data"].read_bytes() == before


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

    def test_torn_line_of_a_live_writer_is_left_alone(self, tmp_path: Path) -> None:
        """While a writer holds the file, a reader never cuts its last line."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(1)))
            path.write_bytes(path.read_bytes() + b'{"example_id": 7')
            with pytest.warns(ResumeWarning, match="left in the file"):
                assert len(list(read_results(path))) == 1
            assert path.read_bytes().endswith(b'{"example_id": 7')

    def test_damaged_middle_line_is_an_error(self, tmp_path: Path) -> None:
        """A broken line before the last is refused, naming the file and line."""
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            writer.write(_results(range(2)))
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(lines[0] + b"\nnot json\n" + lines[1] + b"\n")
        with pytest.raises(ConfigError, match=r"r\.jsonl:2: not a result line"):
            list(read_results(path))

    def test_headers_are_skipped(self, tmp_path: Path, files: dict[str, Path]) -> None:
        """Header lines are not results."""
        path = tmp_path / "r.jsonl"
        writer, _ = open_results(path, fingerprints=_prints(files))
        with writer:
            writer.write(_results(range(2)))
        assert list(read_results(path)) == _results(range(2))

    def test_missing_file_has_no_results(self, tmp_path: Path) -> None:
        """A results file that does not exist yet reads as empty."""
        assert done_ids(tmp_path / "none.jsonl") == set()
