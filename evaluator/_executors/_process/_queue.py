"""The process executor's work queue: which calls wait, how they are batched, requeued.

Pure bookkeeping, no processes and no event loop (it is unit-tested as such):

- A :class:`Job` is one ``submit``: its calls and the outcomes as they come back.
- Pending work is a queue of *segments* ``(job, lo, hi, attempts)``: calls ``lo .. hi``
  of a job, and how many times workers died holding them outside the user's function.
- A :class:`Batch` is what one message to a worker carries: consecutive segments, taken
  from the front of the queue; outcomes come back by position in the batch.
- When a worker dies, the calls of its batches that did not finish go back to the front
  of the queue (:meth:`WorkQueue.worker_lost`), except the one it died running, which
  gets its error; calls that keep killing workers outside the user's function fail after
  ``MAX_ATTEMPTS``.
- :meth:`WorkQueue.batch_size` sizes batches from the measured cost of a call so that
  each carries about ``TARGET_BATCH_NS`` of work: an exact-match metric travels
  thousands to a message, a call of tens of milliseconds one at a time; a submit is
  spread over the workers unless all of it is less work than a round trip.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from ..._call import _failures as failures
from ..._call._calls import Call, Outcome
from ..._call._results import ErrorInfo

__all__ = ["Batch", "Job", "Segment", "WorkQueue"]

#: Work carried by one batch: large enough that messaging is a small share of it, small
#: enough that the last batches spread over the workers and a killed worker loses little.
TARGET_BATCH_NS = 10_000_000
MAX_BATCH = 8192
#: A worker gets a second batch while it runs one (hiding the round trip) only when a
#: call costs at most this much: for longer calls the round trip is a small share anyway,
#: and a queued batch cannot move to another worker if the running call turns out long.
PREFETCH_MAX_COST_NS = 1_000_000
#: Work below this is not split over several workers: a round trip costs more.
SPLIT_MIN_NS = 200_000
#: Calls of unknown cost go out in batches this small until the first results are in.
PROBE_BATCH = 2
#: A batch whose worker dies outside the user's function this many times fails.
MAX_ATTEMPTS = 3


class Job:
    """The calls of one ``submit`` and their outcomes as they arrive.

    ``on_done`` is called once, when the last outcome is in (or the job failed as a
    whole); ``progress``, if given, with the number of outcomes each time some arrive
    (see :class:`~evaluator._executors._base.Progress`). ``cancelled``: the submit was
    cancelled or failed as a whole; late outcomes are dropped.
    """

    __slots__ = ("calls", "cancelled", "on_done", "progress", "remaining", "results")

    def __init__(
        self,
        calls: list[Call],
        on_done: Callable[[], None],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.calls = calls
        self.results: list[Any] = [None] * len(calls)
        self.remaining = len(calls)
        self.on_done = on_done
        self.progress = progress
        self.cancelled = False

    def fill(self, at: int, outcomes: list[Any]) -> None:
        """Outcomes of calls ``at ..``."""
        if self.cancelled:
            return
        self.results[at : at + len(outcomes)] = outcomes
        self.remaining -= len(outcomes)
        if self.remaining <= 0:
            self.on_done()
        elif self.progress is not None:
            self.progress(len(outcomes))

    def fail(self, error: ErrorInfo, clock: Any = perf_counter_ns) -> None:
        """Give every call still without an outcome ``error``, and finish the job."""
        if self.cancelled:
            return
        self.cancelled = True  # no outcome may land in a list already handed back
        now = clock()
        results = self.results
        for i, value in enumerate(results):
            if value is None:
                results[i] = Outcome(None, error, now, now)
        self.remaining = 0
        self.on_done()


Segment = tuple[Job, int, int, int]  # job, first index, end index, attempts


class Batch:
    """Calls sent to one worker in one message; ``done`` results have come back."""

    __slots__ = ("done", "segments", "seq", "size")

    def __init__(self, seq: int, segments: list[Segment], size: int) -> None:
        self.seq = seq
        self.segments = segments
        self.size = size
        self.done = 0

    def call_at(self, position: int) -> Call:
        """The call at ``position`` in the batch."""
        offset = 0
        for job, lo, hi, _ in self.segments:
            if position < offset + hi - lo:
                return job.calls[lo + position - offset]
            offset += hi - lo
        raise IndexError(position)

    def job_at(self, position: int) -> Job:
        """The job of the call at ``position`` in the batch."""
        offset = 0
        for job, lo, hi, _ in self.segments:
            if position < offset + hi - lo:
                return job
            offset += hi - lo
        raise IndexError(position)

    def tokens(self, a: int, b: int) -> list[int]:
        """The tokens of the calls at positions ``a .. b``."""
        out: list[int] = []
        offset = 0
        for job, lo, hi, _ in self.segments:
            end = offset + hi - lo
            first, last = max(a, offset), min(b, end)
            if first < last:
                out += [c.token for c in job.calls[lo + first - offset : lo + last - offset]]
            offset = end
        return out


class WorkQueue:
    """Pending calls of every job, batches, and the cost estimate that sizes them."""

    def __init__(
        self,
        target_ns: int = TARGET_BATCH_NS,
        gave_up: Callable[[int], ErrorInfo] = failures.died_outside_call,
    ) -> None:
        #: The work one batch should carry per worker (the Ray executor's carry more).
        self.target_ns = target_ns
        #: The error of a call given up after that many attempts (the Ray executor's
        #: names its lost actors).
        self.gave_up = gave_up
        self.pending: deque[Segment] = deque()
        self.pending_count = 0
        self.jobs: set[Job] = set()
        self.cost_ns: float | None = None
        self.seq = 0
        self.batches_sent = 0
        self.calls_sent = 0
        self.calls_done = 0
        self.requeued = 0

    # -- jobs -------------------------------------------------------------------------

    def add(self, job: Job) -> None:
        """Queue every call of ``job``."""
        self.jobs.add(job)
        self.pending.append((job, 0, len(job.calls), 0))
        self.pending_count += len(job.calls)

    def discard(self, job: Job) -> None:
        """Forget ``job`` (its submit has returned)."""
        self.jobs.discard(job)

    def cancel(self, job: Job) -> None:
        """Drop ``job``: its waiting calls leave the queue, its late outcomes are ignored."""
        job.cancelled = True
        self.pending_count -= sum(s[2] - s[1] for s in self.pending if s[0] is job)
        self.pending = deque(s for s in self.pending if s[0] is not job)
        self.jobs.discard(job)

    def fail_all(self, error: ErrorInfo) -> None:
        """Fail every job with ``error`` and empty the queue."""
        for job in list(self.jobs):
            job.fail(error)
        self.pending.clear()
        self.pending_count = 0

    # -- batches ----------------------------------------------------------------------

    def take(self, size: int) -> tuple[list[Segment], list[Call]]:
        """Up to ``size`` calls from the front of the queue, and the segments they form."""
        segments: list[Segment] = []
        calls: list[Call] = []
        need = size
        pending = self.pending
        while need and pending:
            job, lo, hi, attempts = pending[0]
            take = min(need, hi - lo)
            if take == hi - lo:
                pending.popleft()
            else:
                pending[0] = (job, lo + take, hi, attempts)
            segments.append((job, lo, lo + take, attempts))
            if calls or len(segments) > 1:
                calls.extend(job.calls[lo : lo + take])
            else:
                calls = job.calls[lo : lo + take]
            need -= take
        self.pending_count -= size - need
        return segments, calls

    def open_batch(self, segments: list[Segment], size: int) -> Batch:
        """Number the batch about to be sent with ``segments``."""
        self.seq += 1
        self.batches_sent += 1
        self.calls_sent += size
        return Batch(self.seq, segments, size)

    def record(self, batch: Batch, start: int, work_ns: int, outcomes: list[Any]) -> None:
        """Outcomes of batch positions ``start ..``, and the work they took."""
        n = len(outcomes)
        if not n:
            return
        sample = work_ns / n
        cost = self.cost_ns
        self.cost_ns = sample if cost is None else 0.7 * cost + 0.3 * sample
        self.deliver(batch, start, outcomes)
        batch.done = start + n
        self.calls_done += n

    def deliver(self, batch: Batch, start: int, outcomes: list[Any]) -> None:
        """Outcomes of batch positions ``start ..`` to the jobs they belong to."""
        segments = batch.segments
        if len(segments) == 1:
            job, lo, _, _ = segments[0]
            job.fill(lo + start, outcomes)
            return
        pos, i, n, offset = start, 0, len(outcomes), 0
        for job, lo, hi, _ in segments:
            end = offset + hi - lo
            if pos < end:
                take = min(end - pos, n - i)
                job.fill(lo + pos - offset, outcomes[i : i + take])
                i += take
                pos += take
                if i >= n:
                    return
            offset = end

    def batch_size(self, usable_workers: int) -> tuple[int, bool]:
        """How many calls the next batch carries, and whether a busy worker may queue it."""
        cost = self.cost_ns
        if cost is None:
            # Unknown cost: small batches, none queued behind a call that may be long.
            size, prefetch = PROBE_BATCH, False
        else:
            size = max(1, min(MAX_BATCH, int(self.target_ns / max(cost, 1.0))))
            prefetch = cost <= PREFETCH_MAX_COST_NS
        pending = self.pending_count
        if cost is not None and pending * cost <= SPLIT_MIN_NS:
            # Less work than a round trip: one worker, one message. Spreading it would
            # only wake more processes (an optimizer's minibatch of 3 exact matches).
            return max(1, min(size, pending)), prefetch
        share = -(-pending // max(1, usable_workers))  # spread a submit over the workers
        return max(1, min(size, share)), prefetch

    # -- failures ---------------------------------------------------------------------

    def positions(self, batch: Batch, a: int, b: int, extra_attempts: int) -> list[Segment]:
        """The segments holding batch positions ``a .. b``, with their attempts raised."""
        out: list[Segment] = []
        offset = 0
        for job, lo, hi, attempts in batch.segments:
            end = offset + hi - lo
            first, last = max(a, offset), min(b, end)
            if first < last and not job.cancelled:
                out.append(
                    (job, lo + first - offset, lo + last - offset, attempts + extra_attempts)
                )
            offset = end
        return out

    def requeue(
        self, segments: list[Segment], *, count: bool = True, clock: Any = perf_counter_ns
    ) -> None:
        """Put segments back at the front of the queue, failing those tried too often
        (``MAX_ATTEMPTS``) with :attr:`gave_up`."""
        kept: list[Segment] = []
        now = clock()
        for seg in segments:
            job, lo, hi, attempts = seg
            if job.cancelled:
                continue
            if attempts >= MAX_ATTEMPTS:
                error = Outcome(None, self.gave_up(attempts), now, now)
                job.fill(lo, [error] * (hi - lo))
                continue
            kept.append(seg)
            if count:
                self.requeued += hi - lo
        self.pending.extendleft(reversed(kept))
        self.pending_count += sum(hi - lo for _, lo, hi, _ in kept)

    def take_back(self, batch: Batch, at: int) -> int:
        """Queue again, at the front, the calls of ``batch`` from position ``at`` (not
        begun: its worker is stalled on the call before them), and end the batch there.
        The number of calls taken back."""
        at = max(at, batch.done)
        if at >= batch.size:
            return 0
        segments = self.positions(batch, at, batch.size, 0)
        batch.size = at
        self.requeue(segments, count=False)
        return sum(hi - lo for _, lo, hi, _ in segments)

    def worker_lost(
        self,
        batches: list[Batch],
        culprit: tuple[int, int] | None,
        blame: Callable[[Call], Outcome] | None,
        penalise: bool,
    ) -> bool:
        """A worker holding ``batches`` died: settle their calls that did not finish.

        ``culprit`` is ``(seq, position)`` of the call it died running, if known; that
        call gets ``blame(call)`` when it belongs to the first batch and had not already
        reported. Every other unfinished call is queued again at the front; with
        ``penalise`` (a death that may be outside the user's function), those of the
        first batch count one more attempt unless the culprit was blamed there. True
        when the culprit got its outcome.
        """
        requeue: list[Segment] = []
        blamed = False
        for batch in batches:
            first = batch is batches[0]
            if (
                first
                and culprit is not None
                and blame is not None
                and culprit[0] == batch.seq
                and culprit[1] >= batch.done
            ):
                at = culprit[1]
                self.deliver(batch, at, [blame(batch.call_at(at))])
                requeue += self.positions(batch, batch.done, at, 0)
                requeue += self.positions(batch, at + 1, batch.size, 0)
                blamed = True
                continue
            penalty = 1 if first and penalise else 0
            requeue += self.positions(batch, batch.done, batch.size, penalty)
        self.requeue(requeue)
        return blamed

    def reject(
        self,
        segments: list[Segment],
        why: Callable[[Call], ErrorInfo | None],
        error: ErrorInfo,
        clock: Any = perf_counter_ns,
    ) -> None:
        """A batch of ``segments`` could not be sent: fail the calls ``why`` names (it
        returns None for a call that can travel) and queue the others again; if every
        call could travel alone, fail them all with ``error`` rather than retry the same
        batch for ever."""
        keep: list[Segment] = []
        now = clock()
        for job, lo, hi, attempts in segments:
            for i in range(lo, hi):
                problem = why(job.calls[i])
                if problem is not None:
                    job.fill(i, [Outcome(None, problem, now, now)])
                else:
                    keep.append((job, i, i + 1, attempts))
        if len(keep) == sum(hi - lo for _, lo, hi, _ in segments):
            for job, i, _, _ in keep:
                job.fill(i, [Outcome(None, error, now, now)])
            keep = []
        self.requeue(keep, count=False)
