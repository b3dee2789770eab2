"""The worker side of the process executor: one process, one user function, many calls.

A worker is a fresh interpreter (started by :mod:`evaluator._process` with
``python -c``, i.e. spawn semantics without re-importing the engine's ``__main__``). It
imports the user's file once, by path, then loops: receive a batch of calls, run each
with :class:`evaluator._calls.SyncInvoker` (the same call as in the engine's threads),
send the outcomes back.

Wire format, both directions, over one Unix socket: frames of ``<length:u64><kind:u8>``
followed by the body. Kind 0 is a pickled tuple; kind 1 (worker to engine only) is a
msgspec-msgpack :class:`ResultMsg` of a ``score`` stage, whose outcomes are plain structs
(about ten times cheaper to encode than pickling them, which matters at a microsecond a
call); kind 2 carries ``run`` outcomes, pickled after a fixed header so that an output the
engine cannot unpickle still fails only its own calls. Engine to worker: the init dict,
then ``("batch", seq, rows)`` (each call as the tuple of its fields),
``("llm_reply", request_id, ok, payload)`` and ``("stop",)``. Worker to engine:
``("ready", pid)``, ``("fatal", message)``, ``("llm", request_id, token, stage,
instruction, input, options)`` and results (kinds 1 and 2).

While a call runs, the worker publishes in a small shared-memory array which call it is
(batch ``seq``, ``index``) and since when (``start`` in ``perf_counter_ns``, the same
system-wide monotonic clock the engine reads); the engine's watchdog kills a worker whose
call is past the timeout and knows exactly which call to blame.

The worker dies with the engine: ``PR_SET_PDEATHSIG`` on Linux (even when the engine is
SIGKILLed, even while user code runs), and elsewhere a thread that waits for the
engine's end of the socket to hang up.
"""

from __future__ import annotations

import contextlib
import inspect
import mmap
import os
import pickle
import select
import signal
import socket
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from time import perf_counter_ns
from typing import Any, NoReturn

import msgspec

from ._calls import Outcome, SyncInvoker
from ._context import LLMBridge, Stage
from ._results import ErrorInfo, Scored

__all__ = ["RelayBridge", "ResultMsg", "WireOutcome", "main"]

HEADER = struct.Struct("<QB")
KIND_PICKLE = 0
KIND_RESULT = 1
KIND_PICKLED_RESULT = 2
#: Kind 2 starts with seq, start, work_ns, final, count; a pickled list of outcomes follows.
RESULT_HEADER = struct.Struct("<qqq?q")
PICKLE_PROTOCOL = 5

# Slots of the shared state array (int64 each).
SEQ, INDEX, START = 0, 1, 2
STATE_SLOTS = 4

#: Exit codes the engine recognises: a planned exit after a MemoryError under the memory
#: limit (its call was already reported), and a user file that would not load.
EXIT_MEMORY = 75
EXIT_FATAL = 76

#: How much one ``recv`` of the worker asks for.
_RECV_SIZE = 1 << 16

#: Results of a batch are streamed back at least this often, so that a call killed by
#: the watchdog costs at most this much finished work (re-run elsewhere), not a batch.
FLUSH_NS = 20_000_000


class WireOutcome(Outcome, array_like=True, gc=False):
    """An :class:`Outcome` of a ``score`` call as it crosses back: ``value`` is typed, so
    msgspec rebuilds the ``Scored`` without pickle. It *is* an ``Outcome`` (a subclass).

    ``gc=False``: the engine holds hundreds of thousands of these at a time and the cyclic
    collector would rescan them all; a decoded outcome holds only a fresh ``Scored`` and
    plain data, so it cannot be part of a reference cycle (halves the decode cost).
    """

    value: Scored | None = None


class ResultMsg(msgspec.Struct, array_like=True):
    """Results of calls ``start .. start+len(outcomes)`` of batch ``seq``."""

    seq: int
    start: int
    work_ns: int
    final: bool
    outcomes: list[WireOutcome]


class _MemoryLimitExceeded(BaseException):
    """Raised through ``SyncInvoker`` (which catches only ``Exception``) when the user's
    function hits ``MemoryError`` under the worker's memory limit."""


