"""One user call, the same in every executor: set the context, time it, classify failure.

Executors differ only in *where* :func:`invoke_sync` / :func:`invoke_async` run (the
loop, a thread, a worker process); what a call is, what it returns and how a failure is
named is defined once, here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from time import perf_counter_ns
from typing import Any, Literal

import msgspec

from ._context import CallContext, LLMBridge, Stage, _current, call_context
from ._contract import validate_return
from ._exceptions import InvalidReturn
from ._loader import UserFunction
from ._results import ErrorInfo, Observation

__all__ = ["Call", "LLMHandler", "LoopBridge", "Outcome", "invoke_async", "invoke_sync"]

# Captured at import, before any user module runs, so user code that patches
# ``time.perf_counter_ns`` cannot change the engine's measurements.
_clock = perf_counter_ns

#: The engine-side handler of a model call made through ``skynet.llm``:
#: ``handler(token, stage, instruction, input, options) -> reply text``.
LLMHandler = Callable[[int, Stage, str, "str | None", dict[str, Any]], Coroutine[Any, Any, str]]


class Call(msgspec.Struct, array_like=True, frozen=True):
    """One call of the user's function on one example.

    ``token`` is unique among the calls in flight in one ``Evaluator`` (example ids are
    not: two concurrent evaluations may share ids); model usage is attributed by it.
    ``args`` are ``(artifact, input)`` for ``run`` and ``(input, output, expected)`` for
    ``score``; ``observation`` is what the metric reads through ``skynet.observation()``.
    """

    token: int
    example_id: Any
    args: tuple[Any, ...]
    observation: Observation | None = None


class Outcome(msgspec.Struct, array_like=True):
    """What one call produced: a value (the output, or a ``Scored``) or an error."""

    value: Any = None
    error: ErrorInfo | None = None
    started_ns: int = 0
    ended_ns: int = 0

    @property
    def elapsed_ms(self) -> float:
        return (self.ended_ns - self.started_ns) / 1e6


def _error_kind(stage: Stage, exc: BaseException) -> str:
    from llm_client import LLMError

    if isinstance(exc, LLMError):
        return "llm_error"
    if isinstance(exc, InvalidReturn):
        return "invalid_return"
    return "program_error" if stage == "run" else "metric_error"


_MAX_MESSAGE = 500


def _describe(exc: BaseException, fn: UserFunction) -> str:
    """``score raised ValueError: ... (at metric.py:12)``: what, and where in the user's file."""
    if isinstance(exc, InvalidReturn):
        return str(exc)
    text = str(exc)
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 3] + "..."
    where = ""
    tb = exc.__traceback__
    user_file = str(fn.path)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == user_file:
            where = f" (at {fn.path.name}:{tb.tb_lineno})"
        tb = tb.tb_next
    message = f"`{fn.name}` raised {type(exc).__name__}"
    return f"{message}: {text}{where}" if text else message + where


def _finish(stage: Stage, call: Call, raw: Any, started: int) -> Outcome:
    ended = _clock()
    if stage == "run":
        return Outcome(raw, None, started, ended)
    try:
        scored = validate_return(raw, call.example_id)
    except InvalidReturn as exc:
        return Outcome(None, ErrorInfo("invalid_return", str(exc)), started, ended)
    return Outcome(scored, None, started, ended)


def _args(fn: UserFunction, call: Call) -> tuple[Any, ...]:
    return call.args if fn.arity == len(call.args) else call.args[: fn.arity]


def invoke_sync(
    fn: UserFunction, stage: Stage, call: Call, bridge: LLMBridge | None = None
) -> Outcome:
    """Run a sync user function on one call; never raises for the user's failures."""
    # A plain set/reset rather than the context manager: this is the hot path of cheap
    # metrics, and @contextmanager costs more than the metric itself.
    token = _current.set(CallContext(call.example_id, stage, call.observation, bridge))
    try:
        started = _clock()
        try:
            raw = fn.fn(*_args(fn, call))
        except Exception as exc:
            return Outcome(
                None, ErrorInfo(_error_kind(stage, exc), _describe(exc, fn)), started, _clock()
            )
        except SystemExit as exc:
            return Outcome(
                None,
                ErrorInfo(_error_kind(stage, exc), f"`{fn.name}` called exit({exc.code!r})"),
                started,
                _clock(),
            )
    finally:
        _current.reset(token)
    return _finish(stage, call, raw, started)


async def invoke_async(
    fn: UserFunction, stage: Stage, call: Call, bridge: LLMBridge | None = None
) -> Outcome:
    """Await an async user function on one call (the caller enforces the timeout)."""
    ctx = CallContext(call.example_id, stage, call.observation, bridge)
    with call_context(ctx):
        started = _clock()
        try:
            raw = await fn.fn(*_args(fn, call))
        except Exception as exc:
            return Outcome(
                None, ErrorInfo(_error_kind(stage, exc), _describe(exc, fn)), started, _clock()
            )
    return _finish(stage, call, raw, started)


class LoopBridge:
    """``skynet.llm`` for calls running in the engine's process (loop, thread, inline).

    A sync call from a thread hops onto the engine's loop and blocks only its own thread;
    an async call is awaited directly.
    """

    __slots__ = ("_handler", "_loop", "_stage", "_token")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, handler: LLMHandler, token: int, stage: Stage
    ) -> None:
        self._loop = loop
        self._handler = handler
        self._token = token
        self._stage: Literal["run", "score"] = stage

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError(
                "skynet.llm() would block the event loop here; in an `async def` function "
                "use `await skynet.allm(...)`"
            )
        future: concurrent.futures.Future[str] = asyncio.run_coroutine_threadsafe(
            self._handler(self._token, self._stage, instruction, input, options), self._loop
        )
        return future.result()

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return await self._handler(self._token, self._stage, instruction, input, options)
