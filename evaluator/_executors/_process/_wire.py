"""The protocol between the engine and a worker process, shared by both sides.

Frames, both directions, over one Unix socket: ``<length:u64><kind:u8>`` then the body.

- Kind :data:`KIND_PICKLE`: a pickled tuple whose first item is a tag (below).
- Kind :data:`KIND_RESULT` (worker to engine): a msgspec-msgpack :class:`ResultMsg` of
  ``score`` outcomes, plain structs about ten times cheaper to encode than pickling
  them, which matters at a microsecond a call.
- Kind :data:`KIND_PICKLED_RESULT` (worker to engine): ``run`` outcomes (or ``score``
  outcomes msgpack cannot carry), pickled after a fixed :data:`RESULT_HEADER`, so that a
  value the engine cannot unpickle still fails only its own calls.

Engine to worker: the :class:`WorkerInit`, then ``(BATCH, seq, rows)`` (each call as the
tuple of its fields, :func:`call_row`), ``(LLM_REPLY, request, ok, payload)``,
``(SDK_REPLY, request, ok, payload)`` and ``(STOP,)``. Worker to engine: ``(READY, pid)``,
``(FATAL, message)``, ``(LLM, request, token, stage, instruction, input, options)``,
``(SDK, request, token, stage, sdk_request)`` (a routed SDK call), ``(SDK_NOTE, token,
stage, what)`` (traffic around the metered paths) and results.

A batch the worker cannot unpickle (a value of a class it cannot import, a
``__setstate__`` that raises there) is answered ``(UNREADABLE, why)``; the engine sends
the same batch again as ``(BATCH_ROWS, seq, [row pickled alone, ...])``, and each row
that still cannot be read is that call's error: never a dead worker, never its batch.

While a call runs, the worker publishes in a small shared-memory array of int64 which
call it is (batch ``SEQ``, ``INDEX``) and since when (``START``, in ``perf_counter_ns``,
the system-wide monotonic clock the engine reads too); ``START`` is 0 between calls. The
calls a stalled worker gives up are agreed in the same array, under a lock (``_cut.py``).

Imported by the worker at boot: nothing here reaches beyond the call layer.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec.structs import astuple

from ..._call._calls import Call, Outcome
from ..._call._context import Stage
from ..._call._results import Scored

__all__ = [
    "BATCH",
    "BATCH_ROWS",
    "CLAIMS",
    "CUT_END",
    "CUT_INDEX",
    "CUT_SEQ",
    "EXIT_FATAL",
    "EXIT_MEMORY",
    "FATAL",
    "FLUSH_NS",
    "HEADER",
    "INDEX",
    "KIND_PICKLE",
    "KIND_PICKLED_RESULT",
    "KIND_RESULT",
    "LLM",
    "LLM_REPLY",
    "LOCK",
    "PICKLE_PROTOCOL",
    "READY",
    "RESULT_HEADER",
    "SDK",
    "SDK_NOTE",
    "SDK_REPLY",
    "SEQ",
    "START",
    "STATE_SLOTS",
    "STOP",
    "UNREADABLE",
    "ResultMsg",
    "WireOutcome",
    "WorkerInit",
    "call_row",
    "control",
    "frame",
]

HEADER = struct.Struct("<QB")
KIND_PICKLE = 0
KIND_RESULT = 1
KIND_PICKLED_RESULT = 2
#: Kind 2 starts with seq, start, work_ns, final, count; a pickled list of outcomes follows.
RESULT_HEADER = struct.Struct("<qqq?q")
PICKLE_PROTOCOL = 5

# Tags of pickled control messages.
BATCH = "batch"
BATCH_ROWS = "batch_rows"
UNREADABLE = "unreadable"
LLM_REPLY = "llm_reply"
STOP = "stop"
READY = "ready"
FATAL = "fatal"
LLM = "llm"
# The SDK hook: a routed SDK call and its reply; traffic around the metered paths.
SDK = "sdk"
SDK_REPLY = "sdk_reply"
SDK_NOTE = "sdk_note"

# Slots of the shared state array (int64 each). The worker publishes the call it runs
# (SEQ, INDEX, START); the engine writes a *cut* (CUT_SEQ, CUT_INDEX, CUT_END): the calls
# from position CUT_INDEX of batch CUT_SEQ, and every call of the batches after it up to
# batch CUT_END, were taken back (a stalled call held them up) and must not be run. The
# worker claims each call (SEQ, INDEX) and the engine cuts under one lock, a POSIX
# semaphore in the slots from LOCK on, which CLAIMS (1) says both sides have (_cut.py).
SEQ, INDEX, START, CUT_SEQ, CUT_INDEX, CUT_END, CLAIMS = 0, 1, 2, 3, 4, 5, 6
LOCK = 8  # 8 slots (64 bytes): a sem_t is 32 bytes on 64-bit Linux
STATE_SLOTS = 16

#: Exit codes the engine recognises: a planned exit after a MemoryError under the memory
#: limit (its call was already reported), and a user file that would not load.
EXIT_MEMORY = 75
EXIT_FATAL = 76

#: Results of a batch are streamed back at least this often, so that a call killed by
#: the watchdog costs at most this much finished work (re-run elsewhere), not a batch.
FLUSH_NS = 20_000_000


class WorkerInit(msgspec.Struct, frozen=True, kw_only=True):
    """The first message to a worker: what to load and how to run it."""

    sys_path: list[str]
    path: str
    name: str
    stage: Stage
    has_llm: bool
    memory_limit_mb: int | None
    user_modules: dict[str, str] = {}
    """The engine's user modules (``_skynet_user_*``) by name, and their files: a value of
    a class defined in ``program.py`` reaches the metric's worker, which imports that
    file when the value is unpickled (see ``_child._UserModules``)."""


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


def frame(body: bytes, kind: int = KIND_PICKLE) -> bytes:
    """``body`` with its header."""
    return HEADER.pack(len(body), kind) + body


def control(*message: Any) -> bytes:
    """The body of a control message: ``(tag, *fields)``, pickled."""
    return pickle.dumps(message, PICKLE_PROTOCOL)


#: A call as it travels: the tuple of its fields, in order (``RunCall``: token, example_id,
#: artifact, input; ``ScoreCall``: token, example_id, input, output, expected,
#: observation). Pickling a struct goes through ``__reduce__``, which costs the engine's
#: one process twice as much per call; and ``astuple`` itself, not a function around it,
#: since it runs once per call.
call_row: Callable[[Call], tuple[Any, ...]] = astuple
