"""The claim and the cut (``_cut.py``): the calls a stalled worker gives up are agreed
under a lock, so that a call is run by its worker or taken back, never both. The race is
driven directly: a real process claims calls as fast as it can while this one cuts."""

from __future__ import annotations

import mmap
import os
import pickle
import subprocess
import sys
import textwrap
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._calls import Call, Outcome, ScoreCall
from evaluator._call._loader import load_function
from evaluator._executors._process._cut import Claims, cut, init_lock
from evaluator._executors._process._executor import ProcessExecutor
from evaluator._executors._process._pool import Worker
from evaluator._executors._process._queue import Batch, Job
from evaluator._executors._process._wire import (
    BATCH_ROWS,
    CLAIMS,
    CUT_END,
    CUT_INDEX,
    CUT_SEQ,
    INDEX,
    SEQ,
    START,
    STATE_SLOTS,
    UNREADABLE,
)

ROOT = Path(__file__).resolve().parents[4]

# The worker's side of the race: batch ``r`` of SIZE calls for each round, each call
# claimed, then counted in the shared counters (``ran``) and busy for about 5 us, stopping
# at the first call cut.
# Control slots: GO (the round the engine let start), DONE (the round the worker ended).
WORKER = textwrap.dedent(
    """
    import mmap, os, sys, time
    from evaluator._executors._process._cut import Claims
    from evaluator._executors._process._wire import STATE_SLOTS
    state_fd, counts_fd, rounds, size = (int(a) for a in sys.argv[1:5])
    state = memoryview(mmap.mmap(state_fd, STATE_SLOTS * 8)).cast("q")
    counts = memoryview(mmap.mmap(counts_fd, (2 + rounds * size) * 8)).cast("q")
    claim = Claims(state).claim
    for r in range(1, rounds + 1):
        while counts[0] < r:
            os.sched_yield()
        base = 2 + (r - 1) * size
        for i in range(size):
            if not claim(r, i):
                break
            counts[base + i] += 1
            busy = time.perf_counter_ns() + 5000
            while time.perf_counter_ns() < busy:
                pass
        counts[1] = r
    """
)


def _shared(size: int) -> tuple[int, mmap.mmap]:
    fd = os.memfd_create("test-cut")
    os.ftruncate(fd, size)
    return fd, mmap.mmap(fd, size)


@pytest.fixture
def state() -> Iterator[tuple[memoryview, mmap.mmap]]:
    """A worker's state array, its lock set up as the pool does."""
    fd, state_map = _shared(STATE_SLOTS * 8)
    os.close(fd)
    assert init_lock(state_map)
    view = memoryview(state_map).cast("q")
    yield view, state_map
    view.release()
    state_map.close()


# `...`: the lambdas bind the round as default arguments, which mypy cannot infer for [].
def _wait(done: Callable[..., bool], what: str, guard_s: float = 60.0) -> None:
    """Spin (yielding the core) until ``done()``; a guard against a hang only."""
    deadline = time.monotonic() + guard_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        os.sched_yield()


