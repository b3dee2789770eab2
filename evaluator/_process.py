"""The process executor: sync user functions in worker processes, isolated and batched.

Design (see DESIGN.md, "Executors"):

- **Workers** are fresh interpreters started with ``python -c`` (spawn semantics: never
  ``fork`` a parent that runs threads and an event loop) rather than through
  ``multiprocessing``, whose spawn re-imports the engine's ``__main__`` in every worker
  and whose ``Pool``/``ProcessPoolExecutor`` hang on, or fail everything after, a dead
  worker. Each worker imports the user's file once, by path (:mod:`evaluator._worker`).
- **Messages** are length-prefixed frames over a Unix socket pair. The engine side is
  non-blocking and driven by ``loop.add_reader`` (no thread per worker; works under
  uvloop). A batch of calls goes out as one pickled list; ``score`` outcomes come back
  as one msgspec-msgpack message.
- **Batches** are sized from the measured cost of a call so that each carries about
  ``TARGET_BATCH_NS`` of work: an exact-match metric travels thousands to a message, a
  call of tens of milliseconds one at a time. A submit's calls are split across the
  workers (unless all of them are less work than a round trip: an optimizer's
  minibatch of cheap calls travels as one message to one worker), and each worker
  holds a second batch while it runs the first, so it never waits for a round trip.
- **Timeouts**: a worker publishes the call it runs and its start time in shared memory;
  a watchdog task sleeps until the earliest deadline and kills a worker whose call is
  past ``timeout``. That call gets ``metric_timeout`` (``program_timeout`` for ``run``);
  the unrun calls of its batches are queued again; a fresh worker takes its place.
- **A warm spare**: one extra worker per executor, started and having imported the
  user's file, waits idle. A crash, a timeout kill or a recycle swaps it in at once (at
  the kill, not after the reaping) and a new spare starts in the background, so a
  crash-prone or hang-prone function does not leave a worker slot empty for a whole
  interpreter start-up (about 0.3 s) per fault. The spare is idle (blocked in ``recv``):
  it costs memory, not a core, so it is not counted against ``workers``. It is started
  only once every worker is ready (so that it never slows the first start-up nor loops
  on a file that fails to load in workers) and dies with the executor like the others.
- **Crashes** (``os._exit``, a segfault, the OOM killer, a memory limit) are seen as the
  worker process ending (a pidfd on Linux): the call it was running gets
  ``worker_crash`` with the exit code or signal, the rest of its batches are queued again.
- **Memory limit**: ``RLIMIT_AS`` (address space, not resident memory) in each worker. A
  ``MemoryError`` raised in the user's function under the limit is reported as
  ``worker_crash`` "memory limit of N MB exceeded" and the worker is replaced, because
  the process that ran out of memory may hold half-built state; a crash of native code
  under the limit says that the limit may have been exceeded.
- **skynet.llm** in a worker is relayed to the engine (:class:`evaluator._worker.
  RelayBridge`) and answered by ``llm_handler`` in a task the executor owns.

Cancelling a ``submit`` returns at once; calls of it already sent finish in their worker
(bounded by one batch of about ``TARGET_BATCH_NS``, or by the timeout) and are dropped.

Known limit: a batch queued in a worker (cheap calls only, see ``PREFETCH_MAX_COST_NS``)
just before that worker's running call hangs waits for the hung call's timeout, then is
queued again; it is delayed, never lost. Revoking it early would risk running its calls
twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import mmap
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from time import perf_counter_ns
from typing import Any, Literal

import anyio
import msgspec
from msgspec.structs import astuple

from ._calls import Call, LLMHandler, Outcome
from ._context import Stage
from ._loader import UserFunction
from ._results import ErrorInfo
from ._worker import (
    EXIT_FATAL,
    EXIT_MEMORY,
    HEADER,
    INDEX,
    KIND_PICKLED_RESULT,
    KIND_RESULT,
    PICKLE_PROTOCOL,
    RESULT_HEADER,
    SEQ,
    START,
    STATE_SLOTS,
    ResultMsg,
)

__all__ = ["ProcessExecutor", "ProcessExecutorStatistics"]

#: Work carried by one batch: large enough that messaging is a small share of it, small
#: enough that the last batches spread over the workers and a killed worker loses little.
TARGET_BATCH_NS = 10_000_000
MAX_BATCH = 8192
#: A worker gets a second batch while it runs one (hiding the round trip) only when a
#: call costs at most this much: for longer calls the round trip is a small share anyway,
#: and a queued batch cannot move to another worker if the running call turns out long.
PREFETCH_MAX_COST_NS = 1_000_000
#: ... and only while its running call has not taken this many times the mean cost.
PREFETCH_STUCK_FACTOR = 20
PREFETCH_STUCK_MIN_NS = 2_000_000
#: Work below this is not split over several workers: a round trip costs more.
SPLIT_MIN_NS = 200_000
#: Calls of unknown cost go out in batches this small until the first results are in.
PROBE_BATCH = 2
#: A call is killed this long after its timeout, so one that ends just at it can report.
GRACE_NS = 50_000_000
#: A batch whose worker dies outside the user's function this many times fails.
MAX_ATTEMPTS = 3
#: Workers dying before they are ready this many times in a row: stop replacing them.
MAX_STARTUP_FAILURES = 3
_READ_SIZE = 1 << 18

_ROOT = str(Path(__file__).resolve().parent.parent)
#: A worker's start-up, run with ``python -c``. The package's ``__init__`` imports the
#: whole engine (pipeline, judges, llm client: about 60 % of a worker's start-up CPU),
#: of which a worker needs a few modules; so ``evaluator`` starts as a bare package and
#: its ``__init__`` runs only if user code asks the package for a name it lacks.
_BOOT = """
import sys, types
root = sys.argv[1]
sys.path.insert(0, root)
if "evaluator" not in sys.modules:
    pkg = types.ModuleType("evaluator")
    pkg.__path__ = [root + "/evaluator"]
    pkg.__file__ = root + "/evaluator/__init__.py"

    def _complete(name):
        import importlib, importlib.util, os
        if os.path.isfile(os.path.join(pkg.__path__[0], name + ".py")):
            return importlib.import_module("evaluator." + name)
        if "__getattr__" in pkg.__dict__:
            del pkg.__getattr__
            spec = importlib.util.spec_from_file_location(
                "evaluator", pkg.__file__, submodule_search_locations=pkg.__path__
            )
            pkg.__spec__, pkg.__package__ = spec, "evaluator"
            spec.loader.exec_module(pkg)
        return getattr(pkg, name)

    pkg.__getattr__ = _complete
    sys.modules["evaluator"] = pkg