class _Channel:
    """Blocking framed messages over the worker's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.backlog: deque[Any] = deque()  # messages that arrived during an llm wait
        self._buf = bytearray()  # bytes received beyond the last whole message
        self._next_request = 0

    def send(self, body: bytes, kind: int = KIND_PICKLE) -> None:
        self.sock.sendall(HEADER.pack(len(body), kind) + body)

    def _read_exact(self, view: memoryview) -> bool:
        got = 0
        while got < len(view):
            n = self.sock.recv_into(view[got:])
            if n == 0:
                return False
            got += n
        return True

    def recv(self) -> Any:
        """The next message from the engine; exits the process when the engine is gone.

        One ``recv`` usually brings a whole small message, header and body (a round trip
        of an optimizer's minibatch is mostly system calls); a large body is read
        straight into a buffer of its size.
        """
        if self.backlog:
            return self.backlog.popleft()
        buf = self._buf
        size = HEADER.size
        try:
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
            else:
                body_buf = bytearray(length)
                have = len(buf) - size
                body_buf[:have] = buf[size:]
                buf.clear()
                if not self._read_exact(memoryview(body_buf)[have:]):
                    _exit_quietly(0)
                return pickle.loads(body_buf)
        except OSError:
            _exit_quietly(0)
        return pickle.loads(body)

    def relay_llm(
        self, token: int, stage: Stage, instruction: str, input: str | None, options: Any
    ) -> str:
        self._next_request += 1
        request = self._next_request
        self.send(
            pickle.dumps(
                ("llm", request, token, stage, instruction, input, options), PICKLE_PROTOCOL
            )
        )
        held: list[Any] = []
        try:
            while True:
                message = self.recv()
                if message[0] == "llm_reply" and message[1] == request:
                    break
                held.append(message)  # a prefetched batch or a stop: keep it for later
        finally:
            self.backlog.extend(held)
        _, _, ok, payload = message
        if ok:
            return str(payload)
        raise _rebuild_error(payload)


def _rebuild_error(payload: tuple[Any, ...]) -> BaseException:
    from llm_client import LLMError

    what = payload[0]
    if what == "llm":
        _, message, attrs = payload
        accepted = set(inspect.signature(LLMError).parameters) - {"message"}
        error = LLMError(message, **{k: v for k, v in attrs.items() if k in accepted})
        for key, value in attrs.items():
            if key not in accepted and key != "message":
                setattr(error, key, value)
        return error
    if what == "pickled":
        with contextlib.suppress(Exception):
            exc = pickle.loads(payload[1])
            if isinstance(exc, BaseException):
                return exc
    return RuntimeError(payload[-1])


class RelayBridge:
    """``skynet.llm`` inside a worker: the request goes to the engine over the worker's
    socket and this call blocks for the reply, so that every worker shares the engine's
    one rate budget and the usage is attributed to ``token``. An engine-side
    ``LLMError`` is re-raised here as ``LLMError`` (so the call is labelled
    ``llm_error``)."""

    __slots__ = ("_channel", "_stage", "_token")

    def __init__(self, channel: _Channel, token: int, stage: Stage) -> None:
        self._channel = channel
        self._token = token
        self._stage: Stage = stage

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return self._channel.relay_llm(self._token, self._stage, instruction, input, options)

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        # Workers run only sync functions; an awaitable form that blocks is still correct.
        return self.call(instruction, input, options)


def _exit_quietly(code: int) -> NoReturn:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    # os._exit: a user's non-daemon thread or atexit hook must not keep a worker alive.
    os._exit(code)


def _die_with_parent(parent_pid: int, sock: socket.socket) -> None:
    """Make this process end when the engine does, even if the engine is SIGKILLed."""
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
    """The outcome itself, or an error saying that its value cannot cross back."""
    try:
        pickle.dumps(outcome, PICKLE_PROTOCOL)
    except Exception as exc:
        what = "`run` returned" if stage == "run" else "`score` returned"
        message = (
            f"{what} a value that cannot be sent back from the worker process "
            f"({type(exc).__name__}: {exc}); return picklable values or set "
            "EXECUTION = 'thread'"
        )
        kind = "program_error" if stage == "run" else "metric_error"
        return Outcome(None, ErrorInfo(kind, message), outcome.started_ns, outcome.ended_ns)
    return outcome


def _memory_guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any) -> Any:
        try:
            return fn(*args)
        except MemoryError as exc:
            raise _MemoryLimitExceeded from exc

    return guarded


def main() -> None:
    """Entry point: ``python -c ... <root> <socket fd> <state fd> <engine pid>``."""
    sock_fd, state_fd, parent_pid = (int(a) for a in sys.argv[2:5])
    # The terminal's Ctrl-C goes to the whole process group; the engine handles it and
    # stops the workers, so a worker must not die mid-call with a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        # The engine starts workers with SIGINT blocked (so that a Ctrl-C during the
        # imports above cannot print a traceback); ignored now, it may be unblocked.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    sock = socket.socket(fileno=sock_fd)
    sock.setblocking(True)
    _die_with_parent(parent_pid, sock)
    state_map = mmap.mmap(state_fd, STATE_SLOTS * 8)
    os.close(state_fd)
    state = memoryview(state_map).cast("q")
    channel = _Channel(sock)

    init: dict[str, Any] = channel.recv()
    for entry in reversed(init["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    stage: Stage = init["stage"]
    limit_mb: int | None = init["memory_limit_mb"]
    if limit_mb is not None:
        import resource

        limit = limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        from ._loader import load_function

        fn = load_function(init["path"], init["name"])
    except BaseException as exc:
        what = type(exc).__name__
        if isinstance(exc, MemoryError) and limit_mb is not None:
            message = (
                f"importing {init['path']} exceeded the worker's memory limit of "
                f"{limit_mb} MB; raise `memory_limit_mb`"
            )
        else:
            message = (
                f"the worker could not load `{init['name']}` from {init['path']}: {what}: {exc}"
            )
        with contextlib.suppress(OSError):
            channel.send(pickle.dumps(("fatal", message), PICKLE_PROTOCOL))
        _exit_quietly(EXIT_FATAL)
    if limit_mb is not None:
        fn = replace(fn, fn=_memory_guard(fn.fn))
    channel.send(pickle.dumps(("ready", os.getpid()), PICKLE_PROTOCOL))

    encoder = msgspec.msgpack.Encoder()
    has_llm: bool = init["has_llm"]
    crash_message = (
        f"memory limit of {limit_mb} MB exceeded: `{init['name']}` raised MemoryError under "
        "the worker's memory limit and its worker was replaced; use less memory or raise "
        "`memory_limit_mb`"
    )

    def send_results(seq: int, start: int, work_ns: int, final: bool, outs: list[Any]) -> None:
        if stage == "score":
            try:
                channel.send(
                    encoder.encode(ResultMsg(seq, start, work_ns, final, outs)), KIND_RESULT
                )
                return
            except (TypeError, OverflowError):
                pass  # an extra value msgpack cannot carry (a huge int): pickle it
        try:
            body = pickle.dumps(outs, PICKLE_PROTOCOL)
        except Exception:
            body = pickle.dumps([_picklable(o, stage) for o in outs], PICKLE_PROTOCOL)
        header = RESULT_HEADER.pack(seq, start, work_ns, final, len(outs))
        channel.send(header + body, KIND_PICKLED_RESULT)

    invoker = SyncInvoker(fn, stage)
    invoker.enter()  # this process's one context, updated in place per call
    run = invoker.run
    clock = perf_counter_ns
    while True:
        message = channel.recv()
        if message[0] != "batch":
            if message[0] == "stop":
                _exit_quietly(0)
            continue
        _, seq, rows = message
        state[SEQ] = seq
        outs: list[Any] = []
        append = outs.append
        flushed = 0
        last = clock()
        size = len(rows)
        bridge: LLMBridge | None = None
        for index, row in enumerate(rows):
            # The fields of a Call (see _process._send_batch), run without building one.
            token, example_id, first, second, third, observation = row
            if has_llm:
                bridge = RelayBridge(channel, token, stage)
            state[INDEX] = index
            state[START] = started = clock()
            try:
                outcome = run(example_id, observation, first, second, third, bridge, started)
            except _MemoryLimitExceeded:
                outcome = Outcome(None, ErrorInfo("worker_crash", crash_message), started, clock())
                state[START] = 0
                append(outcome)
                send_results(seq, flushed, clock() - last, False, outs[flushed:])
                _exit_quietly(EXIT_MEMORY)
            state[START] = 0
            append(outcome)
            if outcome.ended_ns - last > FLUSH_NS and index + 1 < size:
                send_results(seq, flushed, outcome.ended_ns - last, False, outs[flushed:])
                flushed = index + 1
                last = outcome.ended_ns
        send_results(seq, flushed, clock() - last, True, outs[flushed:])