class TestCut:
    def test_each_call_runs_once_or_is_taken_back_while_the_worker_races(self) -> None:
        """Over 100 cuts of a batch the worker is running as fast as it can claim, each
        made from a look at its running call that is stale by the time of the cut (in
        every other round the worker has claimed two more calls since): every call
        before the cut's start ran exactly once, none after it ran at all."""
        rounds, size = 100, 2000
        state_fd, state_map = _shared(STATE_SLOTS * 8)
        counts_fd, counts_map = _shared((2 + rounds * size) * 8)
        assert init_lock(state_map)
        state = memoryview(state_map).cast("q")
        counts = memoryview(counts_map).cast("q")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-c", WORKER, str(state_fd), str(counts_fd), str(rounds)]
        worker = subprocess.Popen([*argv, str(size)], pass_fds=(state_fd, counts_fd), env=env)
        os.close(state_fd)
        os.close(counts_fd)
        moved: list[bool] = []  # the cut started past what the engine asked
        taken: list[bool] = []  # the cut took calls back
        try:
            for r in range(1, rounds + 1):
                counts[0] = r
                at = (r * 7919) % (size // 2)  # where the look is taken, varied
                _wait(lambda r=r, at=at: state[SEQ] == r and state[INDEX] >= at, f"round {r}")
                look = state[INDEX]  # the engine's look: the worker moves on meanwhile
                if r % 2 and look + 3 < size:  # a look made stale for sure: two claims on
                    _wait(lambda r=r, i=look + 2: state[INDEX] >= i or counts[1] == r, "claims")
                start = cut(state, state_map, (r, look + 1), r)
                _wait(lambda r=r: counts[1] == r, f"round {r} to end")
                base = 2 + (r - 1) * size
                ran = counts[base : base + size].tolist()
                if start is None:
                    # The lock was not had within the cut's wait (the worker, holding
                    # it, was preempted on a loaded machine): nothing is taken back,
                    # every call runs once.
                    assert ran == [1] * size, f"round {r}"
                    continue
                assert start[0] == r and start[1] >= look + 1
                assert ran == [1] * start[1] + [0] * (size - start[1]), f"round {r}"
                moved.append(start[1] > look + 1)
                taken.append(start[1] < size)
            assert worker.wait(timeout=60) == 0
        finally:
            worker.kill()
            worker.wait()
            state.release()
            counts.release()
            state_map.close()
            counts_map.close()
        # The race was run, not avoided: the worker claimed past the look before many
        # cuts, and many cuts still took calls back.
        assert len(moved) >= rounds // 2, f"the lock was had in {len(moved)} of {rounds} cuts"
        assert sum(moved) >= rounds // 4 and sum(taken) >= rounds // 4, (moved, taken)

    def test_the_cut_starts_no_earlier_than_asked(
        self, state: tuple[memoryview, mmap.mmap]
    ) -> None:
        """A cut asked from after the worker's latest claim starts where it was asked,
        spans the batches up to ``end``, and the worker's claims stop exactly there."""
        view, state_map = state
        claims = Claims(view)
        assert claims.claim(3, 0) and claims.claim(3, 1)
        assert cut(view, state_map, (3, 5), 4) == (3, 5)
        assert (view[CUT_SEQ], view[CUT_INDEX], view[CUT_END]) == (3, 5, 4)
        assert [claims.claim(3, i) for i in range(2, 7)] == [True, True, True, False, False]
        assert not claims.claim(4, 0)  # a later batch held when the cut was made
        assert claims.claim(5, 0)  # a batch sent after it

    def test_a_cut_never_takes_a_claimed_call(self, state: tuple[memoryview, mmap.mmap]) -> None:
        """A worker that has claimed call 9 while the engine asked to cut from 4 keeps
        calls up to 9: the cut starts at 10, and call 9 of a later claim is refused."""
        view, state_map = state
        claims = Claims(view)
        assert all(claims.claim(1, i) for i in range(10))
        assert cut(view, state_map, (1, 4), 1) == (1, 10)
        assert not claims.claim(1, 10)

    def test_a_worker_that_holds_the_lock_gets_no_cut(
        self, state: tuple[memoryview, mmap.mmap]
    ) -> None:
        """A worker that died mid-claim (its lock held for ever): the engine waits a
        bounded time, takes nothing back and writes no cut."""
        view, state_map = state
        claims = Claims(view)
        claims.acquire()
        assert cut(view, state_map, (1, 1), 1, wait_s=0.05) is None
        assert (view[CUT_SEQ], view[CUT_INDEX], view[CUT_END]) == (0, 0, 0)
        claims.release()

    def test_without_the_lock_nothing_is_cut_and_every_claim_holds(self) -> None:
        """A state array whose lock was never set up (``CLAIMS`` 0): the engine cuts
        nothing and the worker's claims all hold (it never blocks on the lock)."""
        fd, state_map = _shared(STATE_SLOTS * 8)
        os.close(fd)
        view = memoryview(state_map).cast("q")
        assert view[CLAIMS] == 0
        claims = Claims(view)
        assert cut(view, state_map, (1, 1), 1) is None
        assert all(claims.claim(1, i) for i in range(5))
        view.release()
        state_map.close()


class _Socket:
    """A worker's channel that keeps what the engine sends it."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, body: bytes, kind: int = 0) -> None:
        self.sent.append(pickle.loads(body))


class TestTakingBack:
    """The executor's side of a cut (``ProcessExecutor.on_stalled``), on a worker whose
    process is played by this test: its batches, its answers. Nothing is started."""

    @pytest.fixture
    def executor(self, tmp_path: Path) -> ProcessExecutor:
        """An executor never entered (it dispatches nothing)."""
        path = tmp_path / "metric.py"
        path.write_text("def score(input, output, expected=None):\n    return 1.0\n")
        return ProcessExecutor(load_function(path, "score"), "score", timeout=5, workers=1)

    @pytest.fixture
    def worker(self) -> Iterator[Worker]:
        """A worker's handle: its state array with the lock, a channel that records."""
        fd, state_map = _shared(STATE_SLOTS * 8)
        os.close(fd)
        assert init_lock(state_map)
        w = Worker(None, state_map, None)  # type: ignore[arg-type]
        w.channel = _Socket()  # type: ignore[assignment]
        yield w
        w.state.release()
        state_map.close()

    def _batches(self, ex: ProcessExecutor, w: Worker, *sizes: int) -> list[Batch]:
        queue = ex._queue
        calls: list[Call] = [ScoreCall(i, f"e{i}", {}, "a", None) for i in range(sum(sizes) + 4)]
        queue.add(Job(calls, lambda: None))
        out = []
        for size in sizes:
            segments, taken = queue.take(size)
            out.append(queue.open_batch(segments, len(taken)))
        w.batches = deque(out)
        w.assigned = sum(sizes)
        return out

    def test_a_batch_taken_back_whole_is_never_sent_again(
        self, executor: ProcessExecutor, worker: Worker
    ) -> None:
        """A worker stalls in call 0 of its first batch while holding a second: the rest
        of the first and all of the second are taken back. The worker cannot read the
        second (a value it cannot unpickle) and says so after the engine has sent it a
        third batch: that answer is the second's, taken back, so nothing is sent again
        (sending the third again, row by row, would run its calls twice). The next
        UNREADABLE is the third's, and only that one is sent again."""
        first, second = self._batches(executor, worker, 4, 3)
        claims = Claims(worker.state)
        assert claims.claim(first.seq, 0)
        worker.state[START] = 1  # in call 0, stalled
        executor.on_stalled(worker)
        assert first.size == 1 and list(worker.batches) == [first]
        assert list(worker.dropped) == [second.seq] and executor._taken_back == 6
        assert not claims.claim(first.seq, 1) and not claims.claim(second.seq, 0)
        worker.state[START] = 0
        executor._results(worker, first.seq, 0, 1_000, True, [Outcome(None, None, 1, 2)])
        assert not worker.batches
        (third,) = self._batches(executor, worker, 4)  # sent once the worker was free
        executor.on_control(worker, (UNREADABLE, "no module named 'tests'"))
        assert worker.channel.sent == [] and not worker.dropped  # type: ignore[union-attr]
        executor.on_control(worker, (UNREADABLE, "no module named 'tests'"))
        (again,) = worker.channel.sent  # type: ignore[union-attr]
        assert again[0] == BATCH_ROWS and again[1] == third.seq

    def test_the_empty_answer_of_a_batch_taken_back_whole_is_its_own(
        self, executor: ProcessExecutor, worker: Worker
    ) -> None:
        """A batch taken back whole that the worker read answers with an empty last
        result: it settles that batch's place, so the UNREADABLE after it is the next
        batch's, sent again."""
        first, second = self._batches(executor, worker, 2, 2)
        assert Claims(worker.state).claim(first.seq, 0)
        worker.state[START] = 1
        executor.on_stalled(worker)
        worker.state[START] = 0
        executor._results(worker, first.seq, 0, 1_000, True, [Outcome(None, None, 1, 2)])
        executor._results(worker, second.seq, 0, 0, True, [])
        assert not worker.dropped
        (third,) = self._batches(executor, worker, 3)
        executor.on_control(worker, (UNREADABLE, "why"))
        (again,) = worker.channel.sent  # type: ignore[union-attr]
        assert again[:2] == (BATCH_ROWS, third.seq)
