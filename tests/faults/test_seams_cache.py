"""The result cache where it meets damaged values and the files user code reads (issue 24,
items 5 and 10).

Item 5: a stored value that is damaged (a bit flipped, cut short, random bytes, a value of
another ``Result`` layout, a score edited in place) is a miss, counted in one warning per
run, and replaced by the fresh result; never a crash, never a wrong hit. ``--resume`` over
a damaged results file ends with one line (or repairs a torn last line), no traceback.

Item 10: a metric that reads ``rubric.txt`` at import, a helper imported from a sibling
folder through ``sys.path``, the files that helper reads: an edit to any of them makes the
next cached run compute again. Files read only during calls are warned about and can be
added with ``cache_key_files`` / ``--cache-key-file``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
import textwrap
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator._cache import FILE_NAME, CacheWarning, KeyMaker, ResultCache
from evaluator._cache._cache import seal
from evaluator._call._loader import load_metric
from evaluator._call._results import Observation, Result
from evaluator._cli import main
from evaluator._data._dataset import Example
from evaluator._fingerprint import HEADER_KEY
from evaluator._models import Models
from evaluator._pipeline import Evaluator

METRIC = """
def score(input, output, expected=None):
    return float(output == expected["label"]), {"feedback": f"saw {output!r}"}
"""
ARTIFACT = "the artifact"


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def examples(n: int) -> list[Example]:
    return [Example(id=f"e{i}", input={"n": i}, expected={"label": "a"}) for i in range(n)]


def fresh(batch: list[Example]) -> list[Result]:
    """The results the metric would give: example ``eN`` scores N / 10."""
    return [
        Result(
            ex.id,
            int(str(ex.id)[1:]) / 10,
            {"exact": 1.0},
            f"feedback of {ex.id}",
            None,
            Observation(duration_ms=1.0),
        )
        for ex in batch
    ]


def keys_for(folder: Path) -> KeyMaker:
    return KeyMaker(load_metric(write(folder, "metric.py", METRIC)), None, Models())


async def fill(keys: KeyMaker, directory: Path, batch: list[Example]) -> dict[Any, bytes]:
    """One run: every example of ``batch`` missed, computed and stored; its keys by id."""
    async with ResultCache(keys, directory=directory) as cache:
        found = await cache.lookup(ARTIFACT, batch)
        assert len(found.misses) == len(batch)
        cache.store(found, fresh(found.misses))
        return {ex.id: key for ex, key in zip(batch, found.keys, strict=True) if key is not None}


def rows(directory: Path) -> dict[bytes, bytes]:
    with sqlite3.connect(directory / FILE_NAME) as conn:
        return dict(conn.execute("SELECT key, value FROM results"))


def overwrite(directory: Path, values: dict[bytes, bytes]) -> None:
    """Change stored values in place: SQLite stays intact, the bytes are others."""
    with sqlite3.connect(directory / FILE_NAME) as conn:
        conn.executemany(
            "UPDATE results SET value = ? WHERE key = ?", [(v, k) for k, v in values.items()]
        )


async def run_once(keys: KeyMaker, directory: Path, batch: list[Example]) -> tuple[Any, list[Any]]:
    """One run over ``batch``: hits served, misses computed and stored. The statistics,
    and every warning the run gave (when the cache closed too)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with ResultCache(keys, directory=directory) as cache:
            found = await cache.lookup(ARTIFACT, batch)
            results = found.merge(fresh(found.misses))
            cache.store(found, fresh(found.misses))
            stats = cache.statistics()
    for expected, got in zip(fresh(batch), results, strict=True):
        assert (got.example_id, got.score, got.feedback) == (
            expected.example_id,
            expected.score,
            expected.feedback,
        )
    return stats, list(caught)


def damaged_warnings(caught: list[Any]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, CacheWarning) and "failed their check" in str(w.message)
    ]


# -- ways a stored value goes bad ------------------------------------------------------


