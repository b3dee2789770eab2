"""Hostile and careless results files: whatever a result holds, whatever the file's tail,
whoever else writes it, and however the disk fails, the writer never crashes, a resume
reads back every line written, and a file is only ever changed where the rules allow.

Classes of input with hypothesis: values JSON cannot hold (text with surrogates, NaN,
complex numbers, objects, cycles, odd keys), byte tails after good lines, datasets given
as the output, failures injected at any byte of a batch; and real ones: two processes on
one file, a tmpfs that fills up.
"""

from __future__ import annotations

import decimal
import errno
import json
import math
import multiprocessing
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator._call._results import ErrorInfo, Observation, Result
from evaluator._exceptions import (
    NotAResultsFile,
    ResultsFileError,
    ResultsLocked,
    ResultsWriteError,
)
from evaluator._fingerprint import HEADER_KEY, fingerprint_run
from evaluator._results_file._store import ResultsWriter, open_results, read_results
from tests._helpers import PROCESS

_settings = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Text that may hold lone surrogates (hypothesis leaves them out unless asked).
_text = st.text(st.one_of(st.characters(categories=["Cs"]), st.characters()), max_size=6)


class Custom:
    def __repr__(self) -> str:
        return "Custom()"


def _cyclic(items: list[Any]) -> list[Any]:
    items.append(items)
    return items


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and infinities included
    _text,
    st.complex_numbers(),
    st.binary(max_size=4),
    st.decimals(allow_nan=False),
    st.builds(Custom),
)
_key = st.one_of(_text, st.integers(), st.none(), st.booleans(), st.tuples(st.integers()))
_value = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=2).map(_cyclic),
        st.tuples(inner, inner),
        st.frozensets(st.integers(), max_size=3),
        st.dictionaries(_key, inner, max_size=3),
    ),
    max_leaves=8,
)
_result = st.builds(
    Result,
    example_id=st.one_of(st.integers(), _text),
    score=st.floats(0, 1),
    scores=st.dictionaries(_text, st.floats(0, 1), max_size=2),
    feedback=_text,
    error=st.one_of(st.none(), st.builds(ErrorInfo, st.just("metric_error"), _text)),
    output=_value,
    extra=st.dictionaries(_key, _value, max_size=2),
)


def _plainly_encodable(result: Result) -> bool:
    """Whether msgspec writes ``result`` as it is, losing nothing (no NaN turned null)."""
    try:
        msgspec.json.encode(result)
    except (TypeError, ValueError, RecursionError):
        return False
    return not _lossy((result.output, result.extra))


def _lossy(value: Any) -> bool:
    """Whether ``value`` holds a NaN or an infinity (a float's or a Decimal's) or a
    Custom: looked at, not at its repr (the text or the bytes ``NaN`` are stored as they
    are)."""
    if isinstance(value, float | decimal.Decimal):
        return not math.isfinite(value)
    if isinstance(value, Custom):
        return True
    if isinstance(value, dict):
        return any(_lossy(k) or _lossy(v) for k, v in value.items())
    if isinstance(value, list | tuple | frozenset):
        return any(_lossy(v) for v in value)
    return False


