"""Worker process limits through the Evaluator's options: memory_limit_mb and
max_calls_per_worker, in the metric's and the program's workers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psutil
import pytest

from evaluator._pipeline import Evaluator
from tests._helpers import write

# Real worker processes are what these tests are about (the mark implies slow).
pytestmark = pytest.mark.process

LIMIT_MB = 512

# Each call keeps 64 MB more (a leak across calls); "big" asks for 4 GB at once.
LEAKY_METRIC = """
import os

_kept = []

def score(input, output, expected=None):
    if input.get("big"):
        block = bytearray(4 * 1024 ** 3)
        return float(len(block)), {"feedback": "allocated"}
    if input.get("leak"):
        _kept.append(bytearray(64 * 1024 ** 2))
    return 1.0, {"feedback": "ok", "pid": os.getpid()}
"""

PID_PROGRAM = """
import os

def run(artifact, input):
    return os.getpid()
"""

PID_METRIC = """
import os

def score(input, output, expected=None):
    return 1.0, {"feedback": "ok", "pid": os.getpid()}
"""


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


class TestMemoryLimit:
    async def test_allocation_past_the_limit_is_worker_crash(self, tmp_path: Path) -> None:
        """A call that allocates 4 GB under memory_limit_mb=512 gets worker_crash naming
        the limit and how to fix it; the other examples are ok, scored by fresh workers."""
        metric = write(tmp_path, "metric.py", LEAKY_METRIC)
        big = [i % 5 == 0 for i in range(20)]
        rows = [{"id": i, "input": {"big": b}, "output": 1} for i, b in enumerate(big)]
        async with Evaluator(metric, workers=2, memory_limit_mb=LIMIT_MB, timeout=20) as ev:
            assert ev.metric_execution == "process"
            results = await ev.evaluate_many(None, rows)
            stats = ev.statistics().metric
        for is_big, r in zip(big, results, strict=True):
            if is_big:
                assert r.error is not None and r.error.kind == "worker_crash", r
                assert f"memory limit of {LIMIT_MB} MB exceeded" in r.error.message
                assert "memory_limit_mb" in r.error.message  # how to fix it
            else:
                assert r.ok, r.error
        assert stats.crashes == 4 and stats.workers_alive == 2

    async def test_leak_across_calls_hits_the_limit(self, tmp_path: Path) -> None:
        """A metric that keeps 64 MB per call: its worker hits the 512 MB limit after a
        few calls; that call is worker_crash with the reason, the worker is replaced
        (the leak starts over) and every example still gets exactly one result."""
        metric = write(tmp_path, "metric.py", LEAKY_METRIC)
        rows = [{"id": i, "input": {"leak": True}, "output": 1} for i in range(40)]
        async with Evaluator(metric, workers=2, memory_limit_mb=LIMIT_MB, timeout=20) as ev:
            results = await ev.evaluate_many(None, rows)
        assert [r.example_id for r in results] == list(range(40))
        crashes = [r for r in results if not r.ok]
        assert crashes, "no worker ever reached the memory limit"
        for r in crashes:
            assert r.error is not None and r.error.kind == "worker_crash"
            assert "memory limit" in r.error.message, r.error.message
        # 512 MB cannot hold 8 blocks of 64 MB on top of the interpreter.
        per_pid = Counter(r.extra["pid"] for r in results if r.ok)
        assert max(per_pid.values()) < 8, per_pid


class TestRecycling:
    async def test_max_calls_per_worker_in_both_stages(self, tmp_path: Path) -> None:
        """With max_calls_per_worker=5, no metric or program worker runs more than 5
        calls; all examples are ok; recycled workers leave no process behind."""
        before = _children()
        program = write(tmp_path, "program.py", PID_PROGRAM)
        metric = write(tmp_path, "metric.py", PID_METRIC)
        rows = [{"id": i, "input": {}} for i in range(60)]
        async with Evaluator(metric, program, workers=2, max_calls_per_worker=5, timeout=20) as ev:
            assert (ev.metric_execution, ev.program_execution) == ("process", "process")
            results = await ev.evaluate_many(None, rows)
            stats = ev.statistics()
        assert all(r.ok for r in results), [r.error for r in results if r.error]
        metric_pids = Counter(r.extra["pid"] for r in results)
        program_pids = Counter(r.output for r in results)
        assert max(metric_pids.values()) <= 5 and len(metric_pids) >= 12
        assert max(program_pids.values()) <= 5 and len(program_pids) >= 12
        assert stats.metric.recycled >= 11 and stats.program.recycled >= 11
        assert _children() - before == set()
