"""The process executor's work queue, without processes: batches, requeue, sizing."""

from __future__ import annotations

import random
from typing import Any

import hypothesis.strategies as st
from hypothesis import given, settings

from evaluator._call._calls import Call, Outcome, ScoreCall
from evaluator._call._results import ErrorInfo
from evaluator._executors._process._queue import (
    MAX_ATTEMPTS,
    MAX_BATCH,
    PROBE_BATCH,
    Batch,
    Job,
    WorkQueue,
)


def _calls(n: int, first: int = 0) -> list[Call]:
    return [ScoreCall(first + i, f"e{first + i}", {}, "a", None) for i in range(n)]


def _ok(call: Any) -> Outcome:
    return Outcome(call.token, None, 1, 2)


class _Done:
    """Counts how many times a job said it was done."""

    def __init__(self) -> None:
        self.times = 0

    def __call__(self) -> None:
        self.times += 1


def _job(n: int, first: int = 0) -> tuple[Job, _Done]:
    done = _Done()
    return Job(_calls(n, first), done), done


def _send(queue: WorkQueue, size: int) -> tuple[Batch, list[Call]]:
    segments, calls = queue.take(size)
    return queue.open_batch(segments, len(calls)), calls


class TestJob:
    def test_done_once_all_outcomes_are_in(self) -> None:
        """A job is done when its last outcome lands, not before, and only once."""
        job, done = _job(3)
        job.fill(0, [Outcome(0)])
        job.fill(2, [Outcome(2)])
        assert done.times == 0 and job.remaining == 1
        job.fill(1, [Outcome(1)])
        assert done.times == 1 and [o.value for o in job.results] == [0, 1, 2]

    def test_fail_fills_the_rest_and_drops_late_outcomes(self) -> None:
        """A failed job gives every call still waiting the error, is done, and ignores
        outcomes that arrive afterwards (its list has been handed back)."""
        job, done = _job(3)
        job.fill(1, [Outcome("kept")])
        job.fail(ErrorInfo("cancelled", "closed"))
        job.fill(0, [Outcome("late")])
        assert done.times == 1
        assert [o.error.kind if o.error else o.value for o in job.results] == [
            "cancelled",
            "kept",
            "cancelled",
        ]


class TestTakeAndDeliver:
    def test_a_batch_spans_jobs_in_order(self) -> None:
        """Batches take calls from the front of the queue across jobs, and outcomes of a
        batch go back to the jobs and positions they came from."""
        queue = WorkQueue()
        a, a_done = _job(3, 0)
        b, b_done = _job(4, 100)
        queue.add(a)
        queue.add(b)
        assert queue.pending_count == 7
        batch, calls = _send(queue, 5)
        assert [c.token for c in calls] == [0, 1, 2, 100, 101]
        assert queue.pending_count == 2 and batch.size == 5
        assert batch.call_at(3).token == 100
        queue.record(batch, 0, 5_000, [_ok(c) for c in calls[:2]])  # a partial flush
        queue.record(batch, 2, 5_000, [_ok(c) for c in calls[2:]])
        assert a_done.times == 1 and [o.value for o in a.results] == [0, 1, 2]
        assert [o.value for o in b.results[:2]] == [100, 101] and b_done.times == 0
        assert batch.done == 5 and queue.calls_done == 5
        rest, calls = _send(queue, 10)
        assert [c.token for c in calls] == [102, 103] and rest.seq == batch.seq + 1
        queue.deliver(rest, 0, [_ok(c) for c in calls])
        assert b_done.times == 1

    def test_progress_is_told_of_each_flush_but_the_last(self) -> None:
        """A job's ``progress`` hears how many outcomes each flush brings, until the one
        that completes it (its submit's return says that much)."""
        told: list[int] = []
        job = Job(_calls(5), _Done(), told.append)
        job.fill(0, [Outcome(0), Outcome(1)])
        job.fill(2, [Outcome(2)])
        job.fill(3, [Outcome(3), Outcome(4)])
        assert told == [2, 1]

    def test_calls_taken_back_from_a_batch_go_to_the_front_and_end_it(self) -> None:
        """Taking back a batch from position 3 (its worker stalled on call 2) queues calls
        3.. again at the front, ahead of the calls that were waiting, ends the batch
        there, and counts none of them as requeued after a death; their outcomes then
        come through the batch they go out in next."""
        queue = WorkQueue()
        job, done = _job(8)
        queue.add(job)
        batch, calls = _send(queue, 6)
        queue.record(batch, 0, 2_000, [_ok(c) for c in calls[:2]])
        assert queue.take_back(batch, 3) == 3
        assert batch.size == 3 and queue.pending_count == 5 and queue.requeued == 0
        again, moved = _send(queue, 10)
        assert [c.token for c in moved] == [3, 4, 5, 6, 7]
        queue.record(again, 0, 5_000, [_ok(c) for c in moved])
        queue.record(batch, 2, 1_000, [_ok(calls[2])])
        assert done.times == 1 and [o.value for o in job.results] == list(range(8))
        assert queue.take_back(batch, 3) == 0  # nothing left to take

    def test_cost_is_a_moving_average_of_the_work_reported(self) -> None:
        """Each report of work per call moves the cost estimate that sizes batches."""
        queue = WorkQueue()
        job, _ = _job(4)
        queue.add(job)
        batch, calls = _send(queue, 4)
        queue.record(batch, 0, 2_000, [_ok(c) for c in calls[:2]])
        assert queue.cost_ns == 1_000
        queue.record(batch, 2, 4_000, [_ok(c) for c in calls[2:]])
        assert queue.cost_ns == 0.7 * 1_000 + 0.3 * 2_000

    def test_cancel_removes_only_that_jobs_waiting_calls(self) -> None:
        """Cancelling a job drops its waiting calls and its late outcomes; other jobs'
        calls keep their place."""
        queue = WorkQueue()
        a, _ = _job(3, 0)
        b, _ = _job(2, 100)
        queue.add(a)
        queue.add(b)
        batch, calls = _send(queue, 1)
        queue.cancel(a)
        assert queue.pending_count == 2 and a not in queue.jobs
        queue.deliver(batch, 0, [_ok(calls[0])])
        assert a.results == [None, None, None]
        _, rest = _send(queue, 10)
        assert [c.token for c in rest] == [100, 101]


