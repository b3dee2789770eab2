"""The worker processes of one process executor: start, spare, replace, watch, reap.

- **Start**: a worker is a fresh interpreter started with ``python -c`` (spawn semantics:
  never ``fork`` a parent that runs threads and an event loop) rather than through
  ``multiprocessing``, whose spawn re-imports the engine's ``__main__`` in every worker
  and whose ``Pool``/``ProcessPoolExecutor`` hang on, or fail everything after, a dead
  worker. It talks to the engine over a Unix socket pair (``_channel.py``) and publishes
  the call it runs in a small shared-memory array (``_wire.py``).
- **A warm spare**: one extra worker, started and having imported the user's file, waits
  idle. A crash, a timeout kill or a recycle swaps it in at once (at the kill, not after
  the reaping) and a new spare starts in the background, so that a crash-prone or
  hang-prone function does not leave a slot empty for a whole interpreter start-up
  (about 0.3 s) per fault. The spare is idle (blocked in ``recv``): it costs memory, not
  a core, so it is not counted against the pool's size. It is started only once every
  worker is ready (so that it never slows the first start-up nor loops on a file that
  fails to load in workers) and dies with the pool like the others.
- **A fork server**: once every worker is ready, the pool starts a fork server
  (``_forkserver.py``, ``_zygote.py``): a clean, single-threaded process that has done a
  worker's imports, the user's file included where that is safe. Replacements and new
  spares are then forked from it in milliseconds instead of starting an interpreter each
  (about 0.15 s of CPU), with a spawned worker's guarantees: its own memory limit, death
  with the engine, no inherited thread or lock. Where it cannot run (not Linux, or it
  ended) workers are started as fresh interpreters.
- **The watchdog** sleeps until the earliest deadline of a running call and kills a
  worker whose call is past the timeout; the replacement starts at once.
- **Stand-ins**: a worker whose call has run a while without using its core (it sleeps,
  hangs, or waits on a model call relayed to the engine) is *stalled*: it holds a slot,
  not a core. The calls queued behind the stalled one in its batches are taken back
  (agreed under a lock with the worker, which claims each call it begins: ``_cut.py``)
  and, for each stalled worker, the pool forks a stand-in (with the fork server only:
  milliseconds each), a worker like the others that takes the pending work, so that a
  hang waiting out its timeout or a judge call waiting on its model does not leave a
  core idle; at most ``MAX_STAND_INS_PER_WORKER`` per worker of the pool's size.
  When the stalled calls end, idle stand-ins retire. A call busy on its core, or
  waiting for one (runnable), is never stalled, so CPU-bound work is never
  oversubscribed. Linux only (a worker's CPU time and state are read from ``/proc``).
- **Exits** are seen as the process ending (a pidfd on Linux, else polling once its
  socket has closed); :class:`PoolEvents` hears of each, with what the worker was
  running, so that the executor can settle its calls.
- **Start-up failures**: workers that die before they are ready (a file that exits when
  imported in a worker, say) are counted, in one place, and after
  ``MAX_STARTUP_FAILURES`` in a row the pool is *broken*: it starts no more workers and
  every call fails with the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Coroutine, Iterator
from functools import partial
from pathlib import Path
from time import perf_counter_ns
from typing import Any, NamedTuple, Protocol

from ..._call import _failures as failures
from ..._call._context import Stage
from ..._call._loader import USER_MODULE_PREFIX, UserFunction
from ..._call._results import ErrorInfo
from ._channel import Channel
from ._cut import init_lock
from ._forkserver import ForkedProcess, ForkServer, fork_supported, python_argv
from ._queue import Batch
from ._wire import (
    EXIT_FATAL,
    FATAL,
    INDEX,
    KIND_PICKLE,
    PICKLE_PROTOCOL,
    READY,
    SEQ,
    START,
    STATE_SLOTS,
    STOP,
    WorkerInit,
    control,
)

__all__ = ["Pool", "PoolEvents", "Worker", "WorkerExit", "describe_exit"]

#: A call is killed this long after its timeout, so one that ends just at it can report.
GRACE_NS = 50_000_000
#: Workers dying before they are ready this many times in a row: stop replacing them.
MAX_STARTUP_FAILURES = 3
#: A worker may hold a second batch only while its running call has not taken this many
#: times the mean cost (a batch queued behind a long call cannot move elsewhere).
PREFETCH_STUCK_FACTOR = 20
PREFETCH_STUCK_MIN_NS = 2_000_000
#: A call is looked at for a stall once it has run this long, its worker's CPU time then
#: measured over ``STALL_PROBE_NS``; below ``STALL_CPU_SHARE`` of a core, it is stalled.
STALL_AFTER_NS = 10_000_000
STALL_PROBE_NS = 40_000_000
STALL_CPU_SHARE = 0.5
#: How often running calls are looked at (ten times less often with none running).
STALL_CHECK_S = 0.01
#: Stand-ins at most per worker of the pool's size (each a forked process).
MAX_STAND_INS_PER_WORKER = 4

_ROOT = str(Path(__file__).resolve().parents[3])
#: A worker's start-up, run with ``python -c``: ``evaluator`` imports lazily, so this
#: imports the worker's loop and the call layer, not the engine.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from evaluator._executors._process._child import main; main()"
)


def _user_modules() -> dict[str, str]:
    """The user files this process has loaded (``evaluator._call._loader``), by module name."""
    found: dict[str, str] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.startswith(USER_MODULE_PREFIX) and isinstance(file, str):
            found[name] = file
    return found


class Worker:
    """The engine's handle on one worker process."""

    __slots__ = (
        "assigned",
        "batches",
        "boot_stderr",
        "channel",
        "closed",
        "dropped",
        "kill",
        "pidfd",
        "probe",
        "proc",
        "ready",
        "relay_order",
        "relay_token",
        "replaced",
        "retiring",
        "spare",
        "stand_in",
        "state",
        "state_map",
        "tasks",
    )

    def __init__(
        self,
        proc: subprocess.Popen[bytes] | ForkedProcess,
        state_map: mmap.mmap,
        pidfd: int | None,
    ) -> None:
        self.proc = proc
        self.channel: Channel | None = None
        self.state_map = state_map
        self.state = memoryview(state_map).cast("q")
        self.pidfd = pidfd
        self.batches: deque[Batch] = deque()
        # Batches taken back whole from it (a stall), whose answer (an empty last result,
        # or UNREADABLE) is still to come: an answer is for the oldest batch not answered.
        self.dropped: deque[int] = deque()
        self.assigned = 0
        self.retiring = False
        self.replaced = False  # another worker has been put in its place
        self.spare = False  # idle, outside ``Pool.workers`` until promoted
        self.stand_in = False  # an extra worker, standing in for a stalled one
        # (start of the call, when, CPU time then): the stall probe of its running call
        self.probe: tuple[int, int, int] | None = None
        self.ready = False
        self.closed = False
        self.kill: tuple[int, int, int] | None = None  # seq, index, start of a timed-out call
        self.tasks: set[asyncio.Task[None]] = set()
        # The call whose model requests arrive now, and how many it has sent: a worker
        # runs one call at a time, so a request's place in its call is counted here.
        self.relay_token: int | None = None
        self.relay_order = 0
        self.boot_stderr: BootStderr | None = None

    def next_request(self, token: int) -> int:
        """The place (0, 1, ...) of a model request of call ``token`` in that call."""
        if token != self.relay_token:
            self.relay_token, self.relay_order = token, 0
        order = self.relay_order
        self.relay_order += 1
        return order

    @property
    def usable(self) -> bool:
        """Open to new batches: not closed, not retiring, not being killed."""
        return not (self.closed or self.retiring or self.kill)

    def send(self, body: bytes, kind: int = KIND_PICKLE) -> None:
        assert self.channel is not None
        self.channel.send(body, kind)


