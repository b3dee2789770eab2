"""The engine's end of a pool's fork server (``_zygote.py`` is the server's own loop).

:class:`ForkServer` starts the server (a fresh interpreter, started as a worker is) and
asks it for workers: each request sends the worker's socket and state fds, and the
server forks a worker from a process that has done the imports, in milliseconds.
:class:`ForkedProcess` is the pool's handle on such a worker, with what the pool uses of
a ``subprocess.Popen``: ``pid``, ``poll()``, ``kill()``. Its exit status comes from the
server, which is its parent and reaps it; it is killed through a pidfd the server sends
(so never a recycled pid), and through the server too.

If the server ends (it may not preload a file whose import starts threads, see
``_zygote.py``; or it crashed), its workers end with it (``PR_SET_PDEATHSIG``), and the
pool starts its workers as fresh interpreters again, or from a server that does not
preload.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ._wire import PICKLE_PROTOCOL, WorkerInit
from ._zygote import EXITED, FORK, FORKED, KILL, MAX_MESSAGE, READY, UNSAFE

__all__ = ["ForkServer", "ForkedProcess", "fork_supported", "python_argv"]

_ROOT = str(Path(__file__).resolve().parents[3])
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from evaluator._executors._process._zygote import main; main()"
)


def python_argv(boot: str) -> list[str]:
    """The interpreter's command line for a worker (or the fork server) running ``boot``:
    ``-P``, so that neither the working directory nor a script's folder comes first on
    its ``sys.path`` (a ``types.py`` there would replace the standard module before the
    engine's first line runs). The engine's own folder is added by ``boot``."""
    return [sys.executable, "-P", "-c", boot]


def fork_supported() -> bool:
    """Workers can be forked from a server here: Linux (``PR_SET_PDEATHSIG``, pidfds)."""
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds")


class ForkedProcess:
    """A worker forked by the fork server."""

    __slots__ = ("_orphaned", "_server", "on_exit", "pid", "pidfd", "request", "returncode")

    def __init__(self, server: ForkServer, request: int) -> None:
        self._server = server
        self.request = request
        self.pid: int | None = None  # known once the server has answered
        self.pidfd: int | None = None
        self.returncode: int | None = None
        self.on_exit: Callable[[], None] | None = None
        self._orphaned = False

    def poll(self) -> int | None:
        """The exit code (negative: the signal), None while it runs."""
        if self.returncode is None and self._orphaned:
            # The server is gone: this worker dies with it (PR_SET_PDEATHSIG); its pidfd
            # says when it has, its status is no one's to read any more.
            pidfd = self.pidfd
            if pidfd is None or select.select([pidfd], [], [], 0)[0]:
                self._exited(-signal.SIGKILL)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it and its process group (through its pidfd, and through the server)."""
        if self.returncode is not None:
            return
        if self.pid is not None:
            # Its group: what the user's code started dies with it. Not reaped yet (the
            # server has not said it exited), so the pid is still its group's.
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        self._server.kill(self.request)

    def _exited(self, returncode: int) -> None:
        if self.returncode is not None:
            return
        self.returncode = returncode
        self._close()
        if self.on_exit is not None:
            self.on_exit()

    def _orphan(self) -> None:
        self._orphaned = True
        if self.poll() is None and self.on_exit is not None:
            self.on_exit()  # the pool polls until it has ended

    def _close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class ForkServer:
    """One pool's fork server: start it, fork workers from it, stop it.

    ``init`` is what every worker of the pool loads; with ``preload`` the server imports
    the user's file too (if that is safe). ``on_gone`` is called once if the server ends
    while the pool runs (``unsafe`` then says whether it refused to preload).
    """

    def __init__(
        self, init: WorkerInit, *, preload: bool, on_gone: Callable[[ForkServer], None]
    ) -> None:
        self.init = init
        self.preload = preload
        self.on_gone = on_gone
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.ready = False
        self.preloaded = False
        self.note: str | None = None
        self.unsafe = False
        self.closed = False
        self.children: dict[int, ForkedProcess] = {}
        self._requests = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(
        self,
        loop: asyncio.AbstractEventLoop,
        signals_blocked: Callable[[], AbstractContextManager[None]],
    ) -> None:
        """Start the server process (returns at once; it is ready later)."""
        self._loop = loop
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = [*python_argv(_BOOT), _ROOT, str(child.fileno()), str(os.getpid())]
            argv.append("1" if self.preload else "0")
            with signals_blocked():
                self.proc = subprocess.Popen(
                    argv,
                    pass_fds=(child.fileno(),),
                    stdin=subprocess.DEVNULL,
                    close_fds=True,
                    process_group=0,
                )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        parent.send(pickle.dumps(self.init, PICKLE_PROTOCOL))
        parent.setblocking(False)
        self.sock = parent
        loop.add_reader(parent.fileno(), self._on_readable)

    def fork(self, sock_fd: int, state_fd: int) -> ForkedProcess:
        """Ask for a worker on these fds (the server gets copies); OSError if it is gone."""
        if self.sock is None or not self.ready:
            raise OSError("the fork server is not running")
        request = next(self._requests)
        message = pickle.dumps((FORK, request), PICKLE_PROTOCOL)
        socket.send_fds(self.sock, [message], [sock_fd, state_fd])
        handle = ForkedProcess(self, request)
        self.children[request] = handle
        return handle

    def kill(self, request: int) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.send(pickle.dumps((KILL, request), PICKLE_PROTOCOL))

    def _on_readable(self) -> None:
        while self.sock is not None:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                self._gone()
                return
            self._message(pickle.loads(data), fds)

    def _message(self, message: tuple[Any, ...], fds: list[int]) -> None:
        tag = message[0]
        if tag == READY:
            self.ready = True
            self.preloaded, self.note = bool(message[1]), message[2]
        elif tag == UNSAFE:
            self.unsafe, self.note = True, str(message[1])
        elif tag == FORKED:
            handle = self.children.get(message[1])
            if handle is None or handle.returncode is not None:
                for fd in fds:
                    os.close(fd)
                return
            handle.pid = message[2]
            handle.pidfd = fds[0] if fds else None
        elif tag == EXITED:
            handle = self.children.pop(message[1], None)
            if handle is not None:
                handle._exited(message[2])

    def _gone(self) -> None:
        """The server ended: so do (or will at once) the workers it forked."""
        if self.closed:
            return
        self._close_socket()
        children = list(self.children.values())
        self.children.clear()
        for handle in children:
            handle._orphan()
        self.on_gone(self)

    def _close_socket(self) -> None:
        self.ready = False
        self.closed = True
        if self.sock is not None:
            if self._loop is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None

    def stop(self) -> None:
        """Kill the server, at once: the workers it forked die with it."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
        self._close_socket()
        for handle in self.children.values():
            handle._orphaned = True
        self.children.clear()

    async def reap(self, deadline_s: float = 10.0) -> None:
        """Wait for the stopped server to end (a SIGKILLed process is gone in ms)."""
        proc = self.proc
        if proc is None:
            return
        for _ in range(int(deadline_s / 0.002)):
            if proc.poll() is not None:
                return
            await asyncio.sleep(0.002)