class TestAnyValue:
    @_settings
    @given(batch=st.lists(_result, min_size=1, max_size=6))
    def test_every_result_is_written_and_read_back(
        self, tmp_path_factory: Any, batch: list[Result]
    ) -> None:
        """Any batch is written, one line per result, each read back by a resume, with the
        score and error kind unchanged; a result that cannot be stored as it is has its
        change reported, one that can is stored exactly as msgspec writes it."""
        path = tmp_path_factory.mktemp("r") / "results.jsonl"
        writer, _ = open_results(path, fingerprints=None)
        with writer:
            changes = writer.write(batch)
        lines = path.read_bytes().splitlines()
        assert len(lines) == len(batch)
        back = list(read_results(path))
        assert [r.score for r in back] == [r.score for r in batch]
        assert [r.error and r.error.kind for r in back] == [r.error and r.error.kind for r in batch]
        for original, line in zip(batch, lines, strict=True):
            if _plainly_encodable(original):
                assert line == msgspec.json.encode(original)
            else:
                assert changes, f"{original!r} was changed silently"
        writer, resumed = open_results(path, fingerprints=None, resume=True)
        writer.close()
        assert resumed.results + resumed.duplicates == len(batch)

    @pytest.mark.parametrize("depth", [5_000, 100_000])
    def test_deep_output_is_stored_and_resumed(self, tmp_path: Path, depth: int) -> None:
        """An output nested past any parser's stack is cut with a marker; the line reads back."""
        deep: Any = "leaf"
        for _ in range(depth):
            deep = [deep]
        path = tmp_path / "r.jsonl"
        with ResultsWriter(path) as writer:
            changes = writer.write([Result(example_id="d", score=1.0, output=deep)])
        assert changes and "nested more than" in changes[0].problem
        writer, resumed = open_results(path, fingerprints=None, resume=True, dataset_ids=["d"])
        writer.close()
        assert resumed.done_ids == {"d"}

    def test_line_as_deep_as_the_writer_allowed_reads_back_from_a_deep_stack(
        self, tmp_path: Path
    ) -> None:
        """A line written from a shallow stack is read back even from a deep one."""
        deep: Any = 0
        for _ in range(850):
            deep = [deep]
        path = tmp_path / "r.jsonl"
        path.write_bytes(msgspec.json.encode(Result(example_id=1, score=1.0, output=deep)) + b"\n")

        def nested(n: int) -> list[Result]:
            return nested(n - 1) if n else list(read_results(path))

        (back,) = nested(300)
        assert back.output == deep


def _good_file(path: Path) -> bytes:
    writer, _ = open_results(path, fingerprints=None)
    with writer:
        writer.write([Result(example_id=i, score=0.5, output=f"o{i}") for i in range(3)])
    return path.read_bytes()


_result_line = msgspec.json.encode(Result(example_id=9, score=1.0)) + b"\n"
_header_line = json.dumps({HEADER_KEY: 1, "created": "x"}).encode() + b"\n"
_tails = st.one_of(
    st.binary(max_size=40),
    st.integers(1, len(_result_line)).map(lambda n: _result_line[:n]),
    st.integers(1, len(_header_line)).map(lambda n: _header_line[:n]),
    st.binary(max_size=20).map(lambda b: b + b"\n"),
    st.binary(max_size=20).map(lambda b: _result_line + b),
)


class TestTails:
    @_settings
    @given(tail=_tails)
    def test_any_tail_is_repaired_only_where_torn_or_refused_untouched(
        self, tmp_path_factory: Any, tail: bytes
    ) -> None:
        """After good lines, any tail: a resume either accepts the file (cutting only an
        unterminated start of a line, or adding only a missing newline) or refuses it and
        leaves every byte as it was. Nothing else escapes."""
        path = tmp_path_factory.mktemp("r") / "results.jsonl"
        good = _good_file(path)
        path.write_bytes(good + tail)
        try:
            writer, resumed = open_results(path, fingerprints=None, resume=True)
        except ResultsFileError:
            assert path.read_bytes() == good + tail
            return
        writer.close()
        after = path.read_bytes()
        assert after.startswith(good) and {0, 1, 2} <= resumed.done_ids
        added = after[len(good) :]
        last = tail.rsplit(b"\n", 1)[-1]  # the part after the tail's last newline
        if added == tail + b"\n":  # finished: the unterminated part was whole or blank
            assert not last.strip() or msgspec.json.decode(last)
        else:  # nothing else changed, or only that unterminated part was cut
            assert added in (tail, tail[: len(tail) - len(last)])

    @pytest.mark.slow  # every byte of a line: hundreds of files
    def test_killed_mid_line_then_resume_then_append(self, tmp_path: Path) -> None:
        """A result cut at every possible byte: the resume cuts it and appending goes on."""
        for cut in range(1, len(_result_line) - 1):
            path = tmp_path / f"r{cut}.jsonl"
            good = _good_file(path)
            path.write_bytes(good + _result_line[:cut])
            writer, resumed = open_results(path, fingerprints=None, resume=True)
            with writer:
                writer.write([Result(example_id=9, score=1.0)])
            assert path.read_bytes() == good + _result_line
            assert resumed.done_ids == {0, 1, 2}


_rows = st.lists(
    st.fixed_dictionaries(
        {"input": st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=3))},
        optional={"id": st.integers() | st.text(max_size=3), "expected": st.just({"y": 1})},
    ),
    min_size=1,
    max_size=4,
)


