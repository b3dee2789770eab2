"""The failure vocabulary: every kind of failed call, and its message, made here.

Every example yields exactly one result; when its call fails, the result carries an
:class:`ErrorInfo` whose kind is one of ``ERROR_KINDS`` and whose message says what went
wrong, on which example where it helps, and how to fix it. Executors, worker processes
and the pipeline describe *what happened* (the function raised, did not return in time,
its worker died...) and this module chooses the kind and words the message, so that the
same failure reads the same in every executor and the kind follows from the stage in one
place (:func:`user_error_kind`, :func:`timeout_kind`), not from ``stage == "run"`` tests
scattered through the engine.

Where each kind is made:

- ``program_error`` / ``metric_error``: :func:`raised` (the call layer, any executor) and
  the process executor's :func:`unsendable_arguments`, :func:`unsendable_value`,
  :func:`unreadable_value` and :func:`unreadable_arguments` (values that cannot cross
  the process boundary, either way).
- ``invalid_return``: :func:`invalid_return` (the call layer, after ``score``).
- ``llm_error``: :func:`raised`, for an ``llm_client.LLMError`` out of ``skynet.llm``.
- ``program_timeout`` / ``metric_timeout``: :func:`timed_out`, in every executor, and
  :func:`blocked_loop` (an async call that held the event loop past its timeout).
- ``worker_crash``: :func:`worker_died`, :func:`memory_exceeded`,
  :func:`died_outside_call`, :func:`workers_fail_to_start` (the process executor);
  :func:`ray_actors_lost`, :func:`ray_no_nodes`, :func:`ray_actor_failed` (the Ray
  executor).
- ``missing_output``: :func:`missing_output` (the pipeline, score-only runs).
- ``budget_exhausted``: :func:`budget_exhausted` (the pipeline: an example whose model
  call did not fit its spending budget, or that had not started when it ran out).
- ``cancelled``: :func:`closed_before_done` (an executor closed under a waiting call);
  :func:`no_outcome` and :func:`lost_results` (the pipeline, when the engine itself lost
  a call's outcome or a chunk's results: never a silently missing example).

Imports only what a worker process needs: workers build their outcomes here too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._exceptions import InvalidReturn
from ._results import ErrorInfo, ErrorKind

if TYPE_CHECKING:
    from ._context import Stage
    from ._loader import UserFunction

__all__ = [
    "UNKNOWN",
    "blocked_loop",
    "budget_exhausted",
    "closed_before_done",
    "died_outside_call",
    "invalid_return",
    "kind_of",
    "lost_results",
    "memory_exceeded",
    "missing_output",
    "no_outcome",
    "raised",
    "ray_actor_failed",
    "ray_actors_lost",
    "ray_no_nodes",
    "timed_out",
    "timeout_kind",
    "unreadable_arguments",
    "unreadable_value",
    "unsendable_arguments",
    "unsendable_value",
    "user_error_kind",
    "worker_died",
    "workers_fail_to_start",
]

#: A message quoting the user's exception is cut to this many characters.
MAX_MESSAGE = 500


def user_error_kind(stage: Stage) -> Literal["program_error", "metric_error"]:
    """The kind of a failure of the user's own code in ``stage``."""
    return "program_error" if stage == "run" else "metric_error"


def timeout_kind(stage: Stage) -> Literal["program_timeout", "metric_timeout"]:
    """The kind of a call of ``stage`` that did not return in time."""
    return "program_timeout" if stage == "run" else "metric_timeout"


def _function(stage: Stage) -> str:
    return "`run`" if stage == "run" else "`score`"


def _timeout_option(stage: Stage) -> str:
    return "program_timeout" if stage == "run" else "timeout"


def budget_exhausted(example_id: Any, why: str) -> ErrorInfo:
    """Example ``example_id`` was not evaluated: its spending budget ran out (``why``:
    which limit, and what was spent against it)."""
    return ErrorInfo(
        "budget_exhausted",
        f"example {example_id!r} was not evaluated, its budget ran out: {why}; raise the "
        "budget (`budget=Budget(usd=..., calls=..., seconds=...)`, or --max-cost, "
        "--max-calls, --max-time) to evaluate it",
    )


#: The model client's usage errors: a misuse of the client, not a model call given up,
#: whether or not they derive from ``LLMError``.
_USAGE_ERRORS = ("ClientClosedError", "ModelConfigError")


def _llm_error_types() -> tuple[type[BaseException], tuple[type[BaseException], ...]] | None:
    """``LLMError`` and the model client's usage errors, if the model client is loaded.

    Never imports it: an exception cannot be an ``LLMError`` in a process that has not
    loaded the class, and importing the model client (a quarter of a second, seconds on
    a loaded machine) inside the failed call of a worker process could push the call
    past its timeout.
    """
    # The module that defines the classes: the package itself is loaded wherever a
    # result is (``TokenUsage``), and its lazy ``__getattr__`` would import the class.
    package = sys.modules.get("llm_client._exceptions")
    llm_error = getattr(package, "LLMError", None)
    if llm_error is None:
        return None
    usage = tuple(getattr(package, name) for name in _USAGE_ERRORS if hasattr(package, name))
    return llm_error, usage