from evaluator._worker import main
main()
"""

_Segment = tuple["_Job", int, int, int]  # job, first index, end index, attempts


class ProcessExecutorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a :class:`ProcessExecutor`'s state."""

    workers: int
    """Configured number of worker processes."""
    workers_alive: int
    """Worker processes running now (a recycled one may overlap its replacement)."""
    restarts: int
    """Workers put in place of one that timed out or crashed (a promoted spare or a new
    worker)."""
    crashes: int
    """Workers that died on their own (exit, signal, memory limit)."""
    timeouts: int
    """Calls killed at the timeout."""
    recycled: int
    """Workers retired after ``max_calls_per_worker`` calls."""
    batches_sent: int
    mean_batch_size: float
    calls_done: int
    """Calls that returned an outcome from a worker (not counting killed ones)."""
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


class _Job:
    """The calls of one ``submit`` and their outcomes as they arrive."""

    __slots__ = ("calls", "cancelled", "future", "remaining", "results")
    # ``cancelled``: the submit was cancelled or failed as a whole; drop late outcomes.

    def __init__(self, calls: list[Call], future: asyncio.Future[None]) -> None:
        self.calls = calls
        self.results: list[Any] = [None] * len(calls)
        self.remaining = len(calls)
        self.future = future
        self.cancelled = False


class _Batch:
    """Calls sent to one worker in one message; ``done`` results have come back."""

    __slots__ = ("done", "segments", "seq", "size")

    def __init__(self, seq: int, segments: list[_Segment], size: int) -> None:
        self.seq = seq
        self.segments = segments
        self.size = size
        self.done = 0


class _Worker:
    __slots__ = (
        "assigned",
        "batches",
        "closed",
        "kill",
        "pidfd",
        "proc",
        "rbuf",
        "ready",
        "replaced",
        "retiring",
        "sock",
        "spare",
        "state",
        "state_map",
        "tasks",
        "wbuf",
    )

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        sock: socket.socket,
        state_map: mmap.mmap,
        pidfd: int | None,
    ) -> None:
        self.proc = proc
        self.sock = sock
        self.state_map = state_map
        self.state = memoryview(state_map).cast("q")
        self.pidfd = pidfd
        self.batches: deque[_Batch] = deque()
        self.assigned = 0
        self.retiring = False
        self.replaced = False  # another worker has been put in its place
        self.spare = False  # idle, outside ``_workers`` until promoted
        self.ready = False
        self.closed = False
        self.kill: tuple[int, int, int] | None = None  # seq, index, start of a timed-out call
        self.rbuf = bytearray()
        self.wbuf: deque[memoryview] = deque()
        self.tasks: set[asyncio.Task[None]] = set()