class TestBatchSize:
    def test_unknown_cost_probes_with_small_batches(self) -> None:
        """Before any call is measured, batches are tiny and none is queued in a busy worker."""
        queue = WorkQueue()
        job, _ = _job(1000)
        queue.add(job)
        assert queue.batch_size(2) == (PROBE_BATCH, False)

    def test_cheap_calls_travel_in_large_batches_spread_over_workers(self) -> None:
        """Cheap calls go thousands to a message, a large submit split over the workers,
        with a second batch allowed behind a running one."""
        queue = WorkQueue()
        queue.add(_job(20_000)[0])
        queue.cost_ns = 1_000.0
        size, prefetch = queue.batch_size(2)
        assert size == MAX_BATCH and prefetch
        queue.cost_ns = 10_000.0
        assert queue.batch_size(2) == (1_000, True)
        small = WorkQueue()
        small.add(_job(1_500)[0])
        small.cost_ns = 1_000.0
        assert small.batch_size(2) == (750, True)  # half each, not all to one worker

    def test_a_cheap_minibatch_is_one_message(self) -> None:
        """A submit that is less work than a round trip goes whole to one worker."""
        queue = WorkQueue()
        queue.add(_job(3)[0])
        queue.cost_ns = 1_000.0
        assert queue.batch_size(8) == (3, True)

    def test_slow_calls_travel_one_at_a_time_without_prefetch(self) -> None:
        """A call of tens of milliseconds travels alone and is never queued behind another."""
        queue = WorkQueue()
        queue.add(_job(10)[0])
        queue.cost_ns = 30_000_000.0
        assert queue.batch_size(2) == (1, False)


