"""The disk tier on its own: concurrent processes, bad files, stats and clear."""

from __future__ import annotations

import multiprocessing
import sqlite3
import textwrap
from pathlib import Path

import pytest

from evaluator._cache import FILE_NAME, CacheWarning, DiskStore

WRITER = """
import asyncio, sys
from evaluator._pipeline import Evaluator

async def main(cache, metric, start, n):
    rows = [{"id": i, "input": {"n": i}, "expected": {"label": "a"}, "output": "a"}
            for i in range(start, start + n)]
    async with Evaluator(metric, execution="inline", cache=cache) as ev:
        for _ in range(3):
            results = await ev.evaluate_many(None, rows)
            assert all(r.ok for r in results), results[:3]

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
"""
METRIC = """
def score(input, output, expected=None):
    return 1.0, {"feedback": "ok " + str(input["n"])}
"""


def _put_many(directory: str, start: int, n: int, ready: object) -> None:
    store = DiskStore.open(Path(directory))
    ready.wait()  # type: ignore[attr-defined]
    for i in range(start, start + n, 10):  # many small transactions, interleaved
        store.put_many([(j.to_bytes(16, "big"), b"v%d" % j) for j in range(i, i + 10)])
    store.close()


class TestConcurrentProcesses:
    def test_two_processes_write_one_cache_at_once(self, tmp_path: Path) -> None:
        """Two processes storing overlapping keys in small transactions at the same
        moment both finish without error, and every key is there once."""
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        procs = [
            ctx.Process(target=_put_many, args=(str(tmp_path), start, 2000, ready))
            for start in (0, 1000)
        ]
        for p in procs:
            p.start()
        ready.set()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0, 0]
        store = DiskStore.open(tmp_path)
        assert store.stats().entries == 3000
        store.close()

    @pytest.mark.process
    def test_two_evaluators_in_two_processes(self, tmp_path: Path) -> None:
        """Two runs in two processes share one cache directory at once: both succeed
        and the cache holds the union of their examples."""
        import subprocess
        import sys

        script = tmp_path / "writer.py"
        script.write_text(WRITER)
        metric = tmp_path / "metric.py"
        metric.write_text(textwrap.dedent(METRIC))
        cache = tmp_path / "cache"
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), str(cache), str(metric), str(start), "400"],
                stderr=subprocess.PIPE,
                text=True,
            )
            for start in (0, 200)
        ]
        outs = [p.communicate(timeout=90)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        store = DiskStore.open(cache)
        assert store.stats().entries == 600
        store.close()


class TestBadFiles:
    def test_older_format_is_moved_aside(self, tmp_path: Path) -> None:
        """A cache of another format version is kept aside, never read, with a warning."""
        store = DiskStore.open(tmp_path)
        store.close()
        conn = sqlite3.connect(tmp_path / FILE_NAME)
        conn.execute("UPDATE meta SET value = '0' WHERE name = 'format'")
        conn.commit()
        conn.close()
        with pytest.warns(CacheWarning, match="cache format 0"):
            store = DiskStore.open(tmp_path)
        assert store.stats().entries == 0
        store.close()
        assert len(list(tmp_path.glob(f"{FILE_NAME}.bad-*"))) == 1

    def test_truncated_file_is_rebuilt(self, tmp_path: Path) -> None:
        """A cache file cut short (a disk that filled up) is moved aside and rebuilt."""
        store = DiskStore.open(tmp_path)
        store.put_many([(bytes([i]) * 16, b"x" * 3000) for i in range(200)])
        store.close()
        path = tmp_path / FILE_NAME
        data = path.read_bytes()
        path.write_bytes(data[:100] + b"\0" * 50 + data[150 : len(data) // 3])
        with pytest.warns(CacheWarning, match="moved it to"):
            store = DiskStore.open(tmp_path)
        store.put_many([(b"k" * 16, b"v")])
        assert store.get_many([b"k" * 16]) == {b"k" * 16: b"v"}
        store.close()


class TestStatsAndClear:
    def test_stats_then_clear(self, tmp_path: Path) -> None:
        """stats counts the entries and their age; clear deletes them all and says how many."""
        store = DiskStore.open(tmp_path)
        store.put_many([(bytes([i]) * 16, b"value") for i in range(10)])
        stats = store.stats()
        assert stats.entries == 10 and stats.bytes > 0 and stats.oldest is not None
        assert store.clear() == 10
        assert store.stats().entries == 0 and store.get_many([bytes([1]) * 16]) == {}
        store.close()

    def test_clear_while_a_run_reads(self, tmp_path: Path) -> None:
        """clear while another connection holds a read snapshot deletes the entries (a
        new reader sees none) instead of failing; the space comes back later."""
        store = DiskStore.open(tmp_path)
        store.put_many([(bytes([i]) * 16, b"value") for i in range(10)])
        reader = sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM results").fetchone() == (10,)
        other = DiskStore.open(tmp_path)
        assert other.clear() == 10
        reader.execute("COMMIT")
        assert store.stats().entries == 0
        for conn in (store, other):
            conn.close()
        reader.close()

    def test_a_stored_key_keeps_its_first_value(self, tmp_path: Path) -> None:
        """Storing a key twice (two runs racing on one example) keeps one value."""
        store = DiskStore.open(tmp_path)
        store.put_many([(b"k" * 16, b"first")])
        store.put_many([(b"k" * 16, b"second")])
        assert store.get_many([b"k" * 16]) == {b"k" * 16: b"first"}
        assert store.stats().entries == 1
        store.close()
