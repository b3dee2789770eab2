"""The process executor: sync user functions in worker processes, isolated and batched.

:class:`ProcessExecutor` is the :class:`~evaluator._executors._base.Executor` that ties
the parts of this package together (see its ``__init__``): a submit's calls join the
work queue (``_queue``), are sent in batches to idle workers of the pool (``_pool``)
over their channels (``_channel``), and come back as outcomes; a worker that dies or is
killed at the timeout costs only the call it was running, whose error is named by
``evaluator._call._failures``, while the rest of its batches is queued again.

- **Batches** are sized from the measured cost of a call (``_queue.py``); each worker
  holds a second batch while it runs the first when calls are cheap, so it never waits
  for a round trip.
- **Timeouts**: the pool's watchdog kills a worker whose call is past ``timeout``; that
  call gets ``metric_timeout`` (``program_timeout`` for ``run``) naming the example, the
  limit and the fix; a fresh worker (the warm spare) takes its place at once.
- **Crashes** (``os._exit``, a segfault, the OOM killer, a memory limit): the call the
  worker was running gets ``worker_crash`` with the exit code or signal.
- **Memory limit**: ``RLIMIT_AS`` (address space, not resident memory) in each worker. A
  ``MemoryError`` in the user's function under the limit is reported as
  ``worker_crash`` "memory limit of N MB exceeded" and the worker is replaced, because
  the process that ran out of memory may hold half-built state; a crash of native code
  under the limit says that the limit may have been exceeded.
- **skynet.llm** in a worker is relayed to the engine (``_relay.py``) and answered by
  ``llm_handler`` in a task the pool owns. The replies are kept until their call's
  outcome is final: a call run again after its worker died (a crash or a timeout of
  another call of its batch) gets the same replies without paying for them again.

Cancelling a ``submit`` returns at once; its queued calls are dropped, and a call of it
that a worker is running is killed with its worker (a fresh one, the warm spare, takes its
place) when it is expensive (estimated or already running for ``CANCEL_KILL_NS`` or more);
cheap calls already sent finish in their worker (one batch of about ``TARGET_BATCH_NS``)
and are dropped.

Known limit: a batch queued in a worker (cheap calls only, see ``PREFETCH_MAX_COST_NS``)
just before that worker's running call hangs waits for the hung call's timeout, then is
queued again; it is delayed, never lost. Revoking it early would risk running its calls
twice.
"""

from __future__ import annotations

import asyncio
import os
import pickle
from collections.abc import Sequence
from functools import partial
from time import perf_counter_ns
from typing import Any, ClassVar

import msgspec

from ..._aio import shielded
from ..._call import _failures as failures
from ..._call._calls import Call, LLMHandler, Outcome
from ..._call._context import Stage
from ..._call._kinds import ExecutionKind
from ..._call._loader import UserFunction
from ..._options import validate_count
from .._base import (
    ExecutorBase,
    ExecutorStatistics,
    Progress,
    check_workers,
)
from ._cut import cut
from ._pool import Pool, Worker, WorkerExit
from ._queue import Batch, Job, Segment, WorkQueue
from ._relay import UNATTRIBUTED, Replies, ask, ask_forward, note_bypass
from ._wire import (
    BATCH,
    BATCH_ROWS,
    EXIT_MEMORY,
    KIND_RESULT,
    LLM,
    LLM_REPLY,
    PICKLE_PROTOCOL,
    RESULT_HEADER,
    SDK,
    SDK_NOTE,
    SDK_REPLY,
    UNREADABLE,
    ResultMsg,
    call_row,
    control,
)

__all__ = ["ProcessExecutor", "ProcessExecutorStatistics"]


#: A cancelled caller's running call is killed with its worker when calls cost this much
#: (the batch-sizing estimate) or it has run this long: a cheaper one ends on its own
#: sooner than a worker restarts.
CANCEL_KILL_NS = 50_000_000