def kind_of(stage: Stage, exc: BaseException) -> ErrorKind:
    """The kind of a call of ``stage`` that raised ``exc``.

    A model call given up (``LLMError``) is ``llm_error``; a misused or misconfigured
    model client is the user's code failing, whatever its base classes are.
    """
    if isinstance(exc, InvalidReturn):
        return "invalid_return"
    types = _llm_error_types()
    if types is not None and isinstance(exc, types[0]) and not isinstance(exc, types[1]):
        return "llm_error"
    return user_error_kind(stage)


def _where(exc: BaseException, fn: UserFunction) -> str:
    """`` (at metric.py:12)``: the last line of the user's file in the traceback."""
    where = ""
    tb = exc.__traceback__
    user_file = str(fn.path)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == user_file:
            where = f" (at {fn.path.name}:{tb.tb_lineno})"
        tb = tb.tb_next
    return where


def _describe(exc: BaseException, fn: UserFunction) -> str:
    """``score raised ValueError: ... (at metric.py:12)``: what, and where in the user's file."""
    if isinstance(exc, InvalidReturn):
        return str(exc)
    if isinstance(exc, SystemExit):
        return f"`{fn.name}` called exit({exc.code!r})"
    text = str(exc)
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 3] + "..."
    message = f"`{fn.name}` raised {type(exc).__name__}"
    where = _where(exc, fn)
    return f"{message}: {text}{where}" if text else message + where


#: ``raised``'s ``expected`` when the call's expected value is not at hand.
UNKNOWN: Any = object()


def raised(
    fn: UserFunction, stage: Stage, exc: BaseException, *, expected: Any = UNKNOWN
) -> ErrorInfo:
    """A call of ``fn`` raised ``exc`` (an ``Exception``, ``SystemExit``, or a
    ``KeyboardInterrupt`` out of user code in a thread). ``expected``: the example's
    expected value, named in the message of a ``KeyError`` out of ``score`` whose key it
    lacks (a misspelt or absent expected column reads as one)."""
    kind = kind_of(stage, exc)
    if not isinstance(exc, (Exception, SystemExit)):
        return ErrorInfo(kind, f"`{fn.name}` raised {type(exc).__name__}")
    try:
        message = _describe(exc, fn)
        if stage == "score" and isinstance(exc, KeyError) and expected is not UNKNOWN:
            message += _expected_keys(exc, expected)
        return ErrorInfo(kind, message)
    except Exception:  # an exception whose __str__ raises
        return ErrorInfo(kind, f"`{fn.name}` raised {type(exc).__name__}")


def _expected_keys(exc: KeyError, expected: Any) -> str:
    """What ``expected`` holds, when the missing key is not among its keys."""
    key = exc.args[0] if exc.args else None
    if expected is None:
        return "; this example's `expected` is None (its row has no expected values)"
    if not isinstance(expected, dict) or key in expected:
        return ""
    keys = ", ".join(repr(k) for k in list(expected)[:10]) or "none"
    return f"; `expected` has the keys {keys}"


def invalid_return(exc: InvalidReturn) -> ErrorInfo:
    """``score`` returned a value that breaks the contract's shape rules."""
    return ErrorInfo("invalid_return", str(exc))


def timed_out(stage: Stage, timeout: float, example_id: Any, how: str = "") -> ErrorInfo:
    """A call did not return within its timeout: the example, the limit, what the
    executor did about it (``how``, e.g. "; its thread was abandoned") and the fix."""
    return ErrorInfo(
        timeout_kind(stage),
        f"{_function(stage)} did not return within the {timeout:g} s timeout on example "
        f"{example_id!r}{how}; make it faster or raise `{_timeout_option(stage)}`",
    )


def blocked_loop(
    fn: UserFunction,
    stage: Stage,
    timeout: float,
    example_id: Any,
    held_s: float,
    where: str | None,
) -> ErrorInfo:
    """An async call held the event loop (a blocking call in ``async def``) for so long
    that it broke its timeout: how long, where, and the fix."""
    place = f" at {where}" if where else ""
    return ErrorInfo(
        timeout_kind(stage),
        f"{_function(stage)} did not return within the {timeout:g} s timeout on example "
        f"{example_id!r}: it held the event loop for {held_s:.3g} s at a time without "
        f"giving it back{place}; a blocking call in `async def` (time.sleep, a sync HTTP "
        "client, CPU work) stops every other call: await an async form, wrap it in "
        f"`await asyncio.to_thread(...)`, or make `{fn.name}` a plain `def`",
    )


def worker_died(fn: UserFunction, cause: str) -> ErrorInfo:
    """The worker process died (exit, signal) while running this call."""
    return ErrorInfo(
        "worker_crash",
        f"the worker process running `{fn.name}` on this example died ({cause}); the rest "
        "of its batch ran in a fresh worker",
    )


