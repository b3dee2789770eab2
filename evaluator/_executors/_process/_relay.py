"""``skynet.llm`` in a worker process, relayed to the engine's model client.

A worker has no model client of its own: every worker shares the engine's one rate
budget, and usage is attributed to the calling example by its token. In the worker,
:class:`RelayBridge` sends ``(LLM, request, token, stage, instruction, input, options)``
and blocks its call until the matching ``LLM_REPLY`` comes (other messages that arrive
meanwhile, a prefetched batch or a stop, wait in the channel's backlog; another
thread's reply, for that thread). Threads the user's code starts in a worker use the
same bridge (``evaluator._sdk._owner``): the worker runs one call at a time, so their
requests carry that call's token, or :data:`UNATTRIBUTED` between calls. In the engine,
:func:`answer` awaits the executor's ``llm_handler`` and builds the reply.

A failed model call crosses back as the exception itself, pickled: ``LLMError`` and the
engine's own exceptions pickle themselves whole (``__reduce__``), so the worker re-raises
the same error, with its status and counts, and the call is labelled as it would be in
the engine's process (``llm_error`` for an ``LLMError``). An exception that cannot cross
becomes a ``RuntimeError`` carrying its text.

The user's own SDK calls take the same road (the SDK hook, ``evaluator/_sdk/``):
:meth:`RelayBridge.forward` sends ``(SDK, request, token, stage, sdk_request)`` and
blocks until ``SDK_REPLY`` brings the provider's reply (``llm_client.Forwarded``);
:func:`ask_forward` serves it in the engine. :meth:`RelayBridge.note_bypass` sends
``(SDK_NOTE, token, stage, what)``, ahead of the call's result on the same socket, so the
engine marks the example unmeasured before it builds its observation.

**Replay** (:class:`Replies`): the engine keeps each reply it relayed successfully, keyed
by the call's token and the request's place among that call's requests, until the call's
outcome is final. A call whose worker died before its outcome came back (a crash or a
timeout kill of another call in the same batch) runs again in another worker; its model
requests are answered from what was kept, without paying for them twice, as long as each
asks the same as it did the first time (a request that differs is relayed anew).
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
from typing import Any, Protocol

from ..._call._calls import LLMHandler
from ..._call._context import Stage
from ..._sdk._owner import UNATTRIBUTED
from ..._sdk._request import SDKRequest
from ._wire import LLM, LLM_REPLY, PICKLE_PROTOCOL, SDK, SDK_NOTE, control

__all__ = [
    "UNATTRIBUTED",
    "Link",
    "RelayBridge",
    "Replies",
    "answer",
    "ask",
    "ask_forward",
    "note_bypass",
    "rebuild_error",
]


async def ask(
    handler: LLMHandler | None,
    token: int,
    stage: Stage,
    instruction: str,
    input: str | None,
    options: dict[str, Any],
) -> tuple[bool, Any]:
    """In the engine: one relayed call, ``(True, text)`` or ``(False, error payload)``."""
    try:
        if handler is None:
            raise RuntimeError("skynet.llm() has no model to call in this executor")
        return True, await handler(token, stage, instruction, input, options)
    except Exception as exc:
        return False, _error_payload(exc)


async def ask_forward(
    handler: LLMHandler | None, token: int, stage: Stage, sdk_request: SDKRequest
) -> tuple[bool, Any]:
    """In the engine: one relayed SDK call (the SDK hook), as :func:`ask` answers."""
    try:
        forward = getattr(handler, "forward", None)
        if forward is None:
            raise RuntimeError("this executor routes no SDK calls")
        return True, await forward(token, stage, sdk_request)
    except Exception as exc:
        return False, _error_payload(exc)


async def answer(
    handler: LLMHandler | None,
    request: int,
    token: int,
    stage: Stage,
    instruction: str,
    input: str | None,
    options: dict[str, Any],
) -> bytes:
    """In the engine: the reply to one relayed call, as a control message body."""
    ok, payload = await ask(handler, token, stage, instruction, input, options)
    return control(LLM_REPLY, request, ok, payload)


class Replies:
    """Replies relayed to calls whose outcome is not final yet, for replay after a crash.

    Pure bookkeeping: ``key`` is what was asked (the message's tag and fields), the
    payload what came back. A failed model call is kept too (``ok`` False): it was sent
    and paid for like any other, and the call run again meets the same error, as its
    first run would have.
    """

    __slots__ = ("_kept", "replayed")

    def __init__(self) -> None:
        self._kept: dict[int, dict[int, tuple[tuple[Any, ...], tuple[bool, Any]]]] = {}
        #: Requests answered from a kept reply (model calls not paid again).
        self.replayed = 0

    def __len__(self) -> int:
        return len(self._kept)

    def lookup(self, token: int, order: int, key: tuple[Any, ...]) -> tuple[bool, Any] | None:
        """The reply ``(ok, payload)`` to request ``order`` of call ``token`` when it was
        answered before and asked the same; else None."""
        kept = self._kept.get(token)
        if kept is None:
            return None
        entry = kept.get(order)
        if entry is None or entry[0] != key:
            return None
        self.replayed += 1
        return entry[1]

    def keep(self, token: int, order: int, key: tuple[Any, ...], reply: tuple[bool, Any]) -> None:
        """The reply ``(ok, payload)`` to request ``order`` of call ``token``."""
        self._kept.setdefault(token, {})[order] = (key, reply)

    def forget(self, tokens: Any) -> None:
        """The calls ``tokens`` are final: their replies will not be asked for again."""
        kept = self._kept
        if kept:
            for token in tokens:
                kept.pop(token, None)


def note_bypass(handler: LLMHandler | None, token: int, stage: Stage, what: str) -> None:
    """In the engine: a worker's call reached the network around the metered paths."""
    note = getattr(handler, "note_bypass", None)
    if note is not None:
        note(token, stage, what)


def _error_payload(exc: Exception) -> tuple[bytes | None, str]:
    text = f"{type(exc).__name__}: {exc}"
    try:
        return pickle.dumps(exc, PICKLE_PROTOCOL), text
    except Exception:
        return None, text


def rebuild_error(payload: tuple[bytes | None, str]) -> BaseException:
    """In the worker: the exception of a failed relayed call."""
    pickled, text = payload
    if pickled is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(pickled)
            if isinstance(exc, BaseException):
                return exc
    return RuntimeError(text)


class Link(Protocol):
    """The worker's end of its socket, as the relay needs it (safe from any thread)."""

    def send(self, body: bytes) -> None: ...

    def reply(self, request: int) -> Any: ...


_requests = itertools.count(1)


class RelayBridge:
    """``skynet.llm`` inside a worker (an :class:`evaluator._call._context.LLMBridge`).

    ``token`` is the call's; a worker keeps one bridge and sets it call after call, and
    to :data:`UNATTRIBUTED` between batches. Any thread of the worker may use it at once
    (the user's own threads, through the SDK hook): each request waits for its own
    reply (``Link.reply``).
    """

    __slots__ = ("_link", "_stage", "token")

    def __init__(self, link: Link, token: int, stage: Stage) -> None:
        self._link = link
        self.token = token
        self._stage: Stage = stage

    def _round_trip(self, tag: str, *fields: Any) -> Any:
        """Send ``(tag, request, token, stage, *fields)``; block until its reply."""
        link = self._link
        request = next(_requests)
        link.send(control(tag, request, self.token, self._stage, *fields))
        _, _, ok, payload = link.reply(request)
        if ok:
            return payload
        raise rebuild_error(payload)

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return str(self._round_trip(LLM, instruction, input, options))

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        # Workers run only sync functions; an awaitable form that blocks is still correct.
        return self.call(instruction, input, options)

    # -- the SDK hook ---------------------------------------------------------------------

    def forward(self, request: SDKRequest) -> Any:
        """A routed SDK call: relayed to the engine, the reply (a ``Forwarded``) back."""
        return self._round_trip(SDK, request)

    async def aforward(self, request: SDKRequest) -> Any:
        return self.forward(request)  # blocks, as acall does

    def note_bypass(self, what: str) -> None:
        self._link.send(control(SDK_NOTE, self.token, self._stage, what))
