"""One user call, the same in every executor: what it carries, how it runs, what it gives.

Executors differ only in *where* calls run (the loop, a thread, a worker process): a sync
call is :class:`SyncInvoker` (one per thread or worker), an async call
:func:`invoke_async`. What a call is (:class:`RunCall`, :class:`ScoreCall`), what it
returns (:class:`Outcome`) and how it is timed is defined once, here; how a failure is
named is :mod:`evaluator._call._failures`.

A worker process imports this module at boot, so it imports no event loop machinery.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable, Coroutine, Generator
from time import perf_counter_ns
from typing import Any, ClassVar, TypeAlias, cast

import msgspec
from msgspec.structs import replace as _struct_copy

from .._exceptions import InvalidReturn
from . import _failures as failures
from ._context import CallContext, LLMBridge, Stage, _current
from ._contract import validate_return
from ._copy import ATOMS, private_artifact, private_copy, unread_arguments
from ._loader import UserFunction
from ._results import ErrorInfo, Observation

__all__ = [
    "LONG_STEP_NS",
    "Call",
    "LLMHandler",
    "LoopTime",
    "Outcome",
    "RunCall",
    "ScoreCall",
    "Steps",
    "SyncInvoker",
    "ThreadContext",
    "invoke_async",
    "invoke_sync",
]

# The engine's clock. Every timing in this module reads it through a default argument
# (``clock=perf_counter_ns``), bound when this module is imported, before any user file
# is: user code that patches ``time.perf_counter_ns``, or this module's ``_clock``, does
# not change what a call measures. (Code in the engine's own process can reach anything
# in it; this keeps accidents and casual patches out, it is not a sandbox.)
_clock = perf_counter_ns

#: A step of an async call (the time between two of its suspensions) longer than this
#: holds up every other call on the loop: it is counted as blocking the loop.
LONG_STEP_NS = 50_000_000

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

    def private_arguments(self, arity: int) -> tuple[Any, ...]:
        """The arguments of ``run``: a private copy of the input, and of the artifact's
        plain data (a program that edits its config changes neither the candidate nor the
        next call's)."""
        return (private_artifact(self.artifact), private_copy(self.input))


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

    def private_arguments(self, arity: int) -> tuple[Any, ...]:
        """The arguments of ``score``, each a private copy."""
        if arity == 3:
            return (
                private_copy(self.input),
                private_copy(self.output),
                private_copy(self.expected),
            )
        return (private_copy(self.input), private_copy(self.output))


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


def _failed(
    fn: UserFunction,
    stage: Stage,
    exc: BaseException,
    started: int,
    clock: Any = perf_counter_ns,
    *,
    expected: Any = failures.UNKNOWN,
) -> Outcome:
    """The outcome of a call that raised ``exc``; ``expected``: the example's, for the
    message of a ``KeyError`` out of ``score``."""
    ended = clock()
    error = failures.raised(fn, stage, exc, expected=expected)
    # Drop the traceback: it holds the user's frames (their locals, the call's arguments)
    # in a reference cycle that only the cyclic collector could free.
    exc.__traceback__ = None
    return Outcome(None, error, started, ended)


def _settle(
    fn: UserFunction, stage: Stage, call: Call, raw: Any, started: int, clock: Any = perf_counter_ns
) -> Outcome:
    """The outcome of a call that returned ``raw``: checked against the contract for ``score``."""
    ended = clock()
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

    With ``private`` (a thread of the engine's process), :attr:`observation` hands out a
    copy at each read, made only when the call reads it (most calls never do): a call
    that forces a field of what it got changes its copy, not the engine's record nor the
    next call's view.

    :attr:`llm` is the call's bridge; with ``make_bridge`` (a thread pool's), it is made
    when the call first asks for it, not for every call: most calls never do, and a
    bridge per call cost an exact-match metric a twentieth of its time.
    """

    __slots__ = ("_llm", "_observation", "example_id", "make_bridge", "private", "stage")

    def __init__(self, stage: Stage, *, private: bool = False) -> None:
        self.example_id: Any = None
        self.stage: Stage = stage
        self._observation: Observation | None = None
        self._llm: Any = None
        self.private = private
        #: Makes the running call's bridge on the first read of :attr:`llm` (None: the
        #: bridge set per call is the one).
        self.make_bridge: Callable[[], LLMBridge] | None = None

    @property
    def llm(self) -> Any:
        """The running call's :class:`LLMBridge`, or None when it can call no model."""
        bridge = self._llm
        if bridge is None and self.make_bridge is not None:
            bridge = self._llm = self.make_bridge()
        return bridge

    @llm.setter
    def llm(self, bridge: Any) -> None:
        self._llm = bridge

    @property
    def observation(self) -> Observation | None:
        if self.private:
            return _own_observation(self._observation)
        return self._observation


def _own_observation(observation: Observation | None) -> Observation | None:
    """A copy of ``observation`` for the call's context: the engine records its own, so
    a call that forces a field of what it can reach changes only its copy."""
    return None if observation is None else _struct_copy(observation)


class SyncInvoker:
    """Runs one sync user function, call after call, in one thread: *the* sync call.

    Every executor that runs sync user code (the thread pool, the inline thread, a
    worker process) calls it per call, so what a call is, how it is timed and how its
    failure is named is defined once. :meth:`score` and :meth:`run` take a call's fields
    (a worker process runs them straight from the received row, and a thread from the
    call struct, without a frame in between); :attr:`invoke` takes the struct and is the
    one matching the stage. ``started`` is read by the caller (which publishes it to its
    watchdog first) with the engine's clock.

    ``private``: the executor shares the engine's memory (a thread), so each call gets
    its own copy of the example's data (``evaluator._call._copy.private_copy``) and of its
    observation: a function that edits its arguments changes neither the example (the
    next candidate's call, the metric after the program, what a reflection is shown)
    nor what the engine recorded. A worker process receives pickled copies already. An
    argument the function never reads (``_copy.unread_arguments``: an exact-match
    metric's ``input``) is passed as it is, and a value that cannot change (``ATOMS``)
    is never copied.

    A user exception becomes the call's outcome (``SystemExit`` too); other
    ``BaseException`` s propagate, for the executor to handle.
    """

    __slots__ = ("_copies", "_ctx", "_fn", "_private", "_three", "fn", "invoke", "stage")

    def __init__(self, fn: UserFunction, stage: Stage, *, private: bool = False) -> None:
        self.fn = fn
        self.stage: Stage = stage
        self._fn = fn.fn
        self._three = fn.arity == 3
        self._private = private
        #: Per argument (artifact, input; or input, output, expected), whether it gets a
        #: private copy: not when the function never reads it.
        unread = unread_arguments(fn.fn, 2 if stage == "run" else fn.arity)
        self._copies = tuple(private and not u for u in (*unread, True, True))[:3]
        self._ctx = ThreadContext(stage, private=private)
        #: ``invoke(call, bridge, started) -> Outcome`` for this stage's call struct.
        self.invoke: Callable[[Any, LLMBridge | None, int], Outcome] = (
            self._invoke_score if stage == "score" else self._invoke_run
        )

    @property
    def context(self) -> ThreadContext:
        """The context this invoker's calls run in, updated in place call after call."""
        return self._ctx

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
        clock: Any = perf_counter_ns,
        atoms: frozenset[type] = ATOMS,
    ) -> Outcome:
        """Call ``score`` on one example and check its return value against the contract."""
        ctx = self._ctx
        ctx.example_id = example_id
        ctx._llm = bridge
        ctx._observation = observation
        if self._private:
            # Inline, not a loop: this is the engine's cost per example of a cheap metric.
            copy_input, copy_output, copy_expected = self._copies
            copied = False
            if copy_input and type(input) not in atoms:
                input, copied = private_copy(input), True
            if copy_output and type(output) not in atoms:
                output, copied = private_copy(output), True
            if copy_expected and type(expected) not in atoms:
                expected, copied = private_copy(expected), True
            if copied:
                started = clock()  # the copies are the engine's work, not the call's time
        try:
            raw = self._fn(input, output, expected) if self._three else self._fn(input, output)
        except (Exception, SystemExit) as exc:
            return _failed(self.fn, self.stage, exc, started, expected=expected)
        ended = clock()
        try:
            scored = validate_return(raw, example_id)
        except InvalidReturn as exc:
            return Outcome(None, failures.invalid_return(exc), started, ended)
        except Exception as exc:  # a returned object whose inspection itself raises
            return _failed(self.fn, self.stage, exc, started)
        return Outcome(scored, None, started, ended)

    def run(
        self,
        example_id: Any,
        artifact: Any,
        input: Any,
        bridge: LLMBridge | None,
        started: int,
        clock: Any = perf_counter_ns,
        atoms: frozenset[type] = ATOMS,
    ) -> Outcome:
        """Call ``run`` on one example; its return value is the output, whatever it is."""
        ctx = self._ctx
        ctx.example_id = example_id
        ctx._observation = None
        ctx._llm = bridge
        if self._private:
            copy_artifact, copy_input, _ = self._copies
            copied = False
            if copy_artifact and type(artifact) not in atoms:
                artifact, copied = private_artifact(artifact), True
            if copy_input and type(input) not in atoms:
                input, copied = private_copy(input), True
            if copied:
                started = clock()  # the copies are the engine's work, not the call's time
        try:
            raw = self._fn(artifact, input)
        except (Exception, SystemExit) as exc:
            return _failed(self.fn, self.stage, exc, started)
        return Outcome(raw, None, started, clock())

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
    fn: UserFunction,
    stage: Stage,
    call: Call,
    bridge: LLMBridge | None = None,
    clock: Any = perf_counter_ns,
) -> Outcome:
    """Run a sync user function on one call, on private copies of its data; never raises
    for the user's failures.

    A one-off :class:`SyncInvoker`; executors keep one per thread instead.
    """
    invoker = SyncInvoker(fn, stage, private=True)
    token = invoker.enter()
    try:
        return invoker.invoke(call, bridge, clock())
    finally:
        _current.reset(token)