def _flip(value: bytes, data: st.DataObject) -> bytes:
    i = data.draw(st.integers(0, len(value) - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    return value[:i] + bytes([value[i] ^ (1 << bit)]) + value[i + 1 :]


def _truncate(value: bytes, data: st.DataObject) -> bytes:
    return value[: data.draw(st.integers(0, len(value) - 1), label="length")]


def _random(value: bytes, data: st.DataObject) -> bytes:
    return data.draw(st.binary(max_size=300).filter(lambda b: b != value), label="bytes")


def _foreign_layout(value: bytes, data: st.DataObject, key: bytes = b"") -> bytes:
    """A value sealed as ours, digest right, whose msgpack is not this engine's Result:
    another version's layout (a field renamed or retyped, a list, a bare number)."""
    other = data.draw(
        st.sampled_from(
            [
                {"example_id": "e0", "score": "high"},
                {"id": "e0", "value": 0.5},
                ["e0", 0.5, {}, "feedback"],
                0.5,
                {"example_id": "e0", "score": 0.5, "scores": {"exact": "yes"}},
                {"example_id": "e0", "score": 0.5, "observation": [1, 2, 3]},
            ]
        ),
        label="layout",
    )
    return seal(key, msgspec.msgpack.encode(other))


def _other_version(value: bytes, data: st.DataObject) -> bytes:
    """This engine's own payload under another version's header (format or layout tag)."""
    i = data.draw(st.integers(0, 6), label="header byte")
    head = bytearray(value[:7])
    head[i] ^= 0xFF
    return bytes(head) + value[7:]


def _edited_score(value: bytes, data: st.DataObject) -> bytes:
    """The score changed in place: a valid Result, the old digest kept."""
    result = msgspec.msgpack.decode(value[23:], type=Result)
    result.score = data.draw(st.floats(allow_nan=False).filter(lambda s: s != result.score))
    return value[:23] + msgspec.msgpack.encode(result)


DAMAGES: dict[str, Callable[..., bytes]] = {
    "flip": _flip,
    "truncate": _truncate,
    "random": _random,
    "foreign layout": _foreign_layout,
    "other version": _other_version,
    "edited score": _edited_score,
}
KEYED = {"foreign layout"}  # these seal with the entry's own key


@pytest.mark.timeout(300)
class TestDamagedValues:
    # 14 examples: each of the 6 damages about twice, across 1-4 damaged entries.
    @pytest.mark.slow  # 14 examples, each three Evaluator runs on a disk cache
    @settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), how=st.sampled_from(sorted(DAMAGES)), n_bad=st.integers(1, 4))
    def test_a_damaged_value_is_a_counted_miss_then_replaced(
        self, data: st.DataObject, how: str, n_bad: int
    ) -> None:
        """Damaged values (flipped, cut short, random, another layout or version, a score
        edited in place): every result still right, the damaged ones run again, one
        warning counting them, and the next run serves them from the cache, right."""
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            keys = keys_for(folder)
            batch = examples(6)
            cache_dir = folder / "cache"
            by_id = asyncio.run(fill(keys, cache_dir, batch))
            stored = rows(cache_dir)
            bad_ids = [f"e{i}" for i in range(n_bad)]
            damage = DAMAGES[how]
            changed = {}
            for ex_id in bad_ids:
                key = by_id[ex_id]
                extra = {"key": key} if how in KEYED else {}
                changed[key] = damage(stored[key], data, **extra)
            overwrite(cache_dir, changed)

            stats, caught = asyncio.run(run_once(keys, cache_dir, batch))
            assert stats.damaged == n_bad
            assert stats.disk_hits == 6 - n_bad and stats.misses == n_bad
            assert damaged_warnings(caught) == [damaged_warnings(caught)[0]]  # exactly one
            assert f"{n_bad:,} stored result(s) failed their check" in damaged_warnings(caught)[0]

            stats, caught = asyncio.run(run_once(keys, cache_dir, batch))
            assert (stats.disk_hits, stats.misses, stats.damaged) == (6, 0, 0)
            assert not damaged_warnings(caught)
            assert all(rows(cache_dir)[by_id[i]] != changed[by_id[i]] for i in bad_ids)

    async def test_a_value_moved_to_another_key_is_refused(self, tmp_path: Path) -> None:
        """A whole valid value copied over another entry's (the digest is keyed by the
        entry's key): a miss, not a hit with the other example's score."""
        keys = keys_for(tmp_path)
        batch = examples(3)
        by_id = await fill(keys, tmp_path / "cache", batch)
        stored = rows(tmp_path / "cache")
        overwrite(tmp_path / "cache", {by_id["e1"]: stored[by_id["e2"]]})
        stats, caught = await run_once(keys, tmp_path / "cache", batch)  # checks every score
        assert (stats.damaged, stats.misses) == (1, 1)
        assert len(damaged_warnings(caught)) == 1

    async def test_a_damaged_value_in_memory_is_a_miss(self, tmp_path: Path) -> None:
        """The memory tier too: a value there that does not decode is a counted miss, and
        the fresh result takes its place."""
        keys = keys_for(tmp_path)
        batch = examples(3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with ResultCache(keys) as cache:
                found = await cache.lookup(ARTIFACT, batch)
                cache.store(found, fresh(found.misses))
                key = found.keys[0]
                assert key is not None
                cache._memory[key] = cache._memory[key][:30]  # cut short, in place
                found = await cache.lookup(ARTIFACT, batch)
                assert [ex.id for ex in found.misses] == ["e0"]
                cache.store(found, fresh(found.misses))
                again = await cache.lookup(ARTIFACT, batch)
                assert again.hit_count == 3 and again.hits[0] is not None
                assert again.hits[0].score == 0.0
                stats = cache.statistics()
        assert (stats.damaged, stats.memory_hits, stats.misses) == (1, 5, 4)
        assert len(damaged_warnings(caught)) == 1

    async def test_the_evaluator_runs_on_over_damaged_values(self, tmp_path: Path) -> None:
        """Through the Evaluator (inline): damaged entries of an earlier run give right
        scores, are counted once in one warning, and are hits again on the next run."""
        metric = write(tmp_path, "metric.py", METRIC)
        data = [
            {"id": f"e{i}", "input": {"n": i}, "expected": {"label": "a"}, "output": "ab"[i % 2]}
            for i in range(8)
        ]
        cache = tmp_path / "cache"

        async def run() -> tuple[list[Result], Any, list[Any]]:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                async with Evaluator(metric, execution="inline", cache=cache) as ev:
                    results = await ev.evaluate_many(None, data)
                    stats = ev.cache_statistics()
            return results, stats, list(caught)

        first, _, _ = await run()
        stored = rows(cache)
        overwrite(cache, {k: v[:-3] for k, v in list(stored.items())[:3]})
        second, stats, caught = await run()
        assert [r.score for r in second] == [r.score for r in first] == [1.0, 0.0] * 4
        assert sum(not r.cached for r in second) == 3 and stats.damaged == 3
        assert len(damaged_warnings(caught)) == 1
        third, stats, caught = await run()
        assert all(r.cached for r in third) and stats.damaged == 0 and not caught


# -- the CLI: one warning line; --resume over a damaged results file -------------------


def _dataset(folder: Path, n: int) -> Path:
    path = folder / "data.jsonl"
    with path.open("w") as fh:
        for i in range(n):
            row = {"id": i, "input": {"n": i}, "expected": {"label": "a"}, "output": "ab"[i % 2]}
            fh.write(json.dumps(row) + "\n")
    return path


def _cli_run(folder: Path, *extra: str) -> list[str]:
    return [
        "run", "--metric", str(folder / "metric.py"), "--data", str(folder / "data.jsonl"),
        "--execution", "inline", "--json", *extra,
    ]  # fmt: skip


@pytest.mark.timeout(120)
class TestCommandLine:
    def test_a_damaged_cache_gives_one_warning_line(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """run --cache over damaged values: exit 0, the right mean, one warning line."""
        write(tmp_path, "metric.py", METRIC)
        _dataset(tmp_path, 6)
        cache = tmp_path / "cache"
        assert main(_cli_run(tmp_path, "--cache", str(cache))) == 0
        overwrite(cache, {k: b"\x00garbage" for k in list(rows(cache))[:4]})
        capfd.readouterr()
        with warnings.catch_warnings():
            warnings.simplefilter("default", CacheWarning)  # shown, as outside pytest
            assert main(_cli_run(tmp_path, "--cache", str(cache))) == 0
        out, err = capfd.readouterr()
        report = json.loads(out)
        assert report["mean_score"] == 0.5 and report["cache"]["damaged"] == 4
        lines = [line for line in err.splitlines() if "failed their check" in line]
        assert len(lines) == 1 and "4 stored result(s)" in lines[0], err
        assert lines[0].startswith("skynet-eval run: warning: result cache")
        assert "Traceback" not in err

    @pytest.mark.parametrize(
        "garbage",
        [
            b"\xff\xfe\x00\x01 not json",
            b'{"example_id": 1, "score": "x"',
            b"[1, 2, 3]",
            b"\x00" * 40,
        ],
        ids=["binary", "half a result", "a list", "NUL bytes"],
    )
    def test_resume_over_a_damaged_line_is_one_error_line(
        self, tmp_path: Path, garbage: bytes, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """--resume over a results file with a damaged complete line: exit 2, one line
        naming the file and the line, the file unchanged, no traceback."""
        write(tmp_path, "metric.py", METRIC)
        _dataset(tmp_path, 4)
        out = tmp_path / "r.jsonl"
        assert main(_cli_run(tmp_path, "--output", str(out))) == 0
        lines = out.read_bytes().splitlines(keepends=True)
        lines[2] = garbage + b"\n"
        out.write_bytes(b"".join(lines))
        before = out.read_bytes()
        capfd.readouterr()
        assert main(_cli_run(tmp_path, "--output", str(out), "--resume")) == 2
        err = capfd.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1 and f"{out}:3" in errors[0], err
        assert "Traceback" not in err
        assert out.read_bytes() == before

    def test_resume_over_a_torn_last_line_runs_that_example_again(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """A last line cut short (a writer killed mid-line): --resume cuts it off with a
        warning, runs that example again, and the file holds each example once."""
        write(tmp_path, "metric.py", METRIC)
        _dataset(tmp_path, 4)
        out = tmp_path / "r.jsonl"
        assert main(_cli_run(tmp_path, "--output", str(out))) == 0
        data = out.read_bytes()
        out.write_bytes(data[: len(data) - 25])
        capfd.readouterr()
        assert main(_cli_run(tmp_path, "--output", str(out), "--resume")) == 0
        err = capfd.readouterr().err
        assert "Traceback" not in err
        ids = [
            json.loads(line)["example_id"]
            for line in out.read_text().splitlines()
            if line.strip() and HEADER_KEY not in json.loads(line)
        ]
        assert sorted(ids) == [0, 1, 2, 3]


# -- item 10: what user code reads is in the key ----------------------------------------

RUBRIC_AT_IMPORT = """
from pathlib import Path

RUBRIC = (Path(__file__).parent / "rubric.txt").read_text().strip()

def score(input, output, expected=None):
    return float(output == expected["label"]), {"feedback": RUBRIC}
"""
SIBLING_HELPER = """
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "shared"))
import {helper}

def score(input, output, expected=None):
    return {helper}.grade(output, expected), {{"feedback": {helper}.NOTE}}
"""
HELPER = """
import json
from pathlib import Path

LIMITS = json.loads((Path(__file__).parent / "limits.json").read_text())
NOTE = "helper v1"

def grade(output, expected):
    return float(output == expected["label"]) * LIMITS["weight"]
"""
RUBRIC_IN_CALLS = """
from pathlib import Path

def score(input, output, expected=None):
    rubric = (Path(__file__).parent / "rubric.txt").read_text().strip()
    return float(output == expected["label"]), {"feedback": rubric}
"""


SYSTEM_FILE = Path("/etc/os-release")


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"e{i}", "input": {"n": i}, "expected": {"label": "a"}, "output": "ab"[i % 2]}
        for i in range(n)
    ]


async def _evaluate(metric: Path, cache: Path, **options: Any) -> tuple[list[Result], list[Any]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with Evaluator(metric, cache=cache, **options) as ev:
            results = await ev.evaluate_many(None, _rows(4))
    return results, [w for w in caught if issubclass(w.category, CacheWarning)]


def _sibling(tmp_path: Path) -> tuple[Path, str]:
    """A metric in metric/ importing a helper from ../shared through sys.path; the
    helper reads limits.json at import. The helper's name is this test's own."""
    helper = f"helper_{uuid.uuid4().hex[:12]}"
    metric = write(tmp_path, "metric/metric.py", SIBLING_HELPER.format(helper=helper))
    write(tmp_path, f"shared/{helper}.py", HELPER)
    write(tmp_path, "shared/limits.json", '{"weight": 1.0}')
    return metric, helper


EDITS: dict[str, Callable[[Path, str], object]] = {
    "the helper's source": lambda root, helper: write(
        root, f"shared/{helper}.py", HELPER.replace("helper v1", "helper v2")
    ),
    "the file the helper reads": lambda root, helper: write(
        root, "shared/limits.json", '{"weight": 0.5}'
    ),
}


@pytest.mark.timeout(120)
class TestWhatUserCodeReads:
    async def test_a_rubric_read_at_import_is_keyed(self, tmp_path: Path) -> None:
        """rubric.txt read at import: the same run again is all hits; after an edit of
        the rubric every example computes again."""
        metric = write(tmp_path, "metric.py", RUBRIC_AT_IMPORT)
        write(tmp_path, "rubric.txt", "rubric v1")
        cache = tmp_path / "cache"
        first, caught = await _evaluate(metric, cache, execution="inline")
        assert not any(r.cached for r in first) and not caught
        again, _ = await _evaluate(metric, cache, execution="inline")
        assert all(r.cached for r in again)
        write(tmp_path, "rubric.txt", "rubric v2")
        edited, _ = await _evaluate(metric, cache, execution="inline")
        assert not any(r.cached for r in edited)

    @pytest.mark.parametrize("edit", sorted(EDITS))
    async def test_a_sibling_helper_and_its_files_are_keyed(
        self, tmp_path: Path, edit: str
    ) -> None:
        """A helper imported from a sibling folder through sys.path, and the JSON file it
        reads at import: an edit to either makes the next cached run compute again."""
        metric, helper = _sibling(tmp_path)
        cache = tmp_path / "cache"
        await _evaluate(metric, cache, execution="inline")
        again, _ = await _evaluate(metric, cache, execution="inline")
        assert all(r.cached for r in again)
        EDITS[edit](tmp_path, helper)
        edited, _ = await _evaluate(metric, cache, execution="inline")
        assert not any(r.cached for r in edited)

    async def test_a_process_executor_run_sees_the_edit(self, tmp_path: Path) -> None:
        """The process executor: after an edit of the rubric the workers compute again
        and the results carry the new rubric."""
        metric = write(tmp_path, "metric.py", RUBRIC_AT_IMPORT)
        write(tmp_path, "rubric.txt", "rubric v1")
        cache = tmp_path / "cache"
        first, _ = await _evaluate(metric, cache, execution="process", workers=1)
        assert {r.feedback for r in first} == {"rubric v1"}
        write(tmp_path, "rubric.txt", "rubric v2")
        edited, _ = await _evaluate(metric, cache, execution="process", workers=1)
        assert not any(r.cached for r in edited)
        assert {r.feedback for r in edited} == {"rubric v2"}  # the workers import afresh

    async def test_a_file_read_during_calls_is_warned_about(self, tmp_path: Path) -> None:
        """A rubric read inside score() is not in the key: the run warns once, naming
        it and --cache-key-file / cache_key_files."""
        metric = write(tmp_path, "metric.py", RUBRIC_IN_CALLS)
        rubric = write(tmp_path, "rubric.txt", "rubric v1")
        _, caught = await _evaluate(metric, tmp_path / "cache", execution="inline")
        messages = [str(w.message) for w in caught]
        assert len(messages) == 1, messages
        assert str(rubric) in messages[0] and "--cache-key-file" in messages[0]
        assert "cache_key_files" in messages[0]

    @pytest.mark.skipif(not SYSTEM_FILE.is_file(), reason="no /etc/os-release here")
    async def test_system_files_are_nobodys_input(self, tmp_path: Path) -> None:
        """A file under /etc read during calls (as SDKs read /etc/os-release for their
        user agent) is not warned about, nor keyed."""
        system = SYSTEM_FILE
        metric = write(
            tmp_path,
            "metric.py",
            RUBRIC_IN_CALLS.replace(
                '(Path(__file__).parent / "rubric.txt")', f"Path({str(system)!r})"
            ),
        )
        results, caught = await _evaluate(metric, tmp_path / "cache", execution="inline")
        assert all(r.ok for r in results) and not caught

    async def test_cache_key_files_adds_a_file(self, tmp_path: Path) -> None:
        """cache_key_files=[rubric]: no warning, and an edit of it computes again."""
        metric = write(tmp_path, "metric.py", RUBRIC_IN_CALLS)
        rubric = write(tmp_path, "rubric.txt", "rubric v1")
        cache = tmp_path / "cache"
        options = {"execution": "inline", "cache_key_files": [rubric]}
        _, caught = await _evaluate(metric, cache, **options)
        assert not caught
        again, _ = await _evaluate(metric, cache, **options)
        assert all(r.cached for r in again)
        write(tmp_path, "rubric.txt", "rubric v2")
        edited, _ = await _evaluate(metric, cache, **options)
        assert not any(r.cached for r in edited)
        assert {r.feedback for r in edited} == {"rubric v2"}

    def test_the_flag_adds_a_file_and_the_note_says_what_is_keyed(
        self, tmp_path: Path, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """run --cache prints what the key holds (the rubric read at import) and what it
        does not; --cache-key-file adds a file, and a missing one is one error line."""
        write(tmp_path, "metric.py", RUBRIC_AT_IMPORT)
        rubric = write(tmp_path, "rubric.txt", "rubric v1")
        extra = write(tmp_path, "extra.txt", "x")
        _dataset(tmp_path, 2)
        cache = str(tmp_path / "cache")
        capfd.readouterr()
        assert main(_cli_run(tmp_path, "--cache", cache, "--cache-key-file", str(extra))) == 0
        err = capfd.readouterr().err
        notes = [line for line in err.splitlines() if "the cache key holds" in line]
        assert len(notes) == 1 and str(rubric) in notes[0] and str(extra) in notes[0], err
        assert "not files first read during a call" in notes[0]
        missing = str(tmp_path / "missing.txt")
        assert main(_cli_run(tmp_path, "--cache", cache, "--cache-key-file", missing)) == 2
        err = capfd.readouterr().err
        assert f"--cache-key-file {missing} is missing" in err and "Traceback" not in err
        assert main(_cli_run(tmp_path, "--cache-key-file", str(extra))) == 2
        assert "add --cache DIR" in capfd.readouterr().err
