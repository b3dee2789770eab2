"""One user call, the same in every executor: what it carries, how it runs, what it gives.

Executors differ only in *where* calls run (the loop, a thread, a worker process): a sync
call is :class:`SyncInvoker` (one per thread or worker), an async call
:func:`invoke_async`. What a call is (:class:`RunCall`, :class:`ScoreCall`), what it
returns (:class:`Outcome`) and how it is timed is defined once, here; how a failure is
named is :mod:`evaluator._failures`.

A worker process imports this module at boot, so it imports no event loop machinery.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Coroutine
from time import perf_counter_ns
from typing import Any, ClassVar, TypeAlias, cast

import msgspec

from . import _failures as failures
from ._context import CallContext, LLMBridge, Stage, _current
from ._contract import validate_return
from ._exceptions import InvalidReturn
from ._loader import UserFunction
from ._results import ErrorInfo, Observation

__all__ = [
    "Call",
    "LLMHandler",
    "Outcome",
    "RunCall",
    "ScoreCall",
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


# Both call structs are ``array_like`` (they cross to worker processes as plain rows, see
# ``_process/_wire.py``), frozen, and ``gc=False``: their fields hold the example's data
# and the user's values, all built before the call, so a call cannot be part of a
# reference cycle, and a tracked object per example in flight promoted enough of them to
# trigger full collections. The pipeline builds them positionally, in field order.


class RunCall(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One call of the program's ``run(artifact, input)`` on one example.

    ``token`` is unique among the calls in flight in one ``Evaluator`` (example ids are
    not: two concurrent evaluations may share ids); model usage is attributed by it.
    """

    token: int
    example_id: Any
    artifact: Any
    input: Any

    #: A program call reads no observation (``skynet.observation()`` is the metric's).
    observation: ClassVar[None] = None

    def arguments(self, arity: int) -> tuple[Any, ...]:
        """The positional arguments of ``run``."""
        return (self.artifact, self.input)


