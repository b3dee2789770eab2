"""The worker process: one user function, many calls; what runs on the other side.

A worker is a fresh interpreter started by the pool (``_pool.py``) with ``python -c`` and
this module's :func:`main`: spawn semantics, without re-importing the engine's
``__main__``. Its boot imports only this module and the call layer (``evaluator``'s own
``__init__`` imports lazily), then the user's file, once, by path. Then it loops: receive
a batch of calls, run each with :class:`evaluator._call._calls.SyncInvoker` (the same call as
in the engine's threads), send the outcomes back (``_wire.py`` has the protocol).

The worker dies with the engine: ``PR_SET_PDEATHSIG`` on Linux (even when the engine is
SIGKILLed, even while user code runs), and elsewhere a thread that waits for the
engine's end of the socket to hang up.

A replacement worker is usually forked by the pool's fork server (``_zygote.py``) rather
than started: it enters at :func:`serve_forked`, with the user's function the server
preloaded (or None), and dies with the server, which dies with the engine; from there on
its life is a spawned worker's.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import mmap
import os
import pickle
import select
import signal
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from time import perf_counter_ns
from typing import Any, NoReturn

import msgspec

from ..._call import _failures as failures
from ..._call._calls import Outcome, SyncInvoker
from ..._call._context import LLMBridge, Stage
from ..._call._loader import UserFunction
from ..._call._results import Result, Scored
from ._cut import Claims
from ._relay import UNATTRIBUTED, RelayBridge
from ._wire import (
    BATCH,
    BATCH_ROWS,
    EXIT_FATAL,
    EXIT_MEMORY,
    FATAL,
    FLUSH_NS,
    HEADER,
    KIND_PICKLE,
    KIND_PICKLED_RESULT,
    KIND_RESULT,
    LLM_REPLY,
    PICKLE_PROTOCOL,
    READY,
    RESULT_HEADER,
    SDK_REPLY,
    START,
    STATE_SLOTS,
    STOP,
    UNREADABLE,
    ResultMsg,
    WorkerInit,
    control,
)

__all__ = ["default_stop_signals", "die_with_parent", "main", "prepare_imports", "serve_forked"]

#: How much one ``recv`` of the worker asks for.
_RECV_SIZE = 1 << 16


class _MemoryLimitExceeded(BaseException):
    """Raised through ``SyncInvoker`` (which catches only ``Exception``) when the user's
    function hits ``MemoryError`` under the worker's memory limit."""


