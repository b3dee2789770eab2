"""One user call, the same in every executor: set the context, time it, classify failure.

Executors differ only in *where* calls run (the loop, a thread, a worker process): a sync
call is :class:`SyncInvoker` (one per thread), an async call :func:`invoke_async`; what a
call is, what it returns and how a failure is named is defined once, here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Callable, Coroutine
from time import perf_counter_ns
from typing import Any, Literal, cast

import msgspec

from ._context import CallContext, LLMBridge, Stage, _current
from ._contract import validate_return
from ._exceptions import InvalidReturn
from ._loader import UserFunction
from ._results import ErrorInfo, Observation

__all__ = [
    "Call",
    "LLMHandler",
    "LoopBridge",
    "Outcome",
    "SyncInvoker",
    "ThreadContext",
    "invoke_async",
    "invoke_sync",
]

# Captured at import, before any user module runs, so user code that patches
# ``time.perf_counter_ns`` cannot change the engine's measurements.
_clock = perf_counter_ns

#: The engine-side handler of a model call made through ``skynet.llm``:
#: ``handler(token, stage, instruction, input, options) -> reply text``.
LLMHandler = Callable[[int, Stage, str, "str | None", dict[str, Any]], Coroutine[Any, Any, str]]


class Call(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One call of the user's function on one example.

    ``token`` is unique among the calls in flight in one ``Evaluator`` (example ids are
    not: two concurrent evaluations may share ids); model usage is attributed by it.
    ``first``, ``second`` and ``third`` are the positional arguments (see :attr:`args`):
    ``(artifact, input)`` for ``run`` (``third`` unset) and ``(input, output,
    expected)`` for ``score``; ``observation`` is what the metric reads through
    ``skynet.observation()``.

    Three fields rather than one tuple: a tuple that holds dicts is tracked by the cyclic
    garbage collector for as long as it lives, and one per example in flight promoted
    enough of them to trigger full collections. ``gc=False`` (as for ``Outcome`` and the
    structs of ``_results``): its fields hold the example's data and the user's values,
    all built before it, so it cannot be part of a reference cycle.
    """

    token: int
    example_id: Any
    first: Any
    second: Any
    third: Any = msgspec.UNSET
    observation: Observation | None = None

    @property
    def args(self) -> tuple[Any, ...]:
        """The positional arguments: two for ``run``, three for ``score``."""
        if self.third is msgspec.UNSET:
            return (self.first, self.second)
        return (self.first, self.second, self.third)


class Outcome(msgspec.Struct, array_like=True, gc=False):
    """What one call produced: a value (the output, or a ``Scored``) or an error.

    ``gc=False``: see :class:`Call`; ``value`` is the user's output or a ``Scored``,
    both built before the outcome.
    """

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
    if isinstance(exc, SystemExit):
        return f"`{fn.name}` called exit({exc.code!r})"
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


def _failed(fn: UserFunction, stage: Stage, exc: BaseException, started: int) -> Outcome:
    """The outcome of a call that raised ``exc``."""
    ended = _clock()
    try:
        error = ErrorInfo(_error_kind(stage, exc), _describe(exc, fn))
    except Exception:  # an exception whose __str__ raises
        error = ErrorInfo(_error_kind(stage, exc), f"`{fn.name}` raised {type(exc).__name__}")
    # Drop the traceback: it holds the user's frames (their locals, the call's arguments)
    # in a reference cycle that only the cyclic collector could free.
    exc.__traceback__ = None
    return Outcome(None, error, started, ended)


def _finish(fn: UserFunction, stage: Stage, call: Call, raw: Any, started: int) -> Outcome:
    """The outcome of a call that returned ``raw``: checked against the contract for ``score``."""
    ended = _clock()
    if stage == "run":
        return Outcome(raw, None, started, ended)
    try:
        scored = validate_return(raw, call.example_id)
    except InvalidReturn as exc:
        return Outcome(None, ErrorInfo("invalid_return", str(exc)), started, ended)
    except Exception as exc:  # a returned object whose inspection itself raises
        return _failed(fn, stage, exc, started)
    return Outcome(scored, None, started, ended)