class ScoreCall(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One call of the metric's ``score(input, output, expected)`` on one example.

    ``observation`` is what the metric reads through ``skynet.observation()``: the
    program's measurements, or a score-only run's "not measured" notes.
    """

    token: int
    example_id: Any
    input: Any
    output: Any
    expected: Any = None
    observation: Observation | None = None

    def arguments(self, arity: int) -> tuple[Any, ...]:
        """The positional arguments of ``score``: three, or two for ``score(input, output)``."""
        if arity == 3:
            return (self.input, self.output, self.expected)
        return (self.input, self.output)


Call: TypeAlias = RunCall | ScoreCall


class Outcome(msgspec.Struct, array_like=True, gc=False):
    """What one call produced: a value (the output, or a ``Scored``) or an error.

    ``gc=False``: see the call structs; ``value`` is the user's output or a ``Scored``,
    both built before the outcome.
    """

    value: Any = None
    error: ErrorInfo | None = None
    started_ns: int = 0
    ended_ns: int = 0

    @property
    def elapsed_ms(self) -> float:
        return (self.ended_ns - self.started_ns) / 1e6


def _failed(fn: UserFunction, stage: Stage, exc: BaseException, started: int) -> Outcome:
    """The outcome of a call that raised ``exc``."""
    ended = _clock()
    error = failures.raised(fn, stage, exc)
    # Drop the traceback: it holds the user's frames (their locals, the call's arguments)
    # in a reference cycle that only the cyclic collector could free.
    exc.__traceback__ = None
    return Outcome(None, error, started, ended)


def _settle(fn: UserFunction, stage: Stage, call: Call, raw: Any, started: int) -> Outcome:
    """The outcome of a call that returned ``raw``: checked against the contract for ``score``."""
    ended = _clock()
    if stage == "run":
        return Outcome(raw, None, started, ended)
    try:
        scored = validate_return(raw, call.example_id)
    except InvalidReturn as exc:
        return Outcome(None, failures.invalid_return(exc), started, ended)
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
    worker process) calls it per call, so what a call is, how it is timed and how its
    failure is named is defined once. :meth:`score` and :meth:`run` take a call's fields
    (a worker process runs them straight from the received row, without building the
    struct); :attr:`invoke` takes the struct and is the one matching the stage.
    ``started`` is read by the caller (which publishes it to its watchdog first) with
    :data:`_clock`.

    A user exception becomes the call's outcome (``SystemExit`` too); other
    ``BaseException`` s propagate, for the executor to handle.
    """

    __slots__ = ("_ctx", "_fn", "_three", "fn", "invoke", "stage")

    def __init__(self, fn: UserFunction, stage: Stage) -> None:
        self.fn = fn
        self.stage: Stage = stage
        self._fn = fn.fn
        self._three = fn.arity == 3
        self._ctx = ThreadContext(stage)
        #: ``invoke(call, bridge, started) -> Outcome`` for this stage's call struct.
        self.invoke: Callable[[Any, LLMBridge | None, int], Outcome] = (
            self._invoke_score if stage == "score" else self._invoke_run
        )

    def enter(self) -> contextvars.Token[CallContext | None]:
        """Make this invoker's context the current one, in the calling thread."""
        return _current.set(cast(CallContext, self._ctx))

    def score(
        self,
        example_id: Any,
        observation: Observation | None,
        input: Any,
        output: Any,
        expected: Any,
        bridge: LLMBridge | None,
        started: int,
    ) -> Outcome:
        """Call ``score`` on one example and check its return value against the contract."""
        ctx = self._ctx
        ctx.example_id = example_id
        ctx.observation = observation
        ctx.llm = bridge
        try:
            raw = self._fn(input, output, expected) if self._three else self._fn(input, output)
        except (Exception, SystemExit) as exc:
            return _failed(self.fn, self.stage, exc, started)
        ended = _clock()
        try:
            scored = validate_return(raw, example_id)
        except InvalidReturn as exc:
            return Outcome(None, failures.invalid_return(exc), started, ended)
        except Exception as exc:  # a returned object whose inspection itself raises
            return _failed(self.fn, self.stage, exc, started)
        return Outcome(scored, None, started, ended)

    def run(
        self, example_id: Any, artifact: Any, input: Any, bridge: LLMBridge | None, started: int
    ) -> Outcome:
        """Call ``run`` on one example; its return value is the output, whatever it is."""
        ctx = self._ctx
        ctx.example_id = example_id
        ctx.observation = None
        ctx.llm = bridge
        try:
            raw = self._fn(artifact, input)
        except (Exception, SystemExit) as exc:
            return _failed(self.fn, self.stage, exc, started)
        return Outcome(raw, None, started, _clock())

    def _invoke_score(self, call: ScoreCall, bridge: LLMBridge | None, started: int) -> Outcome:
        return self.score(
            call.example_id,
            call.observation,
            call.input,
            call.output,
            call.expected,
            bridge,
            started,
        )

    def _invoke_run(self, call: RunCall, bridge: LLMBridge | None, started: int) -> Outcome:
        return self.run(call.example_id, call.artifact, call.input, bridge, started)

    def failed(self, exc: BaseException, started: int) -> Outcome:
        """The outcome of a call that raised a ``BaseException`` past :meth:`score` or
        :meth:`run` (``KeyboardInterrupt`` and such, from user code)."""
        return _failed(self.fn, self.stage, exc, started)


def invoke_sync(
    fn: UserFunction, stage: Stage, call: Call, bridge: LLMBridge | None = None
) -> Outcome:
    """Run a sync user function on one call; never raises for the user's failures.

    A one-off :class:`SyncInvoker`; executors keep one per thread instead.
    """
    invoker = SyncInvoker(fn, stage)
    token = invoker.enter()
    try:
        return invoker.invoke(call, bridge, _clock())
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
        raw = await fn.fn(*call.arguments(fn.arity))
    except (Exception, SystemExit) as exc:
        return _failed(fn, stage, exc, started)
    finally:
        _current.reset(token)
    return _settle(fn, stage, call, raw, started)