class ProcessExecutorStatistics(ExecutorStatistics, frozen=True, kw_only=True):
    """A :class:`ProcessExecutor`'s snapshot: the common shape, and its workers'."""

    workers_alive: int
    """Worker processes running now (a recycled one may overlap its replacement)."""
    restarts: int
    """Workers put in place of one that timed out or crashed (a promoted spare or a new
    worker)."""
    crashes: int
    """Workers that died on their own (exit, signal, memory limit)."""
    recycled: int
    """Workers retired after ``max_calls_per_worker`` calls."""
    batches_sent: int
    mean_batch_size: float
    calls_requeued: int
    """Calls sent again because their worker died before running them."""
    call_cost_ms: float | None
    """The running estimate of one call's cost that sizes batches (None: not measured)."""
    spares_started: int = 0
    """Warm spare workers started (each idle until it replaces a worker)."""
    spares_promoted: int = 0
    """Replacements (after a crash, a timeout or a recycle) served by a warm spare rather
    than by a worker started then."""
    spare_ready: bool = False
    """A warm spare has started and imported the user's file, idle until it replaces a
    worker (it is not counted in ``workers_alive``)."""
    killed_for_cancel: int = 0
    """Workers killed because the caller of the call they ran was cancelled."""
    workers_forked: int = 0
    """Workers (replacements and spares) forked by the pool's fork server, in
    milliseconds each, rather than started as fresh interpreters."""
    fork_server: str | None = None
    """The fork server: "preloads the user's file", "forks; each worker imports the
    user's file: <why>", "starting", or None (not started, or not on this platform)."""
    stand_ins_started: int = 0
    """Extra workers forked to stand in for stalled ones: workers whose call held a
    slot without using a core (a hang, a sleep, a wait on a model call)."""
    calls_taken_back: int = 0
    """Calls taken back, before they began, from a stalled worker's batches and run by
    other workers (not counted in ``calls_requeued``)."""
    model_calls_replayed: int = 0
    """Model requests (``skynet.llm``, routed SDK calls) of a call run again after its
    worker died, answered with the reply its first run was given: not paid twice."""

    @property
    def calls_done(self) -> int:
        """Calls that returned an outcome from a worker (the same as ``calls``)."""
        return self.calls