class _Channel:
    """The worker's end of its socket: blocking framed messages, safe from any thread.

    The worker's loop reads the next batch or stop (:meth:`recv`); a call's model requests
    wait for their replies (:meth:`reply`), from the call's thread or from threads the
    user's code started (``concurrent.futures`` in ``run``). Whoever reads the socket
    files what it got: a reply for its waiter, anything else for the loop.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.backlog: deque[Any] = deque()  # messages for the loop, read by a waiter
        self._buf = bytearray()  # bytes received beyond the last whole message
        self._sending = threading.Lock()
        self._turn = threading.Condition()
        self._reading = False
        self._replies: dict[int, Any] = {}  # request -> its reply, read by someone else

    def send(self, body: bytes, kind: int = KIND_PICKLE) -> None:
        data = HEADER.pack(len(body), kind) + body
        with self._sending:
            self.sock.sendall(data)

    def recv(self) -> Any:
        """The next message for the worker's loop; exits the process when the engine is
        gone."""
        return self._next(None)

    def reply(self, request: int) -> Any:
        """The reply to relayed request ``request``, when it comes."""
        return self._next(request)

    def _next(self, request: int | None) -> Any:
        turn = self._turn
        while True:
            with turn:
                while True:
                    if request is None:
                        if self.backlog:
                            return self.backlog.popleft()
                    elif request in self._replies:
                        return self._replies.pop(request)
                    if not self._reading:
                        self._reading = True
                        break
                    turn.wait()
            message: Any = None
            try:
                message = self._read()
            finally:
                with turn:
                    self._reading = False
                    if message is not None:
                        if type(message) is tuple and message[0] in _REPLIES:
                            self._replies[message[1]] = message
                        else:
                            self.backlog.append(message)
                    turn.notify_all()

    def _read_exact(self, view: memoryview) -> bool:
        got = 0
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if n == 0:
                return False
            got += n
        return True

    def _read(self) -> Any:
        """One message off the socket.

        One ``recv`` usually brings a whole small message, header and body (a round trip
        of an optimizer's minibatch is mostly system calls); a large body is read
        straight into a buffer of its size.
        """
        body = self._body()
        try:
            return pickle.loads(body)
        except OSError:
            _exit_quietly(0)
        except (Exception, SystemExit) as exc:
            # A batch holding a value this process cannot rebuild: answered in turn (the
            # message may arrive while a call waits for a model reply).
            return (_UNREADABLE, _why(exc))

    def _body(self) -> bytes | bytearray:
        buf = self._buf
        size = HEADER.size
        while len(buf) < size:
            data = self.sock.recv(_RECV_SIZE)
            if not data:
                _exit_quietly(0)
            buf += data
        length, _kind = HEADER.unpack_from(buf)
        end = size + length
        if len(buf) >= end:
            body = bytes(buf[size:end])
            del buf[:end]
            return body
        body_buf = bytearray(length)
        have = len(buf) - size
        body_buf[:have] = buf[size:]
        buf.clear()
        if not self._read_exact(memoryview(body_buf)[have:]):
            _exit_quietly(0)
        return body_buf


#: The tags of the engine's replies to relayed requests.
_REPLIES = frozenset({LLM_REPLY, SDK_REPLY})


#: A message that could not be unpickled, as the channel hands it on.
_UNREADABLE = "unreadable_message"


def _why(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose text cannot be read
        return type(exc).__name__


class _Unreadable:
    """A row of a batch that could not be unpickled, and why."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _row(blob: bytes) -> Any:
    try:
        return pickle.loads(blob)
    except (Exception, SystemExit) as exc:
        return _Unreadable(_why(exc))


def _exit_quietly(code: int, exit: Callable[[int], NoReturn] = os._exit) -> NoReturn:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    # os._exit (bound at import: a user file may replace it): a user's non-daemon thread
    # or atexit hook must not keep a worker alive.
    exit(code)


class _UserModules(importlib.abc.MetaPathFinder):
    """Imports the engine's user modules (``_skynet_user_*``) by their file, on demand:
    an output whose class ``program.py`` defines is rebuilt in the metric's worker."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        file = self.files.get(name)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(name, file)


def die_with_parent(parent_pid: int, sock: socket.socket) -> None:
    """Make this process end when ``parent_pid`` (the engine, or the fork server of a
    forked worker) does, even if it is SIGKILLed."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the engine died before prctl took effect
                    _exit_quietly(0)
                return
        except (OSError, AttributeError):
            pass
    # Elsewhere: wait, off the main thread, for the engine's end of the socket to close.
    # poll() with no events still reports a hang-up and never consumes data.
    if not hasattr(select, "poll"):
        return

    def watch() -> None:
        poller = select.poll()
        poller.register(sock.fileno(), getattr(select, "POLLRDHUP", 0))
        while True:
            for _fd, events in poller.poll():
                if events & (select.POLLHUP | getattr(select, "POLLRDHUP", 0) | select.POLLERR):
                    _exit_quietly(0)

    threading.Thread(target=watch, name="skynet-parent-watch", daemon=True).start()


def _picklable(outcome: Outcome, stage: Stage) -> Outcome:
    """The outcome itself; or, when it cannot be pickled back, the same score with its
    extra info in the form the results file stores (``evaluator._storable``); else an
    error saying that its value cannot cross back."""
    try:
        pickle.dumps(outcome, PICKLE_PROTOCOL)
    except Exception as exc:
        value = outcome.value
        if isinstance(value, Scored) and value.extra:
            with contextlib.suppress(Exception):
                kept = Outcome(_storable_extra(value), None, outcome.started_ns, outcome.ended_ns)
                pickle.dumps(kept, PICKLE_PROTOCOL)
                return kept
        error = failures.unsendable_value(stage, exc)
        return Outcome(None, error, outcome.started_ns, outcome.ended_ns)
    return outcome


def _storable_extra(scored: Scored) -> Scored:
    """``scored`` with its extra info as the results file would store it: plain JSON."""
    from ..._storable import encode_results

    line, _ = encode_results([Result(0, 0.0, extra=scored.extra)])
    extra = msgspec.json.decode(line)["extra"]
    return msgspec.structs.replace(scored, extra=extra)


def _memory_guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any) -> Any:
        try:
            return fn(*args)
        except MemoryError as exc:
            raise _MemoryLimitExceeded from exc

    return guarded


def _load(init: WorkerInit, channel: _Channel, preloaded: UserFunction | None) -> UserFunction:
    """Import the user's file (under the memory limit, if any); exit if it fails.

    ``preloaded``: the function the fork server imported (this worker is its fork), used
    when it is the one asked for; the memory limit is set again, for this process."""
    limit_mb = init.memory_limit_mb
    if limit_mb is not None:
        import resource

        limit = limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        from ..._call._loader import load_function

        if (
            preloaded is not None
            and str(preloaded.path) == init.path
            and preloaded.name == init.name
        ):
            fn = preloaded
        else:
            fn = load_function(init.path, init.name, guard_engine=False)
    except BaseException as exc:
        if isinstance(exc, MemoryError) and limit_mb is not None:
            message = (
                f"importing {init.path} exceeded the worker's memory limit of "
                f"{limit_mb} MB; raise `memory_limit_mb`"
            )
        else:
            message = (
                f"the worker could not load `{init.name}` from {init.path}: "
                f"{type(exc).__name__}: {exc}"
            )
        with contextlib.suppress(OSError):
            channel.send(control(FATAL, message))
        _exit_quietly(EXIT_FATAL)
    if limit_mb is not None:
        fn = replace(fn, fn=_memory_guard(fn.fn))
    return fn


