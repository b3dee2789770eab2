"""The Ray executor: sync user functions on a Ray cluster, each node under local supervision.

:class:`RayExecutor` is the :class:`~evaluator._executors._base.Executor` on the driver.
On each node one actor (``_actor.py``) runs the batches it gets through a local
``ProcessExecutor``, which gives every call the guarantees it has on one machine: hard
timeout with kill, crash isolation, memory limit, recycling. The driver does what Ray is
for: it places batches on the nodes and survives losing one.

- **Batches** come from the process executor's work queue (``_process/_queue.py``),
  sized by the same rule from the measured cost of a call, with a larger target: about
  ``TARGET_BATCH_NS`` of a worker's time per worker of the node, so that Ray's round
  trip (a millisecond or two) is a small share. Each member holds at most about two
  seconds of its workers' time (``_members.WINDOW_NS``); the rest waits on the driver,
  where it can still go to any node. Unknown costs go out in probes of two calls per
  worker, as in the process executor.
- **Pieces**: a batch runs on its node as pieces of about ``PIECE_NS`` of the node's
  time; each piece's outcomes come back as soon as it is done, so losing a node loses
  only unfinished pieces.
- **Events** reach the driver by a long poll per member (``NodeActor.events``): the
  outcomes of finished pieces and the calls' model requests, as many as happened during
  the round trip. Plain actor calls, no streaming generators: those do not work over Ray
  Client (``ray://``).
- **Faults** of the user's function (raise, hang, crash, bad return) are outcomes made by
  the node's process executor, so Ray never retries anything (``max_restarts=0``,
  ``max_task_retries=0``). The loss of an actor or its node (the poll fails) puts the
  calls it had not finished back at the front of the queue, for the other members or a
  replacement; a call whose actors are lost ``MAX_ATTEMPTS`` times fails
  (``worker_crash``). Outcomes are recorded by position, once: every call gets exactly
  one.
- **Model calls** (``skynet.llm``, routed SDKs) from a node's workers reach the node
  actor's model handler, which sends them to the driver as events; the driver answers
  with its one model client (one rate budget for the run, usage metered to the example
  by the call's token) and replies to the actor.
- **Cancelling** a submit drops its waiting calls and cancels its batches on the nodes
  (their calls already running in a worker finish there and are dropped). **Closing**
  cancels everything, closes each actor's local executor (its workers reaped), kills the
  actors and, for the engine's own local instance, shuts Ray down.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
from collections.abc import Coroutine, Sequence
from functools import partial
from time import perf_counter, perf_counter_ns
from typing import Any, ClassVar

import msgspec

from ..._aio import shielded
from ..._call import _failures as failures
from ..._call._calls import Call, LLMHandler, Outcome
from ..._call._context import Stage
from ..._call._kinds import ExecutionKind
from ..._call._loader import UserFunction
from ..._call._results import ErrorInfo
from ..._options import validate_count, validate_ray_address
from ..._report import ClusterSummary
from .._base import ExecutorBase, ExecutorStatistics, Progress
from .._process._queue import Job, Segment, WorkQueue
from .._process._relay import answer
from .._process._wire import PICKLE_PROTOCOL, WireOutcome, call_row
from ._actor import ENCODED_MSGPACK, FAILED, LLM, OUT, ActorSpec
from ._cluster import Connection, connect, import_ray, release
from ._members import Member, RayBatch, Roster

__all__ = ["RayExecutor", "RayExecutorStatistics"]

#: A batch carries about this much of one worker's time per worker of its node.
TARGET_BATCH_NS = 1_000_000_000
#: A batch carries at least this much work when there is that much pending: Ray's round
#: trip costs a millisecond or two of CPU on the driver and on the node.
MIN_BATCH_NS = 20_000_000
#: Closing waits this long for the polls to end with their killed actors.
CLOSE_POLLS_S = 10.0
#: A piece (one submit on the node, whose outcomes come back together) carries about
#: this much of one worker's time per worker.
PIECE_NS = 100_000_000
#: A batch of less than this per worker (one piece) waits, gathering small submits (the
#: pipeline's chunks: 20 ms of the engine's time each), while its member holds...
GATHER_NS = PIECE_NS
#: ...this much work per worker: two pieces, so that the member's pieces, coming back
#: one by one, dispatch again while it still has a piece's work to hide the trip behind.
LOW_WATER_NS = 2 * PIECE_NS
#: The work (seconds of each worker's time) the pipeline keeps queued for a Ray stage.
BACKLOG_S = 0.5


class RayExecutorStatistics(ExecutorStatistics, frozen=True, kw_only=True):
    """A :class:`RayExecutor`'s snapshot: the common shape, and the cluster's."""

    nodes: int
    """Nodes with a ready actor now."""
    lost_nodes: list[str]
    """Nodes that left the cluster (died, removed) during the run, by "address (id)"."""
    actors: int
    """Node actors ready now."""
    actors_started: int
    actors_lost: int
    """Actors that died or failed (their unfinished calls requeued)."""
    batches_sent: int
    mean_batch_size: float
    calls_requeued: int
    """Calls sent again because the actor holding them was lost."""
    crashes: int
    """Calls whose worker process died (``worker_crash``)."""
    call_cost_ms: float | None
    """The running estimate of one call's cost that sizes batches (None: not measured)."""
    calls_by_node: dict[str, int]
    """Calls each node ran, by "address (node id)"."""
    excluded_nodes: list[str]
    """Nodes not used, and why."""
    startup_s: float | None
    """Connecting to Ray and starting the actors (None: not open yet)."""

    def summary(self) -> ClusterSummary:
        """The report's part of these statistics."""
        return ClusterSummary(
            nodes=sum(1 for calls in self.calls_by_node.values() if calls),
            actors=self.actors_started,
            actors_lost=self.actors_lost,
            lost_nodes=list(self.lost_nodes),
            batches=self.batches_sent,
            calls_requeued=self.calls_requeued,
            calls_by_node=dict(self.calls_by_node),
        )