class BootStderr:
    """A spawned worker's stderr while it starts: a pipe, forwarded to the engine's own
    stderr as it comes, its last bytes kept, so that a worker that dies before it is
    ready (a file whose import kills the process, a module that cannot load) is reported
    with its own last words. The worker writes straight to the engine's stderr once it is
    ready (``_child._stderr_to_engine``); the pipe then ends."""

    TAIL_BYTES = 4096
    TAIL_LINES = 6

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self.fd: int | None = fd
        self.tail = bytearray()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self.read)

    def read(self) -> None:
        """Forward and keep what the pipe holds now; close it at its end."""
        while self.fd is not None:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close()
                return
            with contextlib.suppress(OSError):
                _write_all(2, data)
            self.tail += data
            del self.tail[: -self.TAIL_BYTES]

    def last_lines(self) -> list[str]:
        """Its last non-empty lines (what a traceback or a fatal message ends with)."""
        text = self.tail.decode(errors="replace")
        return [line for line in text.splitlines() if line.strip()][-self.TAIL_LINES :]

    def close(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._loop.remove_reader(self.fd)
        os.close(self.fd)
        self.fd = None


def _stderr_pipe() -> tuple[int, int, int] | None:
    """A pipe for a starting worker's stderr, and a copy of the engine's stderr to hand
    it; None when the engine has no stderr (the worker then inherits what there is)."""
    try:
        real = os.dup(2)
    except OSError:
        return None
    read_end, write_end = os.pipe()
    return read_end, write_end, real


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class WorkerExit(NamedTuple):
    """A worker process that ended, as the pool saw it."""

    returncode: int
    cause: str
    """The exit in words: "exited with code 1", "killed by SIGSEGV", ..."""
    running: tuple[int, int, int] | None
    """``(seq, index, started)`` of the call it was running, if any."""
    kill: tuple[int, int, int] | None
    """``(seq, index, started)`` of the call the watchdog killed it for, if it did."""
    batches: list[Batch]


class PoolEvents(Protocol):
    """What the pool tells its executor."""

    def on_results(self, worker: Worker, kind: int, body: bytearray) -> None:
        """Outcomes of a batch (``KIND_RESULT`` or ``KIND_PICKLED_RESULT``)."""

    def on_control(self, worker: Worker, message: tuple[Any, ...]) -> None:
        """A control message other than ``READY`` / ``FATAL``: a relayed model call."""

    def on_exit(self, worker: Worker, exit: WorkerExit) -> None:
        """A worker holding work (or that may have) ended; a replacement follows."""

    def on_capacity(self) -> None:
        """Workers changed (one ready, replaced, killed, or the pool broke): dispatch."""

    def on_stalled(self, worker: Worker) -> None:
        """``worker`` is stalled in a call: what it holds that has not begun may move."""


def _clock_tick_ns() -> float | None:
    """Nanoseconds per tick of ``/proc/<pid>/stat``'s CPU times (None: no ``/proc``)."""
    if not os.path.exists("/proc/self/stat"):
        return None
    try:
        return 1e9 / os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return None


_TICK_NS = _clock_tick_ns()


def cpu_state(pid: int | None) -> tuple[int, bool] | None:
    """The CPU time (user and system, ns) process ``pid`` has used, and whether it is
    runnable now (running, or waiting for a core), from ``/proc``."""
    if pid is None or _TICK_NS is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        used = int((int(fields[11]) + int(fields[12])) * _TICK_NS)
    except (OSError, ValueError, IndexError):
        return None
    return used, fields[0] == b"R"


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
def _stop_signals_blocked() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread while a worker is started: the child
    inherits the mask across exec, so the terminal's Ctrl-C (sent to the whole process
    group), or a SIGTERM to the group, cannot interrupt its start-up with a traceback or
    end it before it has left the engine's process group (a spare or a replacement is
    often starting when the user presses Ctrl-C); the worker drops what is pending and
    lifts the mask (``_child.default_stop_signals``), so the user's code never inherits
    it. A signal that arrives meanwhile is delivered to the engine when the mask is
    restored, microseconds later.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _kill(proc: subprocess.Popen[bytes] | ForkedProcess) -> None:
    """SIGKILL a worker and its process group (every process the user's code started in
    it), if it is not reaped yet (until then its pid is its group's, never another's)."""
    if isinstance(proc, ForkedProcess):
        proc.kill()
        return
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            proc.kill()


