"""``skynet.llm`` in a worker process, relayed to the engine's model client.

A worker has no model client of its own: every worker shares the engine's one rate
budget, and usage is attributed to the calling example by its token. In the worker,
:class:`RelayBridge` sends ``(LLM, request, token, stage, instruction, input, options)``
and blocks its call until the matching ``LLM_REPLY`` comes (other messages that arrive
meanwhile, a prefetched batch or a stop, wait in the channel's backlog). In the engine,
:func:`answer` awaits the executor's ``llm_handler`` and builds the reply.

A failed model call crosses back as the exception itself, pickled: ``LLMError`` and the
engine's own exceptions pickle themselves whole (``__reduce__``), so the worker re-raises
the same error, with its status and counts, and the call is labelled as it would be in
the engine's process (``llm_error`` for an ``LLMError``). An exception that cannot cross
becomes a ``RuntimeError`` carrying its text.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
from collections import deque
from typing import Any, Protocol

from ..._calls import LLMHandler
from ..._context import Stage
from ._wire import LLM, LLM_REPLY, PICKLE_PROTOCOL, control

__all__ = ["Link", "RelayBridge", "answer", "rebuild_error"]


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
    try:
        if handler is None:
            raise RuntimeError("skynet.llm() has no model to call in this executor")
        text = await handler(token, stage, instruction, input, options)
    except Exception as exc:
        return control(LLM_REPLY, request, False, _error_payload(exc))
    return control(LLM_REPLY, request, True, text)


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
    """The worker's end of its socket, as the relay needs it."""

    backlog: deque[Any]

    def send(self, body: bytes) -> None: ...

    def recv(self) -> Any: ...


_requests = itertools.count(1)


class RelayBridge:
    """``skynet.llm`` inside a worker (an :class:`evaluator._context.LLMBridge`)."""

    __slots__ = ("_link", "_stage", "_token")

    def __init__(self, link: Link, token: int, stage: Stage) -> None:
        self._link = link
        self._token = token
        self._stage: Stage = stage

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        link = self._link
        request = next(_requests)
        link.send(control(LLM, request, self._token, self._stage, instruction, input, options))
        held: list[Any] = []
        try:
            while True:
                message = link.recv()
                if message[0] == LLM_REPLY and message[1] == request:
                    break
                held.append(message)  # a prefetched batch or a stop: keep it for later
        finally:
            link.backlog.extend(held)
        _, _, ok, payload = message
        if ok:
            return str(payload)
        raise rebuild_error(payload)

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        # Workers run only sync functions; an awaitable form that blocks is still correct.
        return self.call(instruction, input, options)