class RayExecutor(ExecutorBase):
    """Run a sync user function on a Ray cluster; see the module docstring.

    ``ray_address`` is the cluster (``"auto"``, ``"HOST:PORT"``, ``"ray://HOST:PORT"``;
    None: a local instance started here and shut down at the end). ``workers`` is the
    number of worker processes per node (default: the node's CPUs as Ray reports them);
    ``max_calls_per_worker`` and ``memory_limit_mb`` apply to every worker, as in the
    process executor.
    """

    kind: ClassVar[ExecutionKind] = "ray"
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "workers",
        "llm_handler",
        "max_calls_per_worker",
        "memory_limit_mb",
        "ray_address",
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
        ray_address: str | None = None,
    ) -> None:
        super().__init__(fn, stage, timeout)
        self._address = validate_ray_address(ray_address)
        import_ray()  # a missing Ray is a ConfigError now, not at the first submit
        self._llm_handler = llm_handler
        self._queue = WorkQueue(target_ns=TARGET_BATCH_NS, gave_up=failures.ray_actors_lost)
        spec = ActorSpec(
            path=str(fn.path),
            module_name=fn.module_name,
            name=fn.name,
            stage=stage,
            timeout=self.timeout,
            workers=1,
            max_calls_per_worker=validate_count(max_calls_per_worker, "max_calls_per_worker"),
            memory_limit_mb=validate_count(memory_limit_mb, "memory_limit_mb"),
            has_llm=llm_handler is not None,
        )
        self._roster = Roster(fn, spec, workers=validate_count(workers, "workers"), events=self)
        self._connecting: asyncio.Future[Connection] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._decoder = msgspec.msgpack.Decoder(list[WireOutcome])
        self._parallelism = 1
        self._timeouts = 0
        self._crashes = 0
        self._startup_s: float | None = None
        self._dispatching = False  # a dispatch is scheduled for the submits of this tick

    @property
    def backlog_s(self) -> float:
        """A batch's round trip to its node costs milliseconds: the pipeline keeps about
        ``BACKLOG_S`` of every worker's time queued, so that batches are large and the
        nodes never wait on the driver."""
        return BACKLOG_S

    @property
    def parallelism(self) -> int:
        """The worker processes of the ready nodes (their CPUs, as Ray reports them)."""
        ready = sum(m.workers for m in self._roster.ready())
        if ready:
            self._parallelism = ready
        return self._parallelism

    # -- lifetime ---------------------------------------------------------------------

    async def _open(self) -> None:
        started = perf_counter()
        # A task of its own, shielded: cancelled mid-way, closing still waits for the
        # connection (ray.init cannot be stopped half-way) and releases it.
        self._connecting = asyncio.ensure_future(asyncio.to_thread(connect, self._address))
        connection = await asyncio.shield(self._connecting)
        await self._roster.open(ship_folder=not connection.local)
        self._parallelism = sum(m.workers for m in self._roster.ready())
        self._start(self._roster.watch())
        self._startup_s = perf_counter() - started

    async def _close(self) -> None:
        self._queue.fail_all(failures.closed_before_done("Ray executor"))
        pollers = {m.poller for m in self._roster.every if m.poller is not None}
        for task in self._tasks - pollers:
            task.cancel()
        await shielded(self._release(pollers))

    async def _release(self, pollers: set[asyncio.Task[None]]) -> None:
        """Close the actors first: their polls then end with the actors, rather than be
        cancelled mid-call (which Ray Client does not take well)."""
        try:
            await self._roster.close()
        finally:
            if pollers:
                _, late = await asyncio.wait(pollers, timeout=CLOSE_POLLS_S)
                for task in late:
                    task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks))
            connecting, self._connecting = self._connecting, None
            if connecting is not None:
                await asyncio.wait([connecting])
                if not connecting.cancelled() and connecting.exception() is None:
                    await asyncio.to_thread(release)

    def _start(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def statistics(self) -> RayExecutorStatistics:
        """Nodes, actors, batches, requeues and lost nodes so far."""
        queue, roster = self._queue, self._roster
        ready = roster.ready()
        by_node: dict[str, int] = {}
        names: dict[str, str] = {}
        for member in roster.every:
            by_node[member.name] = by_node.get(member.name, 0) + member.calls_done
            names[member.node_id] = member.name
        cost = queue.cost_ns
        return self._snapshot(
            RayExecutorStatistics,
            calls=queue.calls_done,
            timeouts=self._timeouts,
            busy=sum(m.in_flight for m in ready),
            nodes=len({m.node_id for m in ready}),
            lost_nodes=sorted(names.get(node, node[:8]) for node in roster.dead_nodes),
            actors=len(ready),
            actors_started=len(roster.every),
            actors_lost=roster.actors_lost,
            batches_sent=queue.batches_sent,
            mean_batch_size=queue.calls_sent / queue.batches_sent if queue.batches_sent else 0.0,
            calls_requeued=queue.requeued,
            crashes=self._crashes,
            call_cost_ms=None if cost is None else cost / 1e6,
            calls_by_node=by_node,
            excluded_nodes=sorted(roster.excluded.values()),
            startup_s=self._startup_s,
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
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        job = Job(list(calls), partial(_wake, future), progress)
        self._queue.add(job)
        if not self._dispatching:
            # Dispatched once the loop has run what is ready: the submits of the chunks
            # the pipeline starts together (a run's first burst) gather into one batch
            # rather than go out one small batch each to a member with no work yet.
            self._dispatching = True
            asyncio.get_running_loop().call_soon(self._deferred_dispatch)
        try:
            await future
        except asyncio.CancelledError:
            self._queue.cancel(job)
            self._cancel_batches()
            raise
        finally:
            self._queue.discard(job)
        return job.results

    def _deferred_dispatch(self) -> None:
        self._dispatching = False
        self._dispatch()

    def _dispatch(self) -> None:
        """Place batches on the members with room, while calls are pending."""
        if self._state != "open":
            return
        queue, roster = self._queue, self._roster
        cost = queue.cost_ns
        # Sized once for the whole round: re-sizing after each batch would halve the share
        # every time, down to batches of one call (as in the process executor).
        per_worker, _ = queue.batch_size(roster.usable_workers(cost))
        # A batch costs Ray a few round trips of CPU on both sides: never less work than
        # MIN_BATCH_NS in one, unless that is all there is.
        least = 1 if cost is None else int(MIN_BATCH_NS / max(cost, 1.0))
        gather = 0 if cost is None else int(GATHER_NS / max(cost, 1.0))
        while queue.pending_count > 0:
            member = roster.roomiest(cost)
            if member is None:
                return
            size = max(1, min(max(per_worker * member.workers, least), member.room(cost)))
            small = max(least, gather * member.workers)
            if size < small and member.busy_ns(cost) >= LOW_WATER_NS * member.workers:
                # Even the idlest member has work for a while: let small submits gather
                # into one batch (its next outcomes dispatch again), as Nagle would.
                # Batches of one chunk each (11-22 calls of 2 ms) cost the pipeline a
                # tenth of the nodes' throughput in round trips (bench_ray.py).
                return
            self._send(member, size, cost)

    def _send(self, member: Member, size: int, cost: float | None) -> None:
        queue = self._queue
        segments, calls = queue.take(size)
        if not segments:
            return
        try:
            payload = pickle.dumps([call_row(c) for c in calls], PICKLE_PROTOCOL)
        except Exception as exc:
            self._reject(segments, exc)
            return
        batch = queue.open_batch(segments, len(calls))
        member.batches[batch.seq] = RayBatch(batch)
        member.in_flight += len(calls)
        piece = 1 if cost is None else max(1, int(PIECE_NS * member.workers / max(cost, 1.0)))
        # Not awaited: the actor's ``run`` returns at once and never raises; a dead actor
        # is seen by its poll, which settles this batch with the rest of its work.
        member.handle.run.remote(batch.seq, payload, piece)

    def _reject(self, segments: list[Segment], error: Exception) -> None:
        """Fail the calls whose arguments cannot be pickled; queue the others again."""

        def why(call: Call) -> ErrorInfo | None:
            try:
                pickle.dumps(call_row(call), PICKLE_PROTOCOL)
            except Exception as exc:
                return failures.unsendable_arguments(self.fn, self.stage, exc)
            return None

        batch_error = failures.unsendable_arguments(self.fn, self.stage, error)
        self._queue.reject(segments, why, batch_error)

    def _cancel_batches(self) -> None:
        """Cancel, on their nodes, the batches whose every call belongs to a cancelled job."""
        for member in self._roster.ready():
            seqs = [
                seq
                for seq, rb in member.batches.items()
                if all(segment[0].cancelled for segment in rb.batch.segments)
            ]
            for seq in seqs:
                member.in_flight -= member.batches.pop(seq).left
            if seqs:
                member.handle.cancel.remote(seqs)
        self._dispatch()

    # -- events from the members ------------------------------------------------------

    def member_ready(self, member: Member) -> None:
        """A member booted: poll its events, give it work."""
        member.poller = asyncio.get_running_loop().create_task(self._poll(member))
        self._tasks.add(member.poller)
        member.poller.add_done_callback(self._tasks.discard)
        self._dispatch()

    async def _poll(self, member: Member) -> None:
        ray = import_ray()
        try:
            while member.state == "ready":
                events = await member.handle.events.remote()
                for event in events:
                    self._event(member, event)
                self._dispatch()
        except ray.exceptions.RayError:
            self.member_lost(member)
        except Exception:
            # Not Ray's word but a batch the driver cannot settle: give the actor up like
            # a lost one, so its calls go elsewhere (and fail after MAX_ATTEMPTS).
            self.member_lost(member)
            raise

    def _event(self, member: Member, event: tuple[Any, ...]) -> None:
        tag = event[0]
        if tag == OUT:
            self._outcomes(member, *event[1:])
        elif tag == LLM:
            self._start(self._relay(member, *event[1:]))
        elif tag == FAILED:
            _, seq, kind, message = event
            error = ErrorInfo(kind, message)
            rb = member.batches.get(seq)
            if rb is not None:
                now = perf_counter_ns()
                for lo, hi in rb.gaps():
                    self._record(member, rb, seq, lo, [Outcome(None, error, now, now)] * (hi - lo))

    def _outcomes(
        self,
        member: Member,
        seq: int,
        start: int,
        count: int,
        work_ns: int,
        encoding: int,
        body: bytes,
    ) -> None:
        rb = member.batches.get(seq)
        if rb is None or rb.mask[start]:
            return  # a batch already settled (cancelled, or its actor given up on)
        outcomes: list[Any]
        try:
            if encoding == ENCODED_MSGPACK:
                outcomes = self._decoder.decode(body)
            else:
                outcomes = pickle.loads(body)
        except Exception as exc:
            # e.g. a class the node's code defines but the driver cannot import.
            error = failures.unreadable_value(self.fn, self.stage, exc)
            now = perf_counter_ns()
            outcomes = [Outcome(None, error, now, now)] * count
        queue = self._queue
        sample = work_ns / max(1, len(outcomes))
        if work_ns > 0:
            cost = queue.cost_ns
            queue.cost_ns = sample if cost is None else 0.7 * cost + 0.3 * sample
        self._record(member, rb, seq, start, outcomes)

    def _record(
        self, member: Member, rb: RayBatch, seq: int, start: int, outcomes: list[Any]
    ) -> None:
        n = len(outcomes)
        self._queue.deliver(rb.batch, start, outcomes)
        rb.mask[start : start + n] = b"\x01" * n
        rb.left -= n
        member.in_flight -= n
        member.calls_done += n
        self._queue.calls_done += n
        timeout = failures.timeout_kind(self.stage)
        for outcome in outcomes:
            error = outcome.error
            if error is not None:
                if error.kind == timeout:
                    self._timeouts += 1
                elif error.kind == "worker_crash":
                    self._crashes += 1
        if rb.left <= 0:
            del member.batches[seq]

    async def _relay(
        self,
        member: Member,
        request: int,
        token: int,
        stage: Stage,
        instruction: str,
        input: str | None,
        options: dict[str, Any],
    ) -> None:
        body = await answer(self._llm_handler, request, token, stage, instruction, input, options)
        if member.state == "ready":
            with contextlib.suppress(import_ray().exceptions.RayError):
                await member.handle.reply.remote(request, body)

    def member_lost(self, member: Member) -> None:
        """``member``'s actor or node is gone: requeue what it had not finished."""
        if member.state != "ready":
            return
        requeue: list[Segment] = []
        for rb in member.batches.values():
            for lo, hi in rb.gaps():
                requeue += self._queue.positions(rb.batch, lo, hi, 1)
        member.batches.clear()
        member.in_flight = 0
        self._roster.lost(member)
        if member.poller is not None and member.poller is not asyncio.current_task():
            member.poller.cancel()
        self._queue.requeue(requeue)
        self._dispatch()

    def no_nodes(self, why: str) -> None:
        """No node is left: every pending call fails, saying why."""
        self._queue.fail_all(failures.ray_no_nodes(why))


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