class TestWorkerLost:
    def test_the_culprit_is_blamed_and_the_rest_requeued_in_front(self) -> None:
        """The call a worker died running gets its blame; the unfinished calls of its
        batches go back to the front of the queue, in order, before calls never sent."""
        queue = WorkQueue()
        job, done = _job(10)
        queue.add(job)
        first, calls = _send(queue, 4)
        second, _ = _send(queue, 3)
        queue.record(first, 0, 100, [_ok(calls[0])])  # call 0 reported before the death
        blamed = queue.worker_lost(
            [first, second],
            (first.seq, 2),
            lambda call: Outcome(None, ErrorInfo("worker_crash", f"died on {call.example_id}")),
            penalise=True,
        )
        assert blamed
        assert job.results[2].error.message == "died on e2"
        _, again = _send(queue, 100)
        assert [c.token for c in again] == [1, 3, 4, 5, 6, 7, 8, 9]
        assert queue.requeued == 5  # 1, 3 and the three of the second batch
        assert done.times == 0

    def test_a_culprit_that_already_reported_is_not_blamed(self) -> None:
        """A death after the running call's outcome came back blames no one."""
        queue = WorkQueue()
        job, _ = _job(3)
        queue.add(job)
        batch, calls = _send(queue, 3)
        queue.record(batch, 0, 100, [_ok(c) for c in calls[:2]])
        blamed = queue.worker_lost(
            [batch], (batch.seq, 1), lambda c: Outcome(None, ErrorInfo("worker_crash", "x")), False
        )
        assert not blamed and [o.value for o in job.results[:2]] == [0, 1]
        assert queue.pending_count == 1

    def test_deaths_outside_the_call_fail_the_batch_after_max_attempts(self) -> None:
        """Calls whose workers keep dying outside the user's function are retried, then
        fail with worker_crash saying so; the job still gets one outcome per call."""
        queue = WorkQueue()
        job, done = _job(2)
        queue.add(job)
        for _ in range(MAX_ATTEMPTS):
            batch, _ = _send(queue, 2)
            queue.worker_lost([batch], None, None, penalise=True)
        assert done.times == 1 and queue.pending_count == 0
        assert all(o.error.kind == "worker_crash" for o in job.results)
        assert f"died {MAX_ATTEMPTS} times" in job.results[0].error.message

    def test_the_error_of_a_call_given_up_is_the_queues(self) -> None:
        """A queue made with its own ``gave_up`` (the Ray executor's, for lost actors)
        fails a call tried MAX_ATTEMPTS times with that error, told the attempts; the
        others go back to the front, counted as requeued."""
        told: list[int] = []

        def lost(attempts: int) -> ErrorInfo:
            told.append(attempts)
            return ErrorInfo("worker_crash", f"actors lost {attempts} times")

        queue = WorkQueue(gave_up=lost)
        job, done = _job(3)
        queue.add(job)
        batch, _ = _send(queue, 3)
        queue.requeue(
            [*queue.positions(batch, 0, 1, MAX_ATTEMPTS), *queue.positions(batch, 1, 3, 1)]
        )
        assert told == [MAX_ATTEMPTS] and done.times == 0
        assert job.results[0].error == ErrorInfo(
            "worker_crash", f"actors lost {MAX_ATTEMPTS} times"
        )
        assert (queue.pending_count, queue.requeued) == (2, 2)

    def test_only_the_first_batch_is_penalised(self) -> None:
        """A queued batch the dead worker never started is requeued without penalty."""
        queue = WorkQueue()
        job, _ = _job(4)
        queue.add(job)
        first, _ = _send(queue, 2)
        second, _ = _send(queue, 2)
        queue.worker_lost([first, second], None, None, penalise=True)
        assert [seg[3] for seg in queue.pending] == [1, 0]

    def test_a_cancelled_jobs_calls_are_not_requeued(self) -> None:
        """Unfinished calls of a cancelled job are dropped, not sent again."""
        queue = WorkQueue()
        job, _ = _job(3)
        queue.add(job)
        batch, _ = _send(queue, 3)
        queue.cancel(job)
        queue.worker_lost([batch], None, None, penalise=False)
        assert queue.pending_count == 0 and not queue.pending


class TestReject:
    def test_calls_that_cannot_travel_fail_alone(self) -> None:
        """The calls named by `why` fail with their own error; the others are queued again."""
        queue = WorkQueue()
        job, _ = _job(4)
        queue.add(job)
        segments, _ = queue.take(4)
        bad = ErrorInfo("metric_error", "cannot be sent")
        unused = ErrorInfo("metric_error", "unused")
        queue.reject(segments, lambda c: bad if c.token == 2 else None, unused)
        assert job.results[2].error is bad
        _, again = _send(queue, 10)
        assert [c.token for c in again] == [0, 1, 3]

    def test_a_batch_that_fails_as_a_whole_fails_every_call(self) -> None:
        """If every call can travel alone but the batch cannot, they all fail with the
        batch's error instead of being retried for ever."""
        queue = WorkQueue()
        job, done = _job(2)
        queue.add(job)
        segments, _ = queue.take(2)
        error = ErrorInfo("metric_error", "the batch cannot be sent")
        queue.reject(segments, lambda c: None, error)
        assert done.times == 1 and all(o.error is error for o in job.results)
        assert queue.pending_count == 0


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_every_call_gets_exactly_one_outcome(sizes: list[int], seed: int) -> None:
    """Whatever the batch sizes and however workers die (running a call, outside one,
    after a partial flush), every call of every job ends with exactly one outcome."""
    rng = random.Random(seed)
    queue = WorkQueue()
    jobs = []
    first = 0
    for n in sizes:
        job, done = _job(n, first)
        first += n
        jobs.append((job, done))
        queue.add(job)
    rounds = 0
    while queue.pending_count and rounds < 10_000:
        rounds += 1
        batch, calls = _send(queue, rng.randint(1, 16))
        fate = rng.random()
        if fate < 0.6:
            queue.record(batch, 0, 10, [_ok(c) for c in calls])
            continue
        flushed = rng.randint(0, len(calls) - 1)
        queue.record(batch, 0, 10, [_ok(c) for c in calls[:flushed]])
        if fate < 0.8:
            queue.worker_lost(
                [batch],
                (batch.seq, rng.randint(0, len(calls) - 1)),
                lambda c: Outcome(None, ErrorInfo("worker_crash", "died")),
                penalise=True,
            )
        else:
            queue.worker_lost([batch], None, None, penalise=True)
    assert queue.pending_count == 0
    # Filled once each: a second outcome for a call would leave another call without one
    # (remaining reaches 0 early) or call the job done again.
    assert all(job.remaining == 0 and done.times == 1 for job, done in jobs)
    assert all(o is not None for job, _ in jobs for o in job.results)
