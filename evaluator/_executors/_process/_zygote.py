"""The fork server's own loop: what runs in the process that forks replacement workers.

A fresh interpreter (``python -c``, as a worker starts) that has done a worker's imports
once: the call layer, and the user's file when that is safe. It then waits on its
control socket (``SOCK_SEQPACKET``, each message one pickled tuple, file descriptors
beside it) and forks a worker for each request: a fork of a clean, single-threaded
process that has imported everything costs milliseconds, where a new interpreter costs
about 0.15 s of CPU before the user's file is even read. It is ``multiprocessing``'s
forkserver with ``set_forkserver_preload``, without its re-import of ``__main__``.

Engine to server: ``(FORK, request)`` with the worker's socket and state fds, and
``(KILL, request)``. Server to engine: ``(READY, preloaded, note)``, ``(UNSAFE, why)``
(then it exits: see below), ``(FORKED, request, pid)`` with a pidfd of the worker when
the platform has them, and ``(EXITED, request, returncode)`` once the server has reaped it
(a negative code is the signal, as ``subprocess`` says it).

What a forked worker keeps of a spawned worker's guarantees:

- **No inherited threads or locks**: the server runs no thread of its own, no event
  loop, no logging; it forks from its main loop. If importing the user's file started a
  thread (a client with a background thread, a thread pool), forking it is not safe:
  the server says so and exits, and the engine starts one that does not preload the file
  (each forked worker then imports it itself, as a spawned one does).
- **Its own memory limit**: the server imports the user's file under the same
  ``RLIMIT_AS`` a worker gets; each forked worker sets it again for its own address
  space (a limit counts one process's address space, so none is shared).
- **Death with the engine**: the server has ``PR_SET_PDEATHSIG`` on the engine; each
  forked worker has it on the server (and checks ``getppid`` after setting it), so that
  the engine's death, even by SIGKILL, ends the server and with it every forked worker.
- **A process group of its own**, as a spawned worker has: the forked worker leads a
  new group, so that its kill (``KILL``) and its end take every process the user's code
  started with it (the server kills the group before it reaps the worker). SIGINT and
  SIGTERM are at their defaults (the server is in a group of its own, out of reach of
  the terminal's Ctrl-C); the server's SIGCHLD handling and wake-up pipe undone in the
  child, every fd of the server's closed in the child.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import socket
import sys
import threading
from typing import Any, NoReturn

from ..._call._loader import UserFunction
from ._wire import PICKLE_PROTOCOL, WorkerInit

__all__ = [
    "EXITED",
    "FORK",
    "FORKED",
    "KILL",
    "READY",
    "UNSAFE",
    "kill_group",
    "main",
    "threads_running",
]

FORK = "fork"
KILL = "kill"
READY = "ready"
UNSAFE = "unsafe"
FORKED = "forked"
EXITED = "exited"
#: The largest control message (a WorkerInit with a long sys.path fits).
MAX_MESSAGE = 1 << 20


def threads_running() -> int:
    """Threads of this process, native ones included where the platform says."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def kill_group(pid: int) -> None:
    """SIGKILL the process group that worker ``pid`` leads (every process the user's code
    started in it), or the worker alone if it leads none. The caller has not reaped it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _send(sock: socket.socket, *message: Any, fds: list[int] | None = None) -> None:
    data = pickle.dumps(message, PICKLE_PROTOCOL)
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def _preload(init: WorkerInit) -> tuple[UserFunction | None, str | None]:
    """Import the user's file as a worker would (under its memory limit): the function,
    or None and why not (its workers then import it themselves, with its own error)."""
    if init.memory_limit_mb is not None:
        import resource

        limit = init.memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        from ..._call._loader import load_function

        fn = load_function(init.path, init.name, guard_engine=False)
    except BaseException as exc:  # reported by each worker when it loads the file itself
        return None, f"not preloaded: importing it failed ({type(exc).__name__})"
    if init.has_llm:
        import llm_client._exceptions  # noqa: F401  (see _child.main)
    return fn, None


class _Server:
    """The fork server's state: its sockets, its children (by request) and the user's
    function it preloaded, if it did."""

    def __init__(self, ctl: socket.socket, init: WorkerInit, fn: UserFunction | None) -> None:
        self.ctl = ctl
        self.init = init
        self.fn = fn
        self.children: dict[int, int] = {}  # pid -> request
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(self.wake_w)

    def serve(self) -> NoReturn:
        ctl = self.ctl.fileno()
        while True:
            ready: list[int] = []
            with contextlib.suppress(InterruptedError):
                ready, _, _ = select.select([ctl, self.wake_r], [], [])
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    os.read(self.wake_r, 4096)
            if ctl in ready:
                self.message()
            self.reap()

    def message(self) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.ctl, MAX_MESSAGE, 2)
        except ConnectionError:  # reset rather than closed: the engine is gone all the same
            data, fds = b"", []
        if not data:
            os._exit(0)  # the engine is gone; the workers die with this process
        message = pickle.loads(data)
        if message[0] == FORK:
            self.fork(message[1], fds)
        elif message[0] == KILL:
            for pid, request in self.children.items():
                if request == message[1]:
                    kill_group(pid)  # not reaped yet: the pid (and its group) is ours

    def fork(self, request: int, fds: list[int]) -> None:
        sock_fd, state_fd = fds
        server = os.getpid()  # before the fork: the child's getppid() may already be init's
        pid = os.fork()
        if pid == 0:
            try:
                self.child(sock_fd, state_fd, server)
            finally:
                os._exit(1)  # never back into the server's loop
        os.close(sock_fd)
        os.close(state_fd)
        self.children[pid] = request
        pidfd = None
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(pid)  # before any reaping: it is this child's
        try:
            _send(self.ctl, FORKED, request, pid, fds=[pidfd] if pidfd is not None else None)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def child(self, sock_fd: int, state_fd: int, server: int) -> None:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (self.wake_r, self.wake_w):
            os.close(fd)
        self.ctl.close()
        from ._child import serve_forked

        serve_forked(sock_fd, state_fd, server, self.fn)

    def reap(self) -> None:
        while self.children:
            try:
                # Seen, not reaped (WNOWAIT): while the worker is a zombie its pid is still
                # its group's, so what it left running in the group can be killed safely.
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            if info.si_pid in self.children:
                kill_group(info.si_pid)
            try:
                pid, status = os.waitpid(info.si_pid, 0)
            except ChildProcessError:
                continue
            request = self.children.pop(pid, None)
            if request is not None:
                _send(self.ctl, EXITED, request, os.waitstatus_to_exitcode(status))


def _open_fds() -> set[int]:
    """This process's open file descriptors (empty where /proc cannot tell)."""
    try:
        return {int(name) for name in os.listdir("/proc/self/fd")}
    except OSError:
        return set()


def main() -> None:
    """Entry point: ``python -c ... <root> <control fd> <engine pid> <preload 0|1>``."""
    from ._child import default_stop_signals, die_with_parent

    ctl_fd, parent_pid, preload = (int(a) for a in sys.argv[2:5])
    default_stop_signals()
    ctl = socket.socket(fileno=ctl_fd)
    die_with_parent(parent_pid, ctl)
    data = ctl.recv(MAX_MESSAGE)
    if not data:
        os._exit(0)
    init: WorkerInit = pickle.loads(data)
    from ._child import prepare_imports

    prepare_imports(init)
    before = _open_fds()
    fn, note = _preload(init) if preload else (None, "not preloaded (asked not to)")
    threads = threads_running()
    if threads > 1:
        _send(ctl, UNSAFE, f"importing it started {threads - 1} thread(s); forking is unsafe")
        os._exit(0)
    kept = len(_open_fds() - before)
    if kept:
        # A connection or file the import keeps open would be shared by every fork.
        _send(
            ctl, UNSAFE, f"importing it left {kept} file(s) or socket(s) open; forking shares them"
        )
        os._exit(0)
    _send(ctl, READY, fn is not None, note)
    _Server(ctl, init, fn).serve()