class ThreadContext:
    """The context of the call a thread is running, updated in place call after call.

    Duck-types :class:`CallContext` (the facade only reads its attributes). A thread
    sets it into its context variable once (:meth:`SyncInvoker.enter`); each call then
    changes three attributes, instead of building a frozen context and setting and
    resetting the variable, which costs more than an exact-match metric.
    """

    __slots__ = ("example_id", "llm", "observation", "stage")

    def __init__(self, stage: Stage) -> None:
        self.example_id: Any = None
        self.stage: Stage = stage
        self.observation: Observation | None = None
        self.llm: Any = None


class SyncInvoker:
    """Runs one sync user function, call after call, in one thread: *the* sync call.

    Every executor that runs sync user code (the thread pool, the inline thread, a
    worker process) calls :meth:`run` per call, so what a call is, how it is timed
    and how its failure is named is defined once. ``started`` is read by the caller
    (which publishes it to its watchdog first) with :data:`_clock`.

    A user exception becomes the call's outcome (``SystemExit`` too); other
    ``BaseException`` s propagate, for the executor to handle.
    """

    __slots__ = ("_arity", "_ctx", "_fn", "_scoring", "fn", "stage")

    def __init__(self, fn: UserFunction, stage: Stage) -> None:
        self.fn = fn
        self.stage: Stage = stage
        self._fn = fn.fn
        self._arity = fn.arity
        self._scoring = stage == "score"
        self._ctx = ThreadContext(stage)

    def enter(self) -> contextvars.Token[CallContext | None]:
        """Make this invoker's context the current one, in the calling thread."""
        return _current.set(cast(CallContext, self._ctx))

    def run(
        self,
        example_id: Any,
        observation: Observation | None,
        first: Any,
        second: Any,
        third: Any,
        bridge: LLMBridge | None,
        started: int,
    ) -> Outcome:
        """The call of :class:`Call` ``(token, example_id, first, second, third,
        observation)``, given as its fields: a worker process runs it straight from the
        received row, without building the struct."""
        ctx = self._ctx
        ctx.example_id = example_id
        ctx.observation = observation
        ctx.llm = bridge
        try:
            raw = self._fn(first, second, third) if self._arity == 3 else self._fn(first, second)
        except (Exception, SystemExit) as exc:
            return _failed(self.fn, self.stage, exc, started)
        ended = _clock()
        if not self._scoring:
            return Outcome(raw, None, started, ended)
        try:
            scored = validate_return(raw, example_id)
        except InvalidReturn as exc:
            return Outcome(None, ErrorInfo("invalid_return", str(exc)), started, ended)
        except Exception as exc:  # a returned object whose inspection itself raises
            return _failed(self.fn, self.stage, exc, started)
        return Outcome(scored, None, started, ended)


def invoke_sync(
    fn: UserFunction, stage: Stage, call: Call, bridge: LLMBridge | None = None
) -> Outcome:
    """Run a sync user function on one call; never raises for the user's failures.

    A one-off :class:`SyncInvoker`; executors keep one per thread instead.
    """
    invoker = SyncInvoker(fn, stage)
    token = invoker.enter()
    try:
        return invoker.run(
            call.example_id,
            call.observation,
            call.first,
            call.second,
            call.third,
            bridge,
            _clock(),
        )
    finally:
        _current.reset(token)


async def invoke_async(
    fn: UserFunction, stage: Stage, call: Call, bridge: LLMBridge | None = None
) -> Outcome:
    """Await an async user function on one call (the caller enforces the timeout).

    A user exception (``SystemExit`` too) becomes the outcome; the cancellation that
    enforces the timeout propagates.
    """
    token = _current.set(CallContext(call.example_id, stage, call.observation, bridge))
    started = _clock()
    try:
        if fn.arity == 3:
            raw = await fn.fn(call.first, call.second, call.third)
        else:
            raw = await fn.fn(call.first, call.second)
    except (Exception, SystemExit) as exc:
        return _failed(fn, stage, exc, started)
    finally:
        _current.reset(token)
    return _finish(fn, stage, call, raw, started)


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