class TestNotAResultsFile:
    @_settings
    @given(rows=_rows, form=st.sampled_from(["jsonl", "json", "csv", "jsonl-no-newline"]))
    def test_dataset_as_output_is_refused_and_unchanged(
        self, tmp_path_factory: Any, rows: list[Any], form: str
    ) -> None:
        """Any dataset given as the output (with or without resume, through open_results or
        a bare writer) is refused and not changed by a single byte."""
        path = tmp_path_factory.mktemp("d") / "data.jsonl"
        if form.startswith("jsonl"):
            body = "\n".join(json.dumps(r) for r in rows) + ("" if "no-newline" in form else "\n")
        elif form == "json":
            body = json.dumps(rows, indent=1)
        else:
            body = "q,label\n" + "".join(f"{i},x\n" for i in range(len(rows)))
        path.write_text(body)
        before = path.read_bytes()
        for resume in (False, True):
            with pytest.raises(NotAResultsFile, match="not a results file"):
                open_results(path, fingerprints=None, resume=resume)
        with pytest.raises(NotAResultsFile):
            ResultsWriter(path).__enter__()
        assert path.read_bytes() == before

    def test_a_real_run_against_its_own_dataset(self, tmp_path: Path) -> None:
        """The fingerprinted flow of a run whose --output is its --data leaves it intact."""
        data = tmp_path / "data.jsonl"
        data.write_text("".join(json.dumps({"id": i, "input": {"q": i}}) + "\n" for i in range(5)))
        metric = tmp_path / "metric.py"
        metric.write_text("def score(input, output):\n    return 1.0, {'feedback': ''}\n")
        before = data.read_bytes()
        prints = fingerprint_run(dataset=data, metric=metric)
        with pytest.raises(NotAResultsFile):
            open_results(data, fingerprints=prints, resume=True, dataset_ids=range(5))
        assert data.read_bytes() == before


def _contend(path: str, barrier: Any, outcome: Any) -> None:
    barrier.wait(30)
    try:
        writer, _ = open_results(path, fingerprints=None, resume=True)
    except ResultsLocked:
        outcome.put("locked")
        barrier.wait(30)
        return
    outcome.put("writer")
    with writer:
        writer.write([Result(example_id=os.getpid(), score=1.0)])
        barrier.wait(30)  # hold the lock until every contender has tried


class TestTwoWriters:
    @pytest.mark.process
    def test_exactly_one_of_several_processes_writes(self, tmp_path: Path) -> None:
        """Processes opening one file at once: one writes, the others are refused, and the
        file holds exactly one result (no id written twice)."""
        path = tmp_path / "r.jsonl"
        ctx = multiprocessing.get_context("spawn")
        n = 3
        barrier, outcome = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_contend, args=(str(path), barrier, outcome)) for _ in range(n)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        got = sorted(outcome.get(timeout=5) for _ in range(n))
        assert got == ["locked"] * (n - 1) + ["writer"]
        assert len(list(read_results(path))) == 1