def memory_exceeded(name: str, limit_mb: int | None) -> ErrorInfo:
    """The call raised ``MemoryError`` under the worker's memory limit."""
    return ErrorInfo(
        "worker_crash",
        f"memory limit of {limit_mb} MB exceeded: `{name}` raised MemoryError under the "
        "worker's memory limit and its worker was replaced; use less memory or raise "
        "`memory_limit_mb`",
    )


def died_outside_call(attempts: int) -> ErrorInfo:
    """Workers kept dying while holding this call, outside the user's function."""
    return ErrorInfo(
        "worker_crash",
        f"worker processes died {attempts} times while holding this call outside the "
        "user's function (receiving or returning it); not retried",
    )


def workers_fail_to_start(cause: str, count: int, last_words: Sequence[str] = ()) -> ErrorInfo:
    """Worker processes keep dying before they are ready: no call can run. ``last_words``:
    the last lines the last of them wrote to stderr."""
    said = ""
    if last_words:
        said = "; the last one's stderr ended with:\n" + "\n".join(
            f"    {line}" for line in last_words
        )
    return ErrorInfo(
        "worker_crash",
        f"worker processes die while starting ({cause}); {count} in a row, not starting more{said}",
    )


def could_not_load(message: str) -> ErrorInfo:
    """A worker could not import the user's file (its own words, sent before it exited)."""
    return ErrorInfo("worker_crash", message)


def unsendable_arguments(fn: UserFunction, stage: Stage, exc: BaseException) -> ErrorInfo:
    """The call's arguments cannot be pickled to a worker process."""
    return ErrorInfo(
        user_error_kind(stage),
        f"the arguments of `{fn.name}` cannot be sent to a worker process "
        f"({type(exc).__name__}: {exc}); use picklable values or set EXECUTION = 'thread'",
    )


def unsendable_value(stage: Stage, exc: BaseException) -> ErrorInfo:
    """In the worker: the value the call returned cannot be pickled back."""
    return ErrorInfo(
        user_error_kind(stage),
        f"{_function(stage)} returned a value that cannot be sent back from the worker "
        f"process ({type(exc).__name__}: {exc}); return picklable values or set "
        "EXECUTION = 'thread'",
    )


def unreadable_arguments(fn: UserFunction, stage: Stage, why: str) -> ErrorInfo:
    """In the worker: the call's arguments, sent by the engine, cannot be unpickled there
    (``why``: the exception, in words)."""
    return ErrorInfo(
        user_error_kind(stage),
        f"the arguments of `{fn.name}` cannot be rebuilt in its worker process ({why}); "
        "pass plain data (dicts, lists, text, numbers) or objects of importable classes, or "
        "set EXECUTION = 'thread'",
    )


def unreadable_value(fn: UserFunction, stage: Stage, exc: BaseException) -> ErrorInfo:
    """In the engine: the value a worker sent back cannot be unpickled here."""
    return ErrorInfo(
        user_error_kind(stage),
        f"the value `{fn.name}` returned cannot be rebuilt in the engine's process "
        f"({type(exc).__name__}: {exc}); return picklable values of importable types or "
        "set EXECUTION = 'thread'",
    )


def missing_output(example_id: Any) -> ErrorInfo:
    """A score-only run met an example with no output to score."""
    return ErrorInfo(
        "missing_output",
        f"example {example_id!r} has no output: a score-only run (no program) scores each "
        "example's 'output' field; add \"output\" to the row, or give a program "
        "(--program; in Python, Evaluator(program=...)) to produce it",
    )


def no_outcome(stage: Stage) -> ErrorInfo:
    """An executor returned no outcome for this call: a bug of the engine's, counted
    against the example rather than losing it."""
    return ErrorInfo(
        "cancelled",
        f"the engine received no outcome for this call of {_function(stage)} (a bug of "
        "skynet-eval: please report it); the example is counted as an error, not lost",
    )


def lost_results(why: str) -> ErrorInfo:
    """A chunk of examples lost its results inside the engine (``why``)."""
    return ErrorInfo(
        "cancelled",
        f"this example got no result: {why} (a bug of skynet-eval: please report it); "
        "it is counted as an error, not lost",
    )


def closed_before_done(what: str) -> ErrorInfo:
    """The executor was closed while this call still waited for its outcome."""
    return ErrorInfo("cancelled", f"the {what} was closed before this call finished")


def ray_actors_lost(attempts: int) -> ErrorInfo:
    """The Ray node actors holding this call were lost (node died, actor killed) again
    and again before it finished."""
    return ErrorInfo(
        "worker_crash",
        f"the Ray actors holding this call were lost {attempts} times before it finished "
        "(their node died or they were killed); not retried",
    )


def ray_no_nodes(why: str) -> ErrorInfo:
    """No node of the Ray cluster is left to run this call."""
    return ErrorInfo(
        "worker_crash",
        f"no node of the Ray cluster is left to run this call ({why}); add nodes, or run "
        "with another `execution`",
    )


def ray_actor_failed(detail: str) -> ErrorInfo:
    """A node actor failed running a batch, outside the user's function."""
    return ErrorInfo("worker_crash", f"the Ray node actor failed running this call: {detail}")
