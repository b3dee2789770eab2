"""The context of the user call in progress, read by the ``skynet`` facade.

Every executor (async, thread, inline, a process worker) runs each user call inside
:func:`call_context`, which sets one context variable. ``skynet.observation()``,
``skynet.service_cost()``, ``skynet.reward()`` and ``skynet.llm()`` read it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, Protocol

import msgspec

from ._results import Observation

Stage = Literal["run", "score"]


class LLMBridge(Protocol):
    """How ``skynet.llm`` reaches the engine's model client from where the call runs.

    In the engine's process it hops to the event loop; in a worker process it relays
    the request to the parent, so that the whole run shares one rate budget.
    """

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str: ...

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str: ...


class CallContext(msgspec.Struct, frozen=True):
    """Who is being called: the example, the stage, and what the metric may read."""

    example_id: Any
    stage: Stage
    observation: Observation | None = None
    llm: Any = None  # an LLMBridge


_current: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "skynet_call_context", default=None
)


def current() -> CallContext | None:
    """The context of the user call running in this thread or task, if any."""
    return _current.get()


@contextmanager
def call_context(ctx: CallContext) -> Iterator[CallContext]:
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)