# -- async calls --------------------------------------------------------------------------


class LoopTime:
    """What the async calls of one executor did to its event loop, shared by them.

    ``stalled_ns`` sums the steps longer than :data:`LONG_STEP_NS` (a step holds the loop:
    nothing else runs meanwhile), so that a call's timeout need not count the time other
    calls held the loop; ``stepping`` is the call whose step runs now (read by a thread
    that watches the loop, to say which call holds it).
    """

    __slots__ = ("stalled_ns", "stepping")

    def __init__(self) -> None:
        self.stalled_ns = 0
        self.stepping: Steps | None = None


class Steps:
    """One async call's steps on the loop: how long its longest held the loop, the sum of
    its long ones, and where the loop's watcher saw it blocking.

    ``detached``: the executor has given the call up and closed its coroutine; the call
    is never resumed again (see :func:`invoke_async`).
    """

    __slots__ = (
        "blocked_at",
        "blocked_ns",
        "coro",
        "detached",
        "example_id",
        "longest_ns",
        "loop",
        "on_suspend",
    )

    def __init__(self, loop: LoopTime, example_id: Any) -> None:
        self.loop = loop
        self.example_id = example_id
        self.longest_ns = 0
        self.blocked_ns = 0
        self.blocked_at: str | None = None
        self.coro: Any = None
        self.detached = False
        #: Called when the call first suspends (the executor starts another worker).
        self.on_suspend: Callable[[], None] | None = None

    def took(self, ns: int) -> None:
        """A step of the call took ``ns`` on the loop."""
        if ns > self.longest_ns:
            self.longest_ns = ns
        if ns > LONG_STEP_NS:
            self.blocked_ns += ns
            self.loop.stalled_ns += ns