def describe_exit(returncode: int, memory_limit_mb: int | None) -> str:
    """How a worker process ended, in words, with the memory limit when it may explain it."""
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


class Pool:
    """``size`` worker processes running ``fn`` for ``stage``, and a warm spare."""

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        size: int,
        timeout_ns: int,
        has_llm: bool,
        memory_limit_mb: int | None,
        events: PoolEvents,
        fork_server: bool = True,
    ) -> None:
        self.fn = fn
        self.stage: Stage = stage
        self.size = size
        self.timeout_ns = timeout_ns
        self.has_llm = has_llm
        self.memory_limit_mb = memory_limit_mb
        self.events = events
        self.workers: list[Worker] = []
        self.spare: Worker | None = None
        self.stalled: set[Worker] = set()  # workers whose call holds a slot, not a core
        self.stand_ins: set[Worker] = set()
        self.stand_ins_started = 0
        self.broken: ErrorInfo | None = None
        self.running = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.use_fork_server = fork_server and fork_supported()
        self.fork_server: ForkServer | None = None
        self.preload_refused: str | None = None  # why the user's file is not preloaded
        self.workers_forked = 0
        self.startup_failures = 0
        self.spares_started = self.spares_promoted = self.spare_deaths = 0
        self.restarts = self.crashes = self.recycled = 0

    # -- lifetime ---------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the workers and the watchdog (returns at once; workers get ready later)."""
        self._loop = loop
        self.running = True
        for _ in range(self.size):
            self.spawn()
        self.start_task(self._watchdog())
        if _TICK_NS is not None and self.use_fork_server:
            self.start_task(self._stall_watch())

    def stop(self) -> list[Worker]:
        """Stop everything at once, without waiting: no more starts, every process killed
        (the spare too), every task cancelled. Returns the workers to :meth:`reap`."""
        self.running = False
        workers = list(self.workers)
        if self.spare is not None:
            workers.append(self.spare)
            self.spare = None
        for w in workers:
            self._unwatch(w)
            _kill(w.proc)
        if self.fork_server is not None:
            self.fork_server.stop()  # its workers, killed above, die with it in any case
        for task in self.tasks:
            task.cancel()
        return workers

    async def reap(self, workers: list[Worker], clock: Any = perf_counter_ns) -> None:
        """Wait for the stopped tasks and processes; release every worker's resources."""
        tasks = list(self.tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.fork_server is not None:
            await self.fork_server.reap()
        deadline = clock() + 10_000_000_000
        for w in workers:
            # A SIGKILLed process is gone within milliseconds; polling needs no fd.
            while w.proc.poll() is None and clock() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.002)
            self._close(w)

    def start_task(self, coro: Coroutine[Any, Any, None], owner: Worker | None = None) -> None:
        """A task owned by the pool (and by ``owner``): cancelled by :meth:`stop` (or
        when ``owner`` is closed) and awaited by :meth:`reap`."""
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if owner is not None:
            owner.tasks.add(task)
            task.add_done_callback(owner.tasks.discard)

    # -- workers ----------------------------------------------------------------------

    def spawn(self, *, spare: bool = False, stand_in: bool = False) -> None:
        """Start one worker process (or the spare, or a stand-in), and send it what to
        load."""
        loop = self._loop
        assert loop is not None
        if not self.running:
            return
        parent_sock, child_sock = socket.socketpair()
        state_fd = _state_fd()
        try:
            state_map = mmap.mmap(state_fd, STATE_SLOTS * 8)
            init_lock(state_map)  # before the worker maps it: the claim/cut lock
            proc, pidfd, stderr_fd = self._start_process(child_sock.fileno(), state_fd)
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
            os.close(state_fd)
        w = Worker(proc, state_map, pidfd)
        if stderr_fd is not None:
            w.boot_stderr = BootStderr(loop, stderr_fd)
        if isinstance(proc, ForkedProcess):
            proc.on_exit = partial(self._on_exited, w)  # its exit is the server's news
        w.channel = Channel(
            loop, parent_sock, partial(self._on_message, w), partial(self._on_end, w)
        )
        if spare:
            w.spare = True
            self.spare = w
            self.spares_started += 1
        else:
            self.workers.append(w)
        if stand_in:
            w.stand_in = True
            self.stand_ins.add(w)
            self.stand_ins_started += 1
        w.send(pickle.dumps(self._init(), PICKLE_PROTOCOL))
        w.channel.start()
        if pidfd is not None:
            loop.add_reader(pidfd, self._on_exited, w)

    def _init(self) -> WorkerInit:
        return WorkerInit(
            sys_path=list(sys.path),
            path=str(self.fn.path),
            name=self.fn.name,
            stage=self.stage,
            has_llm=self.has_llm,
            memory_limit_mb=self.memory_limit_mb,
            user_modules=_user_modules(),
        )

    def _start_process(
        self, sock_fd: int, state_fd: int
    ) -> tuple[subprocess.Popen[bytes] | ForkedProcess, int | None, int | None]:
        """A worker process on these fds: forked by the fork server when it is ready,
        else a fresh interpreter (and its pidfd, where there are pidfds, and the pipe its
        start-up writes its stderr to: ``BootStderr``)."""
        server = self.fork_server
        if server is not None and server.ready:
            with contextlib.suppress(OSError):  # the server just ended: spawn instead
                proc = server.fork(sock_fd, state_fd)
                self.workers_forked += 1
                return proc, None, None
        argv = [*python_argv(_BOOT), _ROOT, str(sock_fd), str(state_fd), str(os.getpid())]
        pipe = _stderr_pipe()  # (read end, write end, the engine's stderr), or None
        pass_fds: tuple[int, ...] = (sock_fd, state_fd)
        if pipe is not None:
            argv.append(str(pipe[2]))
            pass_fds += (pipe[2],)
        try:
            # Started from the loop's thread: PR_SET_PDEATHSIG follows the thread that
            # started the child, and the loop's thread outlives the executor.
            # A process group of its own: out of reach of the terminal's Ctrl-C (see
            # _child.default_stop_signals), and killed whole with what it started.
            with _stop_signals_blocked():
                popen = subprocess.Popen(
                    argv,
                    pass_fds=pass_fds,
                    stdin=subprocess.DEVNULL,
                    stderr=None if pipe is None else pipe[1],
                    close_fds=True,
                    process_group=0,
                )
        except BaseException:
            if pipe is not None:
                os.close(pipe[0])
            raise
        finally:
            if pipe is not None:
                os.close(pipe[1])
                os.close(pipe[2])
        pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(popen.pid)
        return popen, pidfd, None if pipe is None else pipe[0]

    def _start_fork_server(self, *, preload: bool = True) -> None:
        """Start the fork server (once every worker is ready, as the spare is)."""
        assert self._loop is not None
        server = ForkServer(self._init(), preload=preload, on_gone=self._fork_server_gone)
        self.fork_server = server
        try:
            server.start(self._loop, _stop_signals_blocked)
        except OSError:
            self.fork_server, self.use_fork_server = None, False

    def _fork_server_gone(self, server: ForkServer) -> None:
        """The fork server ended. One that would not preload the user's file (its import
        starts threads) is replaced by one that does not preload it; after any other
        end, workers are started as fresh interpreters from now on."""
        if self.fork_server is not server or not self.running:
            return
        self.start_task(server.reap())  # its process, ended or ending, is waited for
        if server.unsafe and server.preload:
            self.preload_refused = server.note
            self._start_fork_server(preload=False)
            return
        self.use_fork_server = False

    def replace(self, w: Worker, *, restart: bool) -> None:
        """Put a worker in the place of ``w`` (crashed, killed or retiring): the warm
        spare if there is one, at once, else a new worker."""
        if w.replaced or not self.running or self.broken is not None:
            return
        w.replaced = True
        if w.stand_in:
            return  # nobody's slot: the stall watch starts another if one is needed
        if restart:
            self.restarts += 1
        spare = self.spare
        if spare is not None and not spare.closed:
            self.spare = None
            spare.spare = False
            self.workers.append(spare)
            self.spares_promoted += 1
            self.ensure_spare()  # waits for the promoted one to be ready, if it is not
        else:
            self.spawn()

    def retire(self, w: Worker) -> None:
        """Recycle ``w`` gracefully: it runs what it holds, then reads ``STOP`` and exits."""
        w.retiring = True
        self.recycled += 1
        w.send(control(STOP))
        self.replace(w, restart=False)

    def ensure_spare(self) -> None:
        """Start a warm spare if there is none and every worker is ready.

        Not while workers are still starting (the spare would compete with them for the
        cores) nor after start-up failures (a file that does not load in workers must
        fail cleanly, not keep starting spares); and spares that die too often are given
        up on (they are an optimisation: replacements then start on demand).
        """
        if (
            self.spare is not None
            or not self.running
            or self.broken is not None
            or self.startup_failures
            or self.spare_deaths >= MAX_STARTUP_FAILURES
        ):
            return
        if all(w.ready for w in self.workers if not (w.closed or w.replaced)):
            if self.use_fork_server and self.fork_server is None:
                self._start_fork_server()
            self.spawn(spare=True)

    def target(
        self, prefetch: bool, cost_ns: float | None, clock: Any = perf_counter_ns
    ) -> Worker | None:
        """The worker the next batch should go to: an idle one, else (with ``prefetch``)
        one running a single batch whose call is not (yet) a long one."""
        for w in self.workers:
            if w.usable and not w.batches:
                return w
        if not prefetch:
            return None
        stuck = clock() - max(PREFETCH_STUCK_MIN_NS, int(PREFETCH_STUCK_FACTOR * (cost_ns or 0.0)))
        for w in self.workers:
            if w.usable and len(w.batches) == 1:
                started = w.state[START]
                if not (started and started < stuck):
                    return w
        return None

    def fork_server_state(self) -> str | None:
        """The fork server in words, for the statistics (None: there is none)."""
        server = self.fork_server
        if server is None or not self.use_fork_server:
            return None
        if not server.ready:
            return "starting"
        if server.preloaded:
            return "preloads the user's file"
        return f"forks; each worker imports the user's file: {self.preload_refused or server.note}"

    def usable(self) -> int:
        """Workers open to new batches."""
        return sum(1 for w in self.workers if w.usable)

    def idle(self) -> bool:
        """A usable worker holds no batch."""
        return any(w.usable and not w.batches for w in self.workers)

    def alive(self) -> int:
        """Worker processes running now, the spare not counted."""
        return sum(1 for w in self.workers if not w.closed)

    def busy(self) -> int:
        """Workers running a call now."""
        return sum(1 for w in self.workers if not w.closed and w.state[START])

    # -- messages and exits -----------------------------------------------------------

    def _on_message(self, w: Worker, kind: int, body: bytearray) -> None:
        if kind != KIND_PICKLE:
            self.events.on_results(w, kind, body)
            return
        message = pickle.loads(body)
        if message[0] == READY:
            w.ready = True
            self.startup_failures = 0
            self.ensure_spare()
        elif message[0] == FATAL:
            self.broken = failures.could_not_load(str(message[1]))
            self.events.on_capacity()
        else:
            self.events.on_control(w, message)

    def _on_end(self, w: Worker) -> None:
        """The worker's socket closed: its exit follows (polled when there is no pidfd)."""
        if w.pidfd is None and not w.closed:
            self.start_task(self._await_exit(w))

    async def _await_exit(self, w: Worker) -> None:
        delay = 0.001
        while w.proc.poll() is None:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        self._on_exited(w)

    def _on_exited(self, w: Worker) -> None:
        """A worker process ended: tell the executor what it held, then replace it."""
        if w.closed:
            return
        if w.pidfd is not None and select.select([w.pidfd], [], [], 0)[0]:
            _kill(w.proc)  # ended, not reaped: what it left running in its group goes too
        returncode = w.proc.poll()
        if returncode is None:
            return  # not yet reaped; the pidfd or the poller will call again
        assert w.channel is not None
        w.channel.drain()  # results it sent before it died still count
        last_words = self._last_words(w)
        if w.closed:
            return
        state = w.state
        started, seq, index = state[START], state[SEQ], state[INDEX]
        running = (seq, index, started) if started else None
        kill, batches, was_ready = w.kill, list(w.batches), w.ready
        self._close(w)
        if not self.running:
            return
        if w.spare:
            self._spare_exited(w, returncode, was_ready, last_words)
            return
        if w.retiring and returncode == 0 and not batches:
            self.events.on_capacity()
            return
        cause = describe_exit(returncode, self.memory_limit_mb)
        if kill is None:
            self.crashes += 1
            self._died_starting(returncode, was_ready, last_words)
        self.events.on_exit(w, WorkerExit(returncode, cause, running, kill, batches))
        self.replace(w, restart=True)  # no-op if done at the kill or the retiring
        self.events.on_capacity()

    def _spare_exited(
        self, w: Worker, returncode: int, was_ready: bool, last_words: list[str]
    ) -> None:
        """The idle spare died (it held no calls): count it, and perhaps start another."""
        if self.spare is w:
            self.spare = None
        self.spare_deaths += 1
        self._died_starting(returncode, was_ready, last_words)
        self.ensure_spare()
        self.events.on_capacity()  # fails the waiting calls if the pool is now broken

    @staticmethod
    def _last_words(w: Worker) -> list[str]:
        """What an ended worker last wrote to stderr while it was starting (if anything)."""
        boot = w.boot_stderr
        if boot is None:
            return []
        boot.read()  # what it wrote before it died, not read yet
        return boot.last_lines()

    def _died_starting(self, returncode: int, was_ready: bool, last_words: list[str]) -> None:
        """Count a worker that died before it was ready; break the pool at the limit.

        A worker that reported why it could not load (``EXIT_FATAL``) has broken the pool
        already, with its own words.
        """
        if was_ready or returncode == EXIT_FATAL:
            return
        self.startup_failures += 1
        if self.startup_failures >= MAX_STARTUP_FAILURES:
            cause = describe_exit(returncode, self.memory_limit_mb)
            self.broken = failures.workers_fail_to_start(cause, self.startup_failures, last_words)

    def _unwatch(self, w: Worker) -> None:
        if w.closed:
            return
        if w.channel is not None:
            w.channel.stop()
        if w.pidfd is not None and self._loop is not None:
            with contextlib.suppress(OSError, ValueError):
                self._loop.remove_reader(w.pidfd)

    def _close(self, w: Worker) -> None:
        if w.closed:
            return
        self._unwatch(w)
        w.closed = True
        self.stalled.discard(w)
        self.stand_ins.discard(w)
        for task in w.tasks:
            task.cancel()
        if w.channel is not None:
            w.channel.close()
        if w.boot_stderr is not None:
            w.boot_stderr.close()
        if w.pidfd is not None:
            os.close(w.pidfd)
        w.state.release()
        w.state_map.close()
        with contextlib.suppress(ValueError):
            self.workers.remove(w)

    # -- stalls and stand-ins ---------------------------------------------------------

    async def _stall_watch(self, clock: Any = perf_counter_ns) -> None:
        """Look at the running calls every ``STALL_CHECK_S`` (less often with none)."""
        while True:
            busy = self.busy()
            await asyncio.sleep(STALL_CHECK_S if busy or self.stand_ins else 10 * STALL_CHECK_S)
            self.check_stalls(clock())

    def check_stalls(self, now: int) -> None:
        """Update which workers are stalled, then start or retire stand-ins to match."""
        for w in self.workers:
            running = self.running_call(w)
            if running is None or now - running[2] < STALL_AFTER_NS:
                w.probe = None
                self.stalled.discard(w)
                continue
            state = cpu_state(w.proc.pid)
            if state is None:
                continue
            cpu, runnable = state
            probe = w.probe
            if probe is None or probe[0] != running[2]:
                w.probe = (running[2], now, cpu)  # a new call: measure from here
                self.stalled.discard(w)
                continue
            if now - probe[1] >= STALL_PROBE_NS:
                # Stalled: asleep now, and it used little of a core since the last look
                # (a worker waiting for a core is runnable: it is not stalled, it is
                # starved, and a stand-in would only crowd it more).
                if not runnable and cpu - probe[2] < STALL_CPU_SHARE * (now - probe[1]):
                    if w not in self.stalled:
                        self.stalled.add(w)
                        self.events.on_stalled(w)
                else:
                    self.stalled.discard(w)
                w.probe = (running[2], now, cpu)
        self._balance()

    def _balance(self) -> None:
        """One usable stand-in per stalled worker, within the cap; idle extras retire."""
        active = [w for w in self.stand_ins if w.usable]
        want = min(len(self.stalled), MAX_STAND_INS_PER_WORKER * self.size)
        server = self.fork_server
        started = False
        while (
            len(active) < want
            and self.running
            and self.broken is None
            and server is not None
            and server.ready
            and self.use_fork_server
        ):
            before = self.workers_forked
            self.spawn(stand_in=True)
            if self.workers_forked == before:  # not forked after all: no more now
                break
            active.append(self.workers[-1])
            started = True
        extra = len(active) - want
        for w in active:
            if extra <= 0:
                break
            if not w.batches:
                w.retiring = True
                w.send(control(STOP))
                extra -= 1
        if started:
            self.events.on_capacity()

    # -- the watchdog -----------------------------------------------------------------

    async def _watchdog(self, clock: Any = perf_counter_ns) -> None:
        """Kill a worker whose call is past the timeout; sleep until the next deadline.

        With nothing running it still wakes one timeout from now rather than waiting to
        be told about new work: a call sent in the meantime cannot reach its deadline
        before then, and sending a batch then costs no wake-up of this task.
        """
        while True:
            now = clock()
            wake_at = now + self.timeout_ns + GRACE_NS
            for w in tuple(self.workers):
                deadline = self._deadline(w, now)
                if deadline is not None:
                    wake_at = min(wake_at, deadline)
            await asyncio.sleep(max(0.0, (wake_at - now) / 1e9))

    def running_call(self, w: Worker) -> tuple[int, int, int] | None:
        """``(seq, index, started)`` of the call ``w`` runs now (None: between calls)."""
        if w.closed or w.kill is not None or not w.batches:
            return None
        state = w.state
        started, seq, index, again = state[START], state[SEQ], state[INDEX], state[START]
        if not started or started != again:
            return None
        return seq, index, started

    def _deadline(self, w: Worker, now: int) -> int | None:
        """The deadline of ``w``'s running call; past it, kill ``w`` (and return None)."""
        running = self.running_call(w)
        if running is None:
            return None  # between calls: the next one cannot end its time before now + timeout
        deadline = running[2] + self.timeout_ns + GRACE_NS
        if now < deadline:
            return deadline
        self.kill(w, running)
        return None

    def kill(self, w: Worker, running: tuple[int, int, int]) -> None:
        """Kill ``w`` for its running call ``(seq, index, started)``; a fresh worker
        takes its place."""
        w.kill = running
        _kill(w.proc)
        # The replacement starts now, in parallel with the reaping; the killed worker's
        # calls are sorted out when its exit is seen.
        self.replace(w, restart=True)
        self.events.on_capacity()