class ProcessExecutor(ExecutorBase):
    """Run a sync user function in worker processes; see the module docstring.

    ``submit`` returns one :class:`Outcome` per call, in order, whatever the function
    does. Outcomes of ``score`` calls are :class:`_wire.WireOutcome` instances, a
    subclass of ``Outcome`` decoded without pickle. ``workers`` processes (default: one
    per core), each recycled after ``max_calls_per_worker`` calls and limited to
    ``memory_limit_mb`` of address space, if given. ``fork_server=False``: replacements
    are started as fresh interpreters, not forked (where forking is supported at all).
    """

    kind: ClassVar[ExecutionKind] = "process"
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "workers",
        "llm_handler",
        "max_calls_per_worker",
        "memory_limit_mb",
    )

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        workers: int | None = None,
        llm_handler: LLMHandler | None = None,
        max_calls_per_worker: int | None = None,
        memory_limit_mb: int | None = None,
        fork_server: bool = True,
    ) -> None:
        super().__init__(fn, stage, timeout)
        self._n_workers = check_workers(workers, "process") or os.cpu_count() or 1
        self._llm_handler = llm_handler
        self._max_calls = validate_count(max_calls_per_worker, "max_calls_per_worker")
        self._memory_limit_mb = validate_count(memory_limit_mb, "memory_limit_mb")
        self._decoder = msgspec.msgpack.Decoder(ResultMsg)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue = WorkQueue()
        self._pool = Pool(
            fn,
            stage,
            size=self._n_workers,
            timeout_ns=int(self.timeout * 1e9),
            has_llm=llm_handler is not None,
            memory_limit_mb=self._memory_limit_mb,
            events=self,
            fork_server=fork_server,
        )
        self._timeouts = 0
        self._cancel_kills: set[tuple[int, int]] = set()  # (seq, index) killed for a cancel
        self._killed_for_cancel = 0
        self._taken_back = 0
        self._replies = Replies()

    @property
    def parallelism(self) -> int:
        """The number of worker processes (the warm spare, idle, is not counted)."""
        return self._n_workers

    @property
    def idle(self) -> bool:
        """A usable worker holds no batch and no call is queued (a stand-in that has just
        started, say, or a worker beside one held up by a hang)."""
        return self._queue.pending_count == 0 and self._pool.idle()

    # -- lifetime ---------------------------------------------------------------------

    async def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._pool.start(self._loop)

    async def _close(self) -> None:
        # Everything that must happen happens before the first await: no process may
        # outlive the executor, whatever cancels the caller while it is reaped.
        workers = self._pool.stop()
        self._queue.fail_all(failures.closed_before_done("process executor"))
        await shielded(self._pool.reap(workers))

    def statistics(self) -> ProcessExecutorStatistics:
        """Workers alive, restarts, crashes, timeouts, batches and calls so far."""
        queue, pool = self._queue, self._pool
        cost = queue.cost_ns
        return self._snapshot(
            ProcessExecutorStatistics,
            calls=queue.calls_done,
            timeouts=self._timeouts,
            busy=pool.busy(),
            workers_alive=pool.alive(),
            restarts=pool.restarts,
            crashes=pool.crashes,
            recycled=pool.recycled,
            batches_sent=queue.batches_sent,
            mean_batch_size=queue.calls_sent / queue.batches_sent if queue.batches_sent else 0.0,
            calls_requeued=queue.requeued,
            call_cost_ms=None if cost is None else cost / 1e6,
            spares_started=pool.spares_started,
            stand_ins_started=pool.stand_ins_started,
            calls_taken_back=self._taken_back,
            spares_promoted=pool.spares_promoted,
            spare_ready=pool.spare is not None and pool.spare.ready,
            killed_for_cancel=self._killed_for_cancel,
            workers_forked=pool.workers_forked,
            fork_server=pool.fork_server_state(),
            model_calls_replayed=self._replies.replayed,
        )

    # -- submitting -------------------------------------------------------------------

    async def submit(
        self, calls: Sequence[Call], progress: Progress | None = None
    ) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe. ``progress`` is
        told of the outcomes of each batch as it comes back."""
        self._check_open()
        if not calls:
            return []
        assert self._loop is not None
        future: asyncio.Future[None] = self._loop.create_future()
        job = Job(list(calls), partial(_wake, future), progress)
        if self._pool.broken is not None:
            job.fail(self._pool.broken)
            return job.results
        self._queue.add(job)
        self._dispatch()
        try:
            await future
        except asyncio.CancelledError:
            self._queue.cancel(job)
            self._kill_running(job)
            raise
        finally:
            self._queue.discard(job)
            if self._replies:
                self._replies.forget(c.token for c in job.calls)
        return job.results

    def _kill_running(self, job: Job, clock: Any = perf_counter_ns) -> None:
        """Kill the workers running an expensive call of the cancelled ``job``: a caller
        that is gone must not hold a worker until its call ends or times out."""
        now, cost = clock(), self._queue.cost_ns
        for w in tuple(self._pool.workers):
            running = self._pool.running_call(w)
            if running is None:
                continue
            seq, index, started = running
            if (cost is not None and cost < CANCEL_KILL_NS) and now - started < CANCEL_KILL_NS:
                continue  # cheap: it ends soon on its own, cheaper than a restart
            batch = next((b for b in w.batches if b.seq == seq), None)
            if batch is None or index >= batch.size or batch.job_at(index) is not job:
                continue
            self._cancel_kills.add((seq, index))
            self._killed_for_cancel += 1
            self._pool.kill(w, running)

    def _dispatch(self) -> None:
        """Send batches to workers that can take one, while calls are pending."""
        if self._state != "open":
            return
        if self._pool.broken is not None:
            self._queue.fail_all(self._pool.broken)
            return
        queue, pool = self._queue, self._pool
        # Sized once for the whole round: re-sizing after each batch would halve the
        # share every time (2048, 1024, 512, ... of a chunk of 4096).
        size, prefetch = queue.batch_size(pool.usable())
        while queue.pending_count > 0:
            target = pool.target(prefetch, queue.cost_ns)
            if target is None:
                return
            before = queue.pending_count
            self._send_batch(target, size)
            if queue.pending_count >= before and not target.batches:
                return  # no progress (cannot happen by design): never spin on the loop

    def _send_batch(self, w: Worker, size: int) -> None:
        if self._max_calls is not None:
            size = min(size, self._max_calls - w.assigned)
        segments, calls = self._queue.take(size)
        if not segments:
            return
        try:
            payload = pickle.dumps(
                (BATCH, self._queue.seq + 1, [call_row(c) for c in calls]), PICKLE_PROTOCOL
            )
        except Exception as exc:
            self._reject(segments, exc)
            return
        w.batches.append(self._queue.open_batch(segments, len(calls)))
        w.assigned += len(calls)
        w.send(payload)
        if self._max_calls is not None and w.assigned >= self._max_calls:
            self._pool.retire(w)  # graceful recycling: it runs what it holds, then stops

    def _reject(self, segments: list[Segment], error: Exception) -> None:
        """Fail the calls whose arguments cannot cross to a worker; queue the others."""

        def why(call: Call) -> Any:
            try:
                pickle.dumps(call, PICKLE_PROTOCOL)
            except Exception as exc:
                return failures.unsendable_arguments(self.fn, self.stage, exc)
            return None

        batch_error = failures.unsendable_arguments(self.fn, self.stage, error)
        self._queue.reject(segments, why, batch_error)

    # -- what the pool reports (PoolEvents) -------------------------------------------

    def on_results(
        self, w: Worker, kind: int, body: bytearray, clock: Any = perf_counter_ns
    ) -> None:
        if kind == KIND_RESULT:
            msg = self._decoder.decode(body)
            self._results(w, msg.seq, msg.start, msg.work_ns, msg.final, msg.outcomes)
            return
        seq, start, work_ns, final, count = RESULT_HEADER.unpack_from(body)
        try:
            outcomes = pickle.loads(memoryview(body)[RESULT_HEADER.size :])
        except Exception as exc:
            # e.g. a class the worker's code defines but the engine cannot import.
            error = failures.unreadable_value(self.fn, self.stage, exc)
            now = clock()
            outcomes = [Outcome(None, error, now, now)] * count
        self._results(w, seq, start, work_ns, final, outcomes)

    def _results(
        self, w: Worker, seq: int, start: int, work_ns: int, final: bool, outcomes: list[Any]
    ) -> None:
        if not w.batches or w.batches[0].seq != seq:
            if final and w.dropped and w.dropped[0] == seq:
                w.dropped.popleft()  # the empty answer of a batch taken back whole
            return  # a batch already given up on (its job failed, or taken back)
        batch = w.batches[0]
        self._queue.record(batch, start, work_ns, outcomes)
        if self._replies:  # these calls are final: their replies are not needed again
            self._replies.forget(batch.tokens(start, start + len(outcomes)))
        if final:
            w.batches.popleft()
            self._dispatch()

    def on_control(self, w: Worker, message: tuple[Any, ...]) -> None:
        tag = message[0]
        if tag in (LLM, SDK):  # SDK: the SDK hook, a routed SDK call
            self._relay(w, message)
        elif tag == SDK_NOTE:  # before the call's result, on the same socket
            note_bypass(self._llm_handler, *message[1:])
        elif tag == UNREADABLE:
            # The answer to the oldest batch not yet answered: one taken back whole (its
            # calls went to other workers: sending it again would run them twice), or
            # the oldest it holds.
            if w.dropped and (not w.batches or w.dropped[0] < w.batches[0].seq):
                w.dropped.popleft()
            elif w.batches:
                self._resend_rows(w, w.batches[0])

    def _resend_rows(self, w: Worker, batch: Batch) -> None:
        """The worker could not unpickle ``batch`` (its oldest, the one it was reading):
        send it again with each row pickled alone, so that only the calls whose values
        it cannot rebuild fail, each with its own error."""
        rows = [
            pickle.dumps(call_row(batch.call_at(i)), PICKLE_PROTOCOL) for i in range(batch.size)
        ]
        w.send(pickle.dumps((BATCH_ROWS, batch.seq, rows), PICKLE_PROTOCOL))

    def _relay(self, w: Worker, message: tuple[Any, ...]) -> None:
        """Answer a model request of ``w``: from the reply kept for it, if its call ran
        before and asked the same, else through ``llm_handler`` in a task ``w`` owns."""
        tag, request, token = message[0], message[1], message[2]
        reply_tag = LLM_REPLY if tag == LLM else SDK_REPLY
        key = (tag, *message[3:])
        # A request no call owns (a user thread's, between calls) is never replayed, and
        # takes no place among a call's requests.
        if token == UNATTRIBUTED:
            order, kept = 0, None
        else:
            order = w.next_request(token)
            kept = self._replies.lookup(token, order, key)
        if kept is not None:
            w.send(control(reply_tag, request, *kept))
            return
        self._pool.start_task(self._ask(w, reply_tag, request, order, key, message[2:]), owner=w)

    async def _ask(
        self,
        w: Worker,
        reply_tag: str,
        request: int,
        order: int,
        key: tuple[Any, ...],
        call: tuple[Any, ...],
    ) -> None:
        if reply_tag == LLM_REPLY:
            ok, payload = await ask(self._llm_handler, *call)
        else:
            ok, payload = await ask_forward(self._llm_handler, *call)
        if w.closed:
            return  # its call was running when the worker died: it has its outcome
        if call[0] != UNATTRIBUTED:
            self._replies.keep(call[0], order, key, (ok, payload))
        w.send(control(reply_tag, request, ok, payload))

    def on_exit(self, w: Worker, exit: WorkerExit, clock: Any = perf_counter_ns) -> None:
        """A worker died: blame the call it was running, queue the rest of its work.

        Killed at the timeout, the call the watchdog saw gets its timeout; dead on its
        own, the call it was running gets ``worker_crash``; dead outside any call
        (receiving or returning one), its first batch counts one more attempt, unless it
        was the planned exit after a ``MemoryError`` already reported.
        """
        stage, timeout, fn = self.stage, self.timeout, self.fn
        # A death that broke the pool (workers keep dying while starting) is not the
        # batch's: its calls fail with the pool's cause, which quotes the worker's stderr.
        penalise = (
            exit.kill is None and exit.returncode != EXIT_MEMORY and self._pool.broken is None
        )
        if exit.kill is not None:
            seq, index, started = exit.kill

            def blame(call: Call) -> Outcome:
                how = "; its worker process was killed and replaced"
                error = failures.timed_out(stage, timeout, call.example_id, how)
                return Outcome(None, error, started, clock())

        elif exit.running is not None:
            seq, index, started = exit.running
            error = failures.worker_died(fn, exit.cause)

            def blame(call: Call) -> Outcome:
                return Outcome(None, error, started, clock())

        else:
            self._queue.worker_lost(exit.batches, None, None, penalise=penalise)
            return
        if (seq, index) in self._cancel_kills:
            self._cancel_kills.discard((seq, index))
            self._queue.worker_lost(exit.batches, (seq, index), blame, penalise=False)
        elif self._queue.worker_lost(exit.batches, (seq, index), blame, penalise=penalise):
            self._timeouts += exit.kill is not None

    def on_capacity(self) -> None:
        self._dispatch()

    def on_stalled(self, w: Worker) -> None:
        """``w`` is stalled in a call (asleep, hung, waiting on a model): take back the
        calls it holds that have not begun, for the other workers and the stand-ins.

        The cut and the worker's claim of each call it begins are agreed under a lock
        (``_cut.py``): what is taken back starts after the worker's latest claim, so a
        call that began in the instant between the engine's look and the cut stays
        with its worker. A call runs at most once.
        """
        running = self._pool.running_call(w)
        batches = w.batches
        if running is None or not batches or batches[0].seq != running[0]:
            return
        seq, index, _ = running
        if index + 1 >= batches[0].size and len(batches) == 1:
            return
        start = cut(w.state, w.state_map, (seq, index + 1), batches[-1].seq)
        if start is None:
            return  # no lock (or its worker died holding it): the batch waits for it
        taken = 0
        for batch in list(batches):
            if batch.seq == start[0]:
                taken += self._queue.take_back(batch, start[1])
            elif batch.seq > start[0]:
                batches.remove(batch)
                w.dropped.append(batch.seq)
                taken += self._queue.take_back(batch, 0)
        w.assigned -= taken
        self._taken_back += taken
        self._dispatch()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