class _Results:
    """Sends a batch's outcomes back: msgpack for ``score``, pickle otherwise."""

    def __init__(self, channel: _Channel, stage: Stage) -> None:
        self._channel = channel
        self._stage = stage
        self._encoder = msgspec.msgpack.Encoder()

    def send(self, seq: int, start: int, work_ns: int, final: bool, outs: list[Any]) -> None:
        if self._stage == "score":
            try:
                body = self._encoder.encode(ResultMsg(seq, start, work_ns, final, outs))
            except (TypeError, ValueError, OverflowError, RecursionError):
                pass  # a value msgpack cannot carry (a huge int, a lone surrogate): pickle it
            else:
                self._channel.send(body, KIND_RESULT)
                return
        try:
            pickled = pickle.dumps(outs, PICKLE_PROTOCOL)
        except Exception:
            pickled = pickle.dumps([_picklable(o, self._stage) for o in outs], PICKLE_PROTOCOL)
        header = RESULT_HEADER.pack(seq, start, work_ns, final, len(outs))
        self._channel.send(header + pickled, KIND_PICKLED_RESULT)


class _Worker:
    """The loop of one worker: batches in, outcomes out, the running call published."""

    def __init__(self, channel: _Channel, state: memoryview, init: WorkerInit) -> None:
        self.channel = channel
        self.state = state
        self.claims = Claims(state)
        self.stage: Stage = init.stage
        self.has_llm = init.has_llm
        self.results = _Results(channel, init.stage)
        self.crash = failures.memory_exceeded(init.name, init.memory_limit_mb)
        self.invoker: SyncInvoker | None = None

    def serve(self, fn: UserFunction) -> NoReturn:
        invoker = SyncInvoker(fn, self.stage)
        invoker.enter()  # this process's one context, updated in place per call
        if self.has_llm:
            from ..._sdk._worker import own

            own(invoker.context)  # and every thread's: the process runs one call at a time
        # A row holds a call's fields (see ``_wire.call_row``): run without building one.
        if self.stage == "score":
            score = invoker.score

            def call(row: Any, bridge: LLMBridge | None, started: int) -> Outcome:
                _, example_id, input, output, expected, observation = row
                return score(example_id, observation, input, output, expected, bridge, started)

        else:
            run = invoker.run

            def call(row: Any, bridge: LLMBridge | None, started: int) -> Outcome:
                _, example_id, artifact, input = row
                return run(example_id, artifact, input, bridge, started)

        def call_rows(row: Any, bridge: LLMBridge | None, started: int) -> Outcome:
            if type(row) is _Unreadable:
                error = failures.unreadable_arguments(invoker.fn, self.stage, row.why)
                return Outcome(None, error, started, started)
            return call(row, bridge, started)

        self.invoker = invoker
        while True:
            message = self.channel.recv()
            tag = message[0]
            if tag == BATCH:
                self.batch(message[1], message[2], call)
            elif tag == BATCH_ROWS:
                self.batch(message[1], [_row(blob) for blob in message[2]], call_rows)
            elif tag == _UNREADABLE:
                self.channel.send(control(UNREADABLE, message[1]))
            elif tag == STOP:
                _exit_quietly(0)

    def batch(
        self,
        seq: int,
        rows: list[Any],
        call: Callable[[Any, LLMBridge | None, int], Outcome],
        clock: Any = perf_counter_ns,
    ) -> None:
        """Run one batch, streaming its outcomes back at least every ``FLUSH_NS``.

        ``clock`` is bound when this module is imported, before the user's file: a user
        file that patches ``time.perf_counter_ns`` or this module's attributes does not
        change what its calls measure."""
        state, channel, stage, send = self.state, self.channel, self.stage, self.results.send
        invoker = self.invoker
        assert invoker is not None
        claim = self.claims.claim
        outs: list[Any] = []
        append = outs.append
        flushed = 0
        last = clock()
        size = len(rows)
        # One bridge for the worker, its token set call after call (as its context is).
        bridge = RelayBridge(channel, 0, stage) if self.has_llm else None
        for index, row in enumerate(rows):
            if not claim(seq, index):
                break  # the engine took the rest back: a stalled call held it up here
            if bridge is not None and type(row) is tuple:  # not an _Unreadable row
                bridge.token = row[0]
            state[START] = started = clock()
            try:
                outcome = call(row, bridge, started)
            except _MemoryLimitExceeded:
                state[START] = 0
                append(Outcome(None, self.crash, started, clock()))
                send(seq, flushed, clock() - last, False, outs[flushed:])
                _exit_quietly(EXIT_MEMORY)
            except BaseException as exc:  # KeyboardInterrupt and such, raised by user code
                outcome = invoker.failed(exc, started)
            state[START] = 0
            append(outcome)
            if outcome.ended_ns - last > FLUSH_NS and index + 1 < size:
                send(seq, flushed, outcome.ended_ns - last, False, outs[flushed:])
                flushed = index + 1
                last = outcome.ended_ns
        if bridge is not None:
            # Between calls, a request from a thread the user's code left running is
            # nobody's: the engine serves it and marks the stage's examples unmeasured.
            bridge.token = UNATTRIBUTED
        send(seq, flushed, clock() - last, True, outs[flushed:])