class _Resume:
    """Awaits a coroutine that has already taken its first step, timing every step.

    It drives the coroutine with ``send`` / ``throw`` (as a task does) rather than
    ``await``, so that each step's time on the loop is known (:class:`Steps`), and so
    that a call the executor gave up (``steps.detached``) is never resumed again.
    """

    __slots__ = ("first", "steps")

    def __init__(self, first: Any, steps: Steps) -> None:
        self.first = first
        self.steps = steps

    def __await__(self, clock: Any = perf_counter_ns) -> Generator[Any, Any, Any]:
        steps = self.steps
        coro = steps.coro
        loop = steps.loop
        yielded = self.first
        self.first = None
        while True:
            try:
                value = yield yielded
                error: BaseException | None = None
            except BaseException as exc:  # a cancellation, thrown in by the task
                value, error = None, exc
            if steps.detached:  # given up: its coroutine was closed, never resume it
                raise sys.modules["asyncio"].CancelledError() from error
            loop.stepping = steps
            began = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                loop.stepping = None
                steps.took(clock() - began)


def _cancel_requested(task: Any, baseline: int) -> bool:
    """Whether someone asked to cancel ``task`` since it had ``baseline`` requests."""
    return task is not None and task.cancelling() > baseline


async def invoke_async(
    fn: UserFunction,
    stage: Stage,
    call: Call,
    bridge: LLMBridge | None = None,
    steps: Steps | None = None,
    clock: Any = perf_counter_ns,
) -> Outcome:
    """Await an async user function on one call, on private copies of its data (the
    caller enforces the timeout).

    Whatever the function raises becomes the outcome, ``BaseException`` s included
    (``CancelledError``, ``KeyboardInterrupt``, ``GeneratorExit``, ``SystemExit``, the
    user's own): only a cancellation someone *requested* of the running task while the
    call ran (the executor's timeout, the caller being cancelled) propagates, told apart
    by ``Task.cancelling()``. Each step of the call is timed into ``steps``.
    """
    asyncio = sys.modules["asyncio"]  # loaded: this runs in its loop
    task = asyncio.current_task()
    baseline = task.cancelling() if task is not None else 0
    if steps is None:
        steps = Steps(LoopTime(), call.example_id)
    try:
        args = call.private_arguments(fn.arity)
    except BaseException as exc:  # a __deepcopy__ of the user's that raises
        return _failed(fn, stage, exc, clock())
    observation = _own_observation(call.observation)
    token = _current.set(CallContext(call.example_id, stage, observation, bridge))
    started = clock()  # after the copies: they are the engine's work, not the call's time
    try:
        raw = await _first_step(fn.fn(*args), steps)
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError) and (
            steps.detached or _cancel_requested(task, baseline)
        ):
            raise
        expected = call.expected if isinstance(call, ScoreCall) else failures.UNKNOWN
        return _failed(fn, stage, exc, started, expected=expected)
    finally:
        _current.reset(token)
    return _settle(fn, stage, call, raw, started)


async def _first_step(coro: Any, steps: Steps, clock: Any = perf_counter_ns) -> Any:
    """Await ``coro``: its first step here (a cheap call ends in it, at the cost of a
    plain ``await``), the rest through :class:`_Resume`; every step timed."""
    if not hasattr(coro, "send"):  # an awaitable that is not a coroutine: untimed
        return await coro
    steps.coro = coro
    loop = steps.loop
    loop.stepping = steps
    began = clock()
    try:
        first = coro.send(None)
    except StopIteration as stop:
        return stop.value
    finally:
        loop.stepping = None
        steps.took(clock() - began)
    if steps.on_suspend is not None:
        steps.on_suspend()
    return await _Resume(first, steps)