def _state_fd() -> int:
    """An anonymous shared file for a worker's state array."""
    size = STATE_SLOTS * 8
    try:
        fd = os.memfd_create("skynet-worker-state")
    except (AttributeError, OSError):
        with tempfile.TemporaryFile() as f:
            fd = os.dup(f.fileno())
    os.ftruncate(fd, size)
    return fd


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread while a worker is started: the child inherits the
    mask across exec, so the terminal's Ctrl-C (sent to the whole process group) cannot
    interrupt its start-up with a traceback before it ignores SIGINT (a spare or a
    replacement is often starting when the user presses Ctrl-C). A SIGINT that arrives
    meanwhile is delivered to the engine when the mask is restored, microseconds later.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _describe_exit(returncode: int, memory_limit_mb: int | None) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        text = f"killed by {name}"
        if -returncode == signal.SIGKILL:
            text += " (the out-of-memory killer or another process)"
    else:
        text = f"exited with code {returncode}"
    if memory_limit_mb is not None and returncode in (
        1,
        -signal.SIGSEGV,
        -signal.SIGABRT,
        -signal.SIGBUS,
        -signal.SIGKILL,
    ):
        text += f"; the worker's memory limit of {memory_limit_mb} MB may have been exceeded"
    return text


class ProcessExecutor:
    """Run a sync user function in worker processes; see the module docstring.

    ``submit`` returns one :class:`Outcome` per call, in order, whatever the function
    does. Outcomes of ``score`` calls are :class:`evaluator._worker.WireOutcome`
    instances, a subclass of ``Outcome`` decoded without pickle.
    """

    def __init__(
        self,
        fn: UserFunction,
        stage: Literal["run", "score"],
        *,
        timeout: float,
        workers: int | None = None,
        llm_handler: LLMHandler | None = None,
        max_calls_per_worker: int | None = None,
        memory_limit_mb: int | None = None,
    ) -> None:
        if stage not in ("run", "score"):
            raise ValueError(f"`stage` must be 'run' or 'score', got {stage!r}")
        if fn.is_async:
            raise ValueError(
                f"`{fn.name}` in {fn.path} is `async def`: it runs in the async executor, "
                "not in worker processes"
            )
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"`timeout` must be a positive number of seconds, got {timeout!r}")
        if workers is not None and workers < 1:
            raise ValueError(f"`workers` must be at least 1, got {workers}")
        if max_calls_per_worker is not None and max_calls_per_worker < 1:
            raise ValueError(
                f"`max_calls_per_worker` must be at least 1, got {max_calls_per_worker}"
            )
        if memory_limit_mb is not None and memory_limit_mb < 1:
            raise ValueError(f"`memory_limit_mb` must be at least 1, got {memory_limit_mb}")
        self._fn = fn
        self._stage: Stage = stage
        self._timeout = float(timeout)
        self._timeout_ns = int(timeout * 1e9)
        self._n_workers = workers or os.cpu_count() or 1
        self._llm_handler = llm_handler
        self._max_calls = max_calls_per_worker
        self._memory_limit_mb = memory_limit_mb
        self._phase: Literal["new", "open", "closed"] = "new"
        self._decoder = msgspec.msgpack.Decoder(ResultMsg)
        # Runtime state, created inside the running loop by __aenter__.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._workers: list[_Worker] = []
        self._pending: deque[_Segment] = deque()
        self._pending_count = 0
        self._jobs: set[_Job] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._seq = 0
        self._cost_ns: float | None = None
        self._broken: str | None = None
        self._startup_failures = 0
        self._spare: _Worker | None = None
        self._spares_started = self._spares_promoted = self._spare_deaths = 0
        self._restarts = self._crashes = self._timeouts = self._recycled = 0
        self._batches_sent = self._calls_sent = self._calls_done = self._requeued = 0

    # -- lifetime ---------------------------------------------------------------------

    async def __aenter__(self) -> ProcessExecutor:
        if self._phase != "new":
            raise RuntimeError(
                "a ProcessExecutor can be entered only once; create a new one for a new run"
            )
        self._loop = asyncio.get_running_loop()
        self._phase = "open"
        try:
            for _ in range(self._n_workers):
                self._spawn()
            self._start_task(self._watchdog())
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._phase == "closed":
            return
        self._phase = "closed"
        # Everything that must happen happens before the first await; the waiting part
        # is shielded so that a cancelled caller still leaves no process behind.
        workers = list(self._workers)
        if self._spare is not None:
            workers.append(self._spare)
            self._spare = None
        for w in workers:
            self._unwatch(w)
            with contextlib.suppress(OSError):
                w.proc.kill()
        message = "the process executor was closed before this call finished"
        for job in list(self._jobs):
            self._fail_job(job, ErrorInfo("cancelled", message))
        self._pending.clear()
        self._pending_count = 0
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with anyio.CancelScope(shield=True):
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            deadline = perf_counter_ns() + 10_000_000_000
            for w in workers:
                # A SIGKILLed process is gone within milliseconds; polling needs no fd.
                while w.proc.poll() is None and perf_counter_ns() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.002)
                self._close_worker(w)

    def statistics(self) -> ProcessExecutorStatistics:
        """Workers alive, restarts, crashes, timeouts, batches and calls so far."""
        return ProcessExecutorStatistics(
            workers=self._n_workers,
            workers_alive=sum(1 for w in self._workers if not w.closed),
            restarts=self._restarts,
            crashes=self._crashes,
            timeouts=self._timeouts,
            recycled=self._recycled,
            batches_sent=self._batches_sent,
            mean_batch_size=self._calls_sent / self._batches_sent if self._batches_sent else 0.0,
            calls_done=self._calls_done,
            calls_requeued=self._requeued,
            call_cost_ms=None if self._cost_ns is None else self._cost_ns / 1e6,
            spares_started=self._spares_started,
            spares_promoted=self._spares_promoted,
            spare_ready=self._spare is not None and self._spare.ready,
        )

    # -- submitting -------------------------------------------------------------------

    async def submit(self, calls: Sequence[Call]) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe."""
        if self._phase != "open":
            raise RuntimeError(
                "the ProcessExecutor is closed"
                if self._phase == "closed"
                else "enter the ProcessExecutor with `async with` before submitting"
            )
        if not calls:
            return []
        assert self._loop is not None
        job = _Job(list(calls), self._loop.create_future())
        if self._broken is not None:
            self._fail_job(job, ErrorInfo("worker_crash", self._broken))
            return job.results
        self._jobs.add(job)
        self._pending.append((job, 0, len(job.calls), 0))
        self._pending_count += len(job.calls)
        self._dispatch()
        try:
            await job.future
        except asyncio.CancelledError:
            self._cancel_job(job)
            raise
        finally:
            self._jobs.discard(job)
        return job.results

    def _cancel_job(self, job: _Job) -> None:
        job.cancelled = True
        kept = deque(s for s in self._pending if s[0] is not job)
        self._pending_count -= sum(s[2] - s[1] for s in self._pending if s[0] is job)
        self._pending = kept

    def _fill(self, job: _Job, at: int, outcomes: list[Any]) -> None:
        if job.cancelled:
            return
        job.results[at : at + len(outcomes)] = outcomes
        job.remaining -= len(outcomes)
        if job.remaining <= 0 and not job.future.done():
            job.future.set_result(None)

    def _fail_job(self, job: _Job, error: ErrorInfo) -> None:
        if job.cancelled:
            return
        job.cancelled = True  # no outcome may land in a list already handed back
        now = perf_counter_ns()
        for i, value in enumerate(job.results):
            if value is None:
                job.results[i] = Outcome(None, error, now, now)
        job.remaining = 0
        if not job.future.done():
            job.future.set_result(None)

    def _deliver(self, batch: _Batch, start: int, outcomes: list[Any]) -> None:
        """Outcomes of batch positions ``start ..`` to the jobs they belong to."""
        segments = batch.segments
        if len(segments) == 1:
            job, lo, _, _ = segments[0]
            self._fill(job, lo + start, outcomes)
            return
        pos, i, n, offset = start, 0, len(outcomes), 0
        for job, lo, hi, _ in segments:
            end = offset + hi - lo
            if pos < end:
                take = min(end - pos, n - i)
                self._fill(job, lo + pos - offset, outcomes[i : i + take])
                i += take
                pos += take
                if i >= n:
                    return
            offset = end

    def _positions(self, batch: _Batch, a: int, b: int, extra_attempts: int) -> list[_Segment]:
        """The segments holding batch positions ``a .. b``."""
        out: list[_Segment] = []
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

    # -- dispatching ------------------------------------------------------------------

    def _batch_size(self) -> tuple[int, bool]:
        """How many calls the next batch carries, and whether a worker may queue it."""
        cost = self._cost_ns
        if cost is None:
            # Unknown cost: small batches, none queued behind a call that may be long.
            size, prefetch = PROBE_BATCH, False
        else:
            size = max(1, min(MAX_BATCH, int(TARGET_BATCH_NS / max(cost, 1.0))))
            prefetch = cost <= PREFETCH_MAX_COST_NS
        pending = self._pending_count
        if cost is not None and pending * cost <= SPLIT_MIN_NS:
            # Less work than a round trip: one worker, one message. Spreading it would
            # only wake more processes (an optimizer's minibatch of 3 exact matches).
            return max(1, min(size, pending)), prefetch
        usable = sum(1 for w in self._workers if not (w.closed or w.retiring or w.kill)) or 1
        share = -(-pending // usable)  # spread a submit over the workers
        return max(1, min(size, share)), prefetch

    def _dispatch(self) -> None:
        if self._phase != "open":
            return
        if self._broken is not None:
            self._fail_everything(self._broken)
            return
        # Sized once for the whole round: re-sizing after each batch would halve the
        # share every time (2048, 1024, 512, ... of a chunk of 4096).
        size, prefetch = self._batch_size()
        while self._pending_count > 0:
            target: _Worker | None = None
            for w in self._workers:
                if not (w.closed or w.retiring or w.kill or w.batches):
                    target = w
                    break
            if target is None and prefetch:
                # A second batch only behind a call that is not (yet) a long one: a batch
                # queued in a busy worker's socket cannot move to a worker that frees up.
                cost = self._cost_ns or 0.0
                stuck = perf_counter_ns() - max(
                    PREFETCH_STUCK_MIN_NS, int(PREFETCH_STUCK_FACTOR * cost)
                )
                for w in self._workers:
                    if not (w.closed or w.retiring or w.kill) and len(w.batches) == 1:
                        started = w.state[START]
                        if not (started and started < stuck):
                            target = w
                            break
            if target is None:
                return
            before = self._pending_count
            self._send_batch(target, size)
            if self._pending_count >= before and not target.batches:
                return  # no progress (cannot happen by design): never spin on the loop

    def _take(self, size: int) -> tuple[list[_Segment], list[Call]]:
        segments: list[_Segment] = []
        calls: list[Call] = []
        need = size
        pending = self._pending
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
        self._pending_count -= size - need
        return segments, calls

    def _send_batch(self, w: _Worker, size: int) -> None:
        if self._max_calls is not None:
            size = min(size, self._max_calls - w.assigned)
        segments, calls = self._take(size)
        if not segments:
            return
        try:
            # Calls travel as plain tuples: pickling a Struct goes through __reduce__,
            # which costs the engine's one process twice as much per call.
            rows = [astuple(call) for call in calls]
            payload = pickle.dumps(("batch", self._seq + 1, rows), PICKLE_PROTOCOL)
        except Exception as exc:
            self._reject_unpicklable(segments, exc)
            return
        self._seq += 1
        w.batches.append(_Batch(self._seq, segments, len(calls)))
        w.assigned += len(calls)
        self._batches_sent += 1
        self._calls_sent += len(calls)
        self._send(w, payload)
        if self._max_calls is not None and w.assigned >= self._max_calls:
            # Graceful recycling: the worker runs what it holds, then reads "stop".
            w.retiring = True
            self._recycled += 1
            self._send(w, pickle.dumps(("stop",), PICKLE_PROTOCOL))
            self._replace(w, restart=False)

    def _reject_unpicklable(self, segments: list[_Segment], error: Exception) -> None:
        """Fail the calls whose arguments cannot cross to a worker; queue the others."""
        kind = "program_error" if self._stage == "run" else "metric_error"
        keep: list[_Segment] = []
        now = perf_counter_ns()

        def fail(job: _Job, i: int, exc: Exception) -> None:
            message = (
                f"the arguments of `{self._fn.name}` cannot be sent to a worker process "
                f"({type(exc).__name__}: {exc}); use picklable values or set "
                "EXECUTION = 'thread'"
            )
            self._fill(job, i, [Outcome(None, ErrorInfo(kind, message), now, now)])

        for job, lo, hi, attempts in segments:
            for i in range(lo, hi):
                try:
                    pickle.dumps(job.calls[i], PICKLE_PROTOCOL)
                except Exception as exc:
                    fail(job, i, exc)
                else:
                    keep.append((job, i, i + 1, attempts))
        if len(keep) == sum(hi - lo for _, lo, hi, _ in segments):
            # Each call pickles alone but not the batch (cannot happen with plain data):
            # fail them rather than retry the same batch for ever.
            for job, i, _, _ in keep:
                fail(job, i, error)
            keep = []
        self._requeue(keep, count=False)

    def _requeue(self, segments: list[_Segment], *, count: bool = True) -> None:
        """Put segments back at the front of the queue, failing those tried too often."""
        kept: list[_Segment] = []
        now = perf_counter_ns()
        for seg in segments:
            job, lo, hi, attempts = seg
            if job.cancelled:
                continue
            if attempts >= MAX_ATTEMPTS:
                message = (
                    f"worker processes died {attempts} times while holding this call "
                    "outside the user's function (receiving or returning it); not retried"
                )
                error = Outcome(None, ErrorInfo("worker_crash", message), now, now)
                self._fill(job, lo, [error] * (hi - lo))
                continue
            kept.append(seg)
            if count:
                self._requeued += hi - lo
        self._pending.extendleft(reversed(kept))
        self._pending_count += sum(hi - lo for _, lo, hi, _ in kept)

    def _fail_everything(self, message: str) -> None:
        error = ErrorInfo("worker_crash", message)
        for job in list(self._jobs):
            self._fail_job(job, error)
        self._pending.clear()
        self._pending_count = 0

    # -- workers ----------------------------------------------------------------------

    def _replace(self, w: _Worker, *, restart: bool) -> None:
        """Put a worker in the place of ``w`` (crashed, killed or retiring): the warm
        spare if there is one, at once, else a new worker."""
        if w.replaced or self._phase != "open" or self._broken is not None:
            return
        w.replaced = True
        if restart:
            self._restarts += 1
        spare = self._spare
        if spare is not None and not spare.closed:
            self._spare = None
            spare.spare = False
            self._workers.append(spare)
            self._spares_promoted += 1
            self._ensure_spare()  # waits for the promoted one to be ready, if it is not
        else:
            self._spawn()

    def _ensure_spare(self) -> None:
        """Start a warm spare if there is none and every worker is ready.

        Not while workers are still starting (the spare would compete with them for the
        cores) nor after start-up failures (a file that does not load in workers must
        fail cleanly, not keep starting spares); and spares that die too often are given
        up on (they are an optimisation: replacements then start on demand).
        """
        if (
            self._spare is not None
            or self._phase != "open"
            or self._broken is not None
            or self._startup_failures
            or self._spare_deaths >= MAX_STARTUP_FAILURES
        ):
            return
        if all(w.ready for w in self._workers if not (w.closed or w.replaced)):
            self._spawn(spare=True)

    def _spawn(self, *, spare: bool = False) -> None:
        assert self._loop is not None
        if self._phase != "open":
            return
        parent_sock, child_sock = socket.socketpair()
        state_fd = _state_fd()
        try:
            state_map = mmap.mmap(state_fd, STATE_SLOTS * 8)
            argv = [
                sys.executable,
                "-c",
                _BOOT,
                _ROOT,
                str(child_sock.fileno()),
                str(state_fd),
                str(os.getpid()),
            ]
            # Started from the loop's thread: PR_SET_PDEATHSIG follows the thread that
            # started the child, and the loop's thread outlives the executor.
            with _sigint_blocked():
                proc = subprocess.Popen(
                    argv,
                    pass_fds=(child_sock.fileno(), state_fd),
                    stdin=subprocess.DEVNULL,
                    close_fds=True,
                )
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
            os.close(state_fd)
        pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(proc.pid)
        parent_sock.setblocking(False)
        w = _Worker(proc, parent_sock, state_map, pidfd)
        if spare:
            w.spare = True
            self._spare = w
            self._spares_started += 1
        else:
            self._workers.append(w)
        init = {
            "sys_path": list(sys.path),
            "path": str(self._fn.path),
            "name": self._fn.name,
            "stage": self._stage,
            "has_llm": self._llm_handler is not None,
            "memory_limit_mb": self._memory_limit_mb,
        }
        self._send(w, pickle.dumps(init, PICKLE_PROTOCOL))
        self._loop.add_reader(parent_sock.fileno(), self._on_readable, w)
        if pidfd is not None:
            self._loop.add_reader(pidfd, self._on_exited, w)

    def _send(self, w: _Worker, body: bytes) -> None:
        if w.closed:
            return
        frame = HEADER.pack(len(body), 0) + body
        if w.wbuf:
            w.wbuf.append(memoryview(frame))
            return
        try:
            sent = w.sock.send(frame)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return  # the worker is gone; its exit is handled when the process ends
        if sent < len(frame):
            w.wbuf.append(memoryview(frame)[sent:])
            assert self._loop is not None
            self._loop.add_writer(w.sock.fileno(), self._on_writable, w)

    def _on_writable(self, w: _Worker) -> None:
        while w.wbuf:
            head = w.wbuf[0]
            try:
                sent = w.sock.send(head)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                w.wbuf.clear()
                break
            if sent < len(head):
                w.wbuf[0] = head[sent:]
                return
            w.wbuf.popleft()
        assert self._loop is not None
        self._loop.remove_writer(w.sock.fileno())

    def _read(self, w: _Worker) -> bool:
        """Read what the socket holds into the buffer; False at end of stream."""
        while True:
            try:
                data = w.sock.recv(_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            if not data:
                return False
            w.rbuf += data
            if len(data) < _READ_SIZE:
                return True

    def _on_readable(self, w: _Worker) -> None:
        alive = self._read(w)
        self._parse(w)
        if not alive and not w.closed:
            assert self._loop is not None
            self._loop.remove_reader(w.sock.fileno())
            if w.pidfd is None:  # no pidfd: poll for the exit the end of stream announces
                self._start_task(self._await_exit(w))

    async def _await_exit(self, w: _Worker) -> None:
        delay = 0.001
        while w.proc.poll() is None:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        self._on_exited(w)

    def _parse(self, w: _Worker) -> None:
        buf = w.rbuf
        pos, end, header = 0, len(buf), HEADER.size
        while end - pos >= header and not w.closed:
            length, kind = HEADER.unpack_from(buf, pos)
            stop = pos + header + length
            if stop > end:
                break
            body = buf[pos + header : stop]
            pos = stop
            self._on_message(w, kind, body)
        if pos:
            del buf[:pos]

    def _on_message(self, w: _Worker, kind: int, body: bytearray) -> None:
        if kind == KIND_RESULT:
            msg = self._decoder.decode(body)
            self._on_results(w, msg.seq, msg.start, msg.work_ns, msg.final, msg.outcomes)
            return
        if kind == KIND_PICKLED_RESULT:
            seq, start, work_ns, final, count = RESULT_HEADER.unpack_from(body)
            try:
                outcomes = pickle.loads(memoryview(body)[RESULT_HEADER.size :])
            except Exception as exc:
                # e.g. a class the worker's code defines but the engine cannot import.
                kind_name = "program_error" if self._stage == "run" else "metric_error"
                message = (
                    f"the value `{self._fn.name}` returned cannot be rebuilt in the engine's "
                    f"process ({type(exc).__name__}: {exc}); return picklable values of "
                    "importable types or set EXECUTION = 'thread'"
                )
                now = perf_counter_ns()
                outcomes = [Outcome(None, ErrorInfo(kind_name, message), now, now)] * count
            self._on_results(w, seq, start, work_ns, final, outcomes)
            return
        message = pickle.loads(body)
        tag = message[0]
        if tag == "llm":
            self._start_task(self._relay(w, *message[1:]), owner=w)
        elif tag == "ready":
            w.ready = True
            self._startup_failures = 0
            self._ensure_spare()
        elif tag == "fatal":
            self._broken = str(message[1])
            self._fail_everything(self._broken)

    def _on_results(
        self, w: _Worker, seq: int, start: int, work_ns: int, final: bool, outcomes: list[Any]
    ) -> None:
        if not w.batches or w.batches[0].seq != seq:
            return  # a batch already given up on (its job failed)
        batch = w.batches[0]
        n = len(outcomes)
        if n:
            sample = work_ns / n
            cost = self._cost_ns
            self._cost_ns = sample if cost is None else 0.7 * cost + 0.3 * sample
            self._deliver(batch, start, outcomes)
            batch.done = start + n
            self._calls_done += n
        if final:
            w.batches.popleft()
            self._dispatch()

    def _on_exited(self, w: _Worker) -> None:
        """A worker process ended: blame the call it was running, queue the rest again."""
        if w.closed:
            return
        returncode = w.proc.poll()
        if returncode is None:
            return  # not yet reaped; the pidfd or the poller will call again
        self._read(w)  # results it sent before it died still count
        self._parse(w)
        if w.closed:
            return
        started, seq, index = w.state[START], w.state[SEQ], w.state[INDEX]
        kill, batches, was_ready = w.kill, list(w.batches), w.ready
        self._unwatch(w)
        self._close_worker(w)
        if w.spare:
            self._on_spare_exited(w, returncode, was_ready)
            return
        if self._phase != "open":
            return
        if w.retiring and returncode == 0 and not batches:
            self._dispatch()
            return
        cause = _describe_exit(returncode, self._memory_limit_mb)
        requeue: list[_Segment] = []
        for batch in batches:
            culprit: int | None = None
            penalty = 0
            if batch is batches[0]:
                if kill is not None and kill[0] == batch.seq and kill[1] >= batch.done:
                    culprit, started = kill[1], kill[2]
                    self._timeouts += 1
                    kind = "program_timeout" if self._stage == "run" else "metric_timeout"
                    message = (
                        f"`{self._fn.name}` ran past the timeout of {self._timeout:g} s; "
                        "its worker process was killed and replaced"
                    )
                elif kill is None and started and seq == batch.seq and index >= batch.done:
                    culprit = index
                    kind = "worker_crash"
                    message = (
                        f"the worker process running `{self._fn.name}` on this example died "
                        f"({cause}); the rest of its batch ran in a fresh worker"
                    )
                elif kill is None and returncode != EXIT_MEMORY:
                    penalty = 1  # died outside the user's call: count it against the batch
            if culprit is None:
                requeue += self._positions(batch, batch.done, batch.size, penalty)
                continue
            error = Outcome(None, ErrorInfo(kind, message), started, perf_counter_ns())
            self._deliver(batch, culprit, [error])
            requeue += self._positions(batch, batch.done, culprit, 0)
            requeue += self._positions(batch, culprit + 1, batch.size, 0)
        if kill is None:
            self._crashes += 1
            if not was_ready and returncode != EXIT_FATAL:
                self._startup_failures += 1
                if self._startup_failures >= MAX_STARTUP_FAILURES:
                    self._broken = (
                        f"worker processes die while starting ({cause}); "
                        f"{self._startup_failures} in a row, not starting more"
                    )
        self._requeue(requeue)
        self._replace(w, restart=True)  # no-op if done at the kill or the retiring
        self._dispatch()

    def _on_spare_exited(self, w: _Worker, returncode: int, was_ready: bool) -> None:
        """The idle spare died (it held no calls): count it, and perhaps start another."""
        if self._spare is w:
            self._spare = None
        if self._phase != "open":
            return
        self._spare_deaths += 1
        if not was_ready and returncode != EXIT_FATAL:
            self._startup_failures += 1
            if self._startup_failures >= MAX_STARTUP_FAILURES:
                cause = _describe_exit(returncode, self._memory_limit_mb)
                self._broken = (
                    f"worker processes die while starting ({cause}); "
                    f"{self._startup_failures} in a row, not starting more"
                )
        self._ensure_spare()
        self._dispatch()  # fails the waiting calls if the executor is now broken

    def _unwatch(self, w: _Worker) -> None:
        assert self._loop is not None
        if w.closed:
            return
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_reader(w.sock.fileno())
            self._loop.remove_writer(w.sock.fileno())
        if w.pidfd is not None:
            with contextlib.suppress(OSError, ValueError):
                self._loop.remove_reader(w.pidfd)

    def _close_worker(self, w: _Worker) -> None:
        if w.closed:
            return
        w.closed = True
        for task in w.tasks:
            task.cancel()
        w.sock.close()
        if w.pidfd is not None:
            os.close(w.pidfd)
        w.state.release()
        w.state_map.close()
        with contextlib.suppress(ValueError):
            self._workers.remove(w)

    # -- the watchdog -----------------------------------------------------------------

    async def _watchdog(self) -> None:
        """Kill a worker whose call is past the timeout; sleep until the next deadline.

        With nothing running it still wakes one timeout from now rather than waiting to
        be told about new work: a call sent in the meantime cannot reach its deadline
        before then, and sending a batch then costs no wake-up of this task.
        """
        timeout = self._timeout_ns
        while True:
            now = perf_counter_ns()
            wake_at = now + timeout + GRACE_NS
            for w in tuple(self._workers):
                if w.closed or w.kill is not None or not w.batches:
                    continue
                state = w.state
                started, seq, index, again = state[START], state[SEQ], state[INDEX], state[START]
                if started and started == again:  # a consistent read of a running call
                    deadline = started + timeout + GRACE_NS
                    if now >= deadline:
                        w.kill = (seq, index, started)
                        with contextlib.suppress(OSError):
                            w.proc.kill()
                        # The replacement starts now, in parallel with the reaping; the
                        # killed worker's calls are sorted out when its exit is seen.
                        self._replace(w, restart=True)
                        self._dispatch()
                        continue
                    wake_at = min(wake_at, deadline)
                # between calls: the next one cannot end its time before now + timeout
            await asyncio.sleep(max(0.0, (wake_at - now) / 1e9))

    # -- skynet.llm from workers ------------------------------------------------------

    async def _relay(
        self,
        w: _Worker,
        request: int,
        token: int,
        stage: Stage,
        instruction: str,
        input: str | None,
        options: dict[str, Any],
    ) -> None:
        from llm_client import LLMError

        payload: Any
        try:
            if self._llm_handler is None:
                raise RuntimeError("skynet.llm() has no model to call in this executor")
            payload, ok = await self._llm_handler(token, stage, instruction, input, options), True
        except LLMError as exc:
            # The attributes (status, model, code, ...) rather than the exception: a
            # subclass with keyword-only arguments does not survive pickle.
            attrs = {
                k: v
                for k, v in vars(exc).items()
                if k != "message" and (v is None or isinstance(v, (str, int, float)))
            }
            payload, ok = ("llm", str(getattr(exc, "message", exc)), attrs), False
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
            try:
                payload = ("pickled", pickle.dumps(exc, PICKLE_PROTOCOL), text)
            except Exception:
                payload = ("text", text)
            ok = False
        self._send(w, pickle.dumps(("llm_reply", request, ok, payload), PICKLE_PROTOCOL))

    def _start_task(self, coro: Coroutine[Any, Any, None], owner: _Worker | None = None) -> None:
        """A task owned by the executor: cancelled and awaited by ``__aexit__``."""
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if owner is not None:
            owner.tasks.add(task)
            task.add_done_callback(owner.tasks.discard)