def default_stop_signals() -> None:
    """SIGINT and SIGTERM as a fresh interpreter has them, for the user's code and every
    process it starts (a ``multiprocessing.Pool``'s ``terminate()`` is a SIGTERM).

    The engine starts a worker with both blocked, in a process group of its own: the
    terminal's Ctrl-C and a SIGTERM to the engine's group (systemd, ``kill -- -PGID``)
    never reach it, so a worker does not die mid-call before the engine stops it, and no
    disposition of the engine's is inherited. One sent while the worker was still being
    started, before it left the engine's group, is pending: dropped here (a signal that
    is ignored is discarded), then the defaults go back and the mask is lifted. A worker
    still dies with the engine, whatever kills it (``die_with_parent``)."""
    stops = (signal.SIGINT, signal.SIGTERM)
    if not hasattr(signal, "pthread_sigmask"):
        return
    for sig in stops:
        signal.signal(sig, signal.SIG_IGN)  # discards one pending
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(stops))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def prepare_imports(init: WorkerInit) -> None:
    """The engine's ``sys.path``, and its user modules importable by name; the engine's
    and the standard library's names resolve only to theirs (``EngineNames``), whatever
    the user's folders put on the path."""
    from ..._call._loader import protect_engine_imports

    protect_engine_imports()
    for entry in reversed(init.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if init.user_modules and not any(isinstance(f, _UserModules) for f in sys.meta_path):
        sys.meta_path.append(_UserModules(init.user_modules))


def main() -> None:
    """Entry point: ``python -c ... <root> <socket fd> <state fd> <engine pid> [<stderr
    fd>]``: with a stderr fd, fd 2 is the engine's pipe until the worker is ready (see
    ``_pool.BootStderr``), and that fd the engine's own stderr, put in its place then."""
    sock_fd, state_fd, parent_pid = (int(a) for a in sys.argv[2:5])
    global _real_stderr
    _real_stderr = int(sys.argv[5]) if len(sys.argv) > 5 else None
    default_stop_signals()
    _serve(sock_fd, state_fd, parent_pid, None)


#: The engine's stderr, given to a spawned worker beside the pipe its start-up writes to.
_real_stderr: int | None = None


def _stderr_to_engine() -> None:
    """Ready: from now on write straight to the engine's stderr (the pipe ends here)."""
    global _real_stderr
    if _real_stderr is None:
        return
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.dup2(_real_stderr, 2)
        os.close(_real_stderr)
    _real_stderr = None


def serve_forked(
    sock_fd: int, state_fd: int, server_pid: int, preloaded: UserFunction | None
) -> NoReturn:
    """A worker forked by the fork server (``_zygote.py``): it dies with the server,
    which dies with the engine; the rest is a spawned worker's life."""
    _serve(sock_fd, state_fd, server_pid, preloaded)
    _exit_quietly(0)


def _serve(sock_fd: int, state_fd: int, parent_pid: int, preloaded: UserFunction | None) -> None:
    sock = socket.socket(fileno=sock_fd)
    sock.setblocking(True)
    die_with_parent(parent_pid, sock)
    state_map = mmap.mmap(state_fd, STATE_SLOTS * 8)
    os.close(state_fd)
    channel = _Channel(sock)
    init: WorkerInit = channel.recv()
    prepare_imports(init)  # a forked worker too: the engine's path may have grown since
    fn = _load(init, channel, preloaded)
    if init.has_llm:
        # A relayed model error arrives pickled, as the model client's own exception:
        # import its class now, not inside the timed call that receives it.
        import llm_client._exceptions  # noqa: F401

        # The SDK hook: route the user's own SDK calls through the relay, and see
        # connections that go around it (evaluator/_sdk/).
        from ..._sdk._worker import boot

        boot()
    _stderr_to_engine()
    channel.send(control(READY, os.getpid()))
    _Worker(channel, memoryview(state_map).cast("q"), init).serve(fn)