class Failing:
    """A raw file stand-in that accepts ``allow`` bytes, then fails with ``code``."""

    def __init__(self, fh: Any, code: int, allow: int) -> None:
        self.fh, self.code, self.allow = fh, code, allow

    def write(self, data: Any) -> int:
        if self.allow <= 0:
            raise OSError(self.code, os.strerror(self.code))
        n: int = self.fh.write(bytes(data)[: self.allow])
        self.allow -= n
        return n

    def fileno(self) -> int:
        return int(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


def _write_each(writer: ResultsWriter, batches: list[list[Result]]) -> None:
    for batch in batches:
        writer.write(batch)


class TestDiskFailures:
    @_settings
    @given(
        allow=st.integers(0, 3_000),
        code=st.sampled_from([errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT, errno.EFBIG]),
    )
    def test_failure_at_any_byte_leaves_whole_lines(
        self, tmp_path_factory: Any, allow: int, code: int
    ) -> None:
        """Whichever byte the disk fails at, the error counts what was written, the file
        holds exactly those whole lines, and a resume reads every one."""
        path = tmp_path_factory.mktemp("r") / "results.jsonl"
        # 20 lines of about 165 bytes: more than the largest `allow`, so the disk always fails.
        batches = [
            [Result(example_id=b * 10 + i, score=1.0, feedback="x" * 120) for i in range(4)]
            for b in range(5)
        ]
        writer, _ = open_results(path, fingerprints=None)
        with writer:
            writer._fh = Failing(writer._fh, code, allow)
            with pytest.raises(ResultsWriteError) as info:
                _write_each(writer, batches)
        error = info.value
        assert error.errno == code and error.written % 4 == 0
        assert "--resume" in str(error) and str(path) in str(error)
        writer, resumed = open_results(path, fingerprints=None, resume=True)
        writer.close()
        assert resumed.results == error.written == error.in_file
        assert path.read_bytes() == b"" or path.read_bytes().endswith(b"\n")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (needs root: skipped otherwise), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "disk"
    point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


class TestRealFullDisk:
    def test_disk_fills_up_then_resume_goes_on(self, small_disk: Path) -> None:
        """On a real full disk the writer raises one ResultsWriteError (ENOSPC) with the
        counts; every line on disk is whole; after space is freed, a resume reads every
        result and appending goes on."""
        path = small_disk / "results.jsonl"
        ballast = small_disk / "ballast"
        ballast.write_bytes(b"x" * 64 * 1024)
        payload = "p" * 700
        writer, _ = open_results(path, fingerprints=None)
        written = 0
        with writer, pytest.raises(ResultsWriteError) as info:  # noqa: PT012 - until full
            for b in range(1_000):
                writer.write(
                    [Result(example_id=b * 8 + i, score=1.0, output=payload) for i in range(8)]
                )
                written += 8
        assert info.value.errno == errno.ENOSPC and info.value.written == written
        assert "disk is full" in str(info.value)
        assert path.read_bytes().endswith(b"\n")
        ballast.unlink()
        writer, resumed = open_results(path, fingerprints=None, resume=True)
        with writer:
            writer.write([Result(example_id="after", score=1.0)])
        assert resumed.results == written
        assert len(list(read_results(path))) == written + 1


def test_observation_survives(tmp_path: Path) -> None:
    """A result with every measured field round-trips through a resume unchanged."""
    path = tmp_path / "r.jsonl"
    result = Result(
        example_id="o",
        score=0.25,
        observation=Observation(duration_ms=3.5, cost_usd=None, notes=("cost not measured: x",)),
        output={"t": "\ud800"},
    )
    with ResultsWriter(path) as writer:
        writer.write([result])
    (back,) = read_results(path)
    assert back.observation == result.observation and back.output == {"t": "\ufffd"}


ODD_PROGRAM = """
import math

class Thing:
    def __repr__(self):
        return "Thing()"

def run(artifact, input):
    loop = [1]
    loop.append(loop)
    deep = 0
    for _ in range(400):
        deep = [deep]
    return [
        1 + 2j, math.nan, math.inf, b"\\x00", {1, 2}, (1, 2), Thing(), loop, deep,
        {(1, 2): "tuple key"}, "lone \\ud800 surrogate",
    ][input["i"] % 11]
"""
ODD_METRIC = """
def score(input, output, expected=None):
    return 0.5, {"feedback": "fine", "note": [1j, "ok"]}
"""
SURROGATE_FEEDBACK_METRIC = """
def score(input, output, expected=None):
    return 0.5, {"feedback": "fine \\udc80 or not"}
"""
# Extra info that the contract's normalisation (msgspec, in _call/_contract.py) cannot encode.
ODD_EXTRA_METRIC = """
def score(input, output, expected=None):
    deep = 0
    for _ in range(5000):
        deep = [deep]
    return 0.5, {"feedback": "ok", "note": "\\ud800" if input["i"] % 2 else deep}
"""


class TestThroughTheEngine:
    @pytest.mark.parametrize("execution", ["thread", PROCESS])
    async def test_odd_outputs_are_scored_written_and_resumed(
        self, tmp_path: Path, execution: str
    ) -> None:
        """Programs returning values JSON cannot hold, in thread and worker processes: every
        example is scored (never a worker crash), written, and read back by a resume."""
        from evaluator._pipeline import Evaluator

        (tmp_path / "program.py").write_text(ODD_PROGRAM)
        # Feedback with a lone surrogate in threads, extra info JSON cannot hold in workers.
        metric = SURROGATE_FEEDBACK_METRIC if execution == "thread" else ODD_METRIC
        (tmp_path / "metric.py").write_text(metric)
        ids = list(range(22))
        rows = [{"id": i, "input": {"i": i}} for i in ids]
        async with Evaluator(
            tmp_path / "metric.py",
            tmp_path / "program.py",
            execution=execution,
            program_execution=execution,
            timeout=30,
        ) as ev:
            results = await ev.evaluate_many("artifact", rows)
        assert [r.error for r in results] == [None] * len(ids)
        path = tmp_path / "results.jsonl"
        writer, _ = open_results(path, fingerprints=None)
        with writer:
            changes = writer.write(results)
        # complex, NaN, inf, Thing, a cycle, a lone surrogate (400 levels of nesting fit).
        odd = {i for i in ids if i % 11 in (0, 1, 2, 6, 7, 10)}
        assert {c.example_id for c in changes} >= odd
        writer, resumed = open_results(path, fingerprints=None, resume=True, dataset_ids=ids)
        writer.close()
        assert resumed.done_ids == set(ids)
        assert [r.score for r in read_results(path)] == [0.5] * len(ids)

    async def test_surrogate_feedback_from_a_worker_process(self, tmp_path: Path) -> None:
        """Feedback holding a lone surrogate, from a metric in a worker process, is scored
        like in a thread, never a worker crash."""
        from evaluator._pipeline import Evaluator

        (tmp_path / "metric.py").write_text(SURROGATE_FEEDBACK_METRIC)
        rows = [{"id": i, "input": {}, "output": "o"} for i in range(3)]
        async with Evaluator(tmp_path / "metric.py", execution="process", timeout=30) as ev:
            results = await ev.evaluate_many(None, rows)
        assert [r.error for r in results] == [None] * 3

    @pytest.mark.process
    async def test_program_class_output_reaches_a_process_metric(self, tmp_path: Path) -> None:
        """An output whose class lives in program.py is that example's clear error (or is
        scored), never a worker crash of it and its batch neighbours."""
        from evaluator._pipeline import Evaluator

        (tmp_path / "program.py").write_text(ODD_PROGRAM)
        (tmp_path / "metric.py").write_text(ODD_METRIC)
        rows = [{"id": i, "input": {"i": i}} for i in range(4, 9)]
        async with Evaluator(
            tmp_path / "metric.py",
            tmp_path / "program.py",
            execution="process",
            program_execution="process",
            timeout=30,
        ) as ev:
            results = await ev.evaluate_many("artifact", rows)
        assert all(r.error is None or r.error.kind != "worker_crash" for r in results)


async def test_odd_extra_info_is_kept_not_blamed_on_the_metric(tmp_path: Path) -> None:
    """A lone surrogate or deep nesting in the metric's extra info is stored by the rule
    (or named as what it is), never reported as `score` raising UnicodeEncodeError or
    RecursionError."""
    from evaluator._pipeline import Evaluator

    (tmp_path / "metric.py").write_text(ODD_EXTRA_METRIC)
    rows = [{"id": i, "input": {"i": i}, "output": "o"} for i in range(2)]
    async with Evaluator(tmp_path / "metric.py", execution="thread", timeout=30) as ev:
        results = await ev.evaluate_many(None, rows)
    assert [r.error for r in results] == [None, None]


@pytest.mark.parametrize("resume", [False, True])
def test_cli_run_with_its_dataset_as_output_leaves_it_intact(tmp_path: Path, resume: bool) -> None:
    """`skynet-eval run --output <the dataset>` stops with a usage error (exit 2) and the
    dataset keeps every byte, with or without --resume."""
    import sys

    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "input": {}, "output": "o"}) + "\n" for i in range(3))
    )
    metric = tmp_path / "metric.py"
    metric.write_text("def score(input, output):\n    return 1.0, {'feedback': ''}\n")
    before = data.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    argv = [sys.executable, "-m", "evaluator", "run", "--metric", str(metric), "--data", str(data)]
    argv += ["--output", str(data), "--execution", "thread", *(["--resume"] if resume else [])]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    if resume:
        assert "not a results file" in done.stderr
    assert data.read_bytes() == before
