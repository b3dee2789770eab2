"""The executor interface: where user calls run, and what every executor promises.

An executor is owned by an ``Evaluator`` for one user function and one stage, opened with
``async with`` inside the running loop (by :func:`evaluator._executors._factory.
open_executor`), and given calls in batches. Whatever the user function does (raise,
hang, crash its worker, return garbage), :meth:`Executor.submit` returns exactly one
:class:`Outcome` per call, in order, with the timeout enforced per call; a cancelled
``submit`` returns at once and leaves the executor usable.

Every executor says how many calls it runs at once (:attr:`Executor.parallelism`): the
pipeline keeps that many busy, and never guesses it from the executor's kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self

import msgspec

from .._calls import Call, LLMHandler, Outcome
from .._context import Stage
from .._exceptions import ConfigError
from .._loader import UserFunction
from .._options import validate_count, validate_timeout

__all__ = [
    "ExecutionKind",
    "Executor",
    "ExecutorOptions",
    "ExecutorStatistics",
    "check_executor",
]

ExecutionKind = Literal["process", "thread", "async", "inline"]


class ExecutorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one executor; each kind adds its own details to this common shape."""

    kind: ExecutionKind
    stage: Stage
    parallelism: int
    """How many calls it runs at once."""
    calls: int = 0
    """Calls that ended with an outcome of their own (ok or failed)."""
    timeouts: int = 0
    """Calls stopped at the timeout."""
    busy: int = 0
    """Calls running now."""

    @property
    def workers(self) -> int:
        """The same as :attr:`parallelism` (threads, worker processes, or the async bound)."""
        return self.parallelism


class Executor(Protocol):
    """Runs calls of one user function for one stage; see the module docstring."""

    @property
    def kind(self) -> ExecutionKind:
        """Where calls run: "async", "thread", "inline" or "process"."""
        ...

    @property
    def stage(self) -> Stage:
        """The stage whose calls it runs: "run" (the program) or "score" (the metric)."""
        ...

    @property
    def parallelism(self) -> int:
        """How many calls it runs at once: threads, the async bound, worker processes."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def submit(self, calls: Sequence[Call]) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe."""
        ...

    def statistics(self) -> ExecutorStatistics:
        """A frozen snapshot of what it has run so far."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorOptions:
    """How an executor is opened: the per-call timeout and its sizing options.

    ``workers`` sizes a thread pool or the worker processes (None: the executor's own
    default), ``model_budget`` is the calls in flight the stage's model allows when the
    function is model-bound (a thread pool runs that many threads unless ``workers``
    says otherwise), ``concurrency`` bounds the async executor's calls at once and a
    thread pool's size, ``max_calls_per_worker`` and ``memory_limit_mb`` apply to worker
    processes, and ``llm_handler`` answers ``skynet.llm`` from the calls (None: no model).
    """

    timeout: float
    workers: int | None = None
    model_budget: int | None = None
    concurrency: int | None = None
    max_calls_per_worker: int | None = None
    memory_limit_mb: int | None = None
    llm_handler: LLMHandler | None = None

    def __post_init__(self) -> None:
        validate_timeout(self.timeout, "timeout", upper=None)
        validate_count(self.workers, "workers")
        validate_count(self.model_budget, "model_budget")
        validate_count(self.concurrency, "concurrency")
        validate_count(self.max_calls_per_worker, "max_calls_per_worker")
        validate_count(self.memory_limit_mb, "memory_limit_mb")


def check_executor(fn: UserFunction, stage: Any, kind: ExecutionKind, timeout: Any) -> float:
    """Refuse a stage, a function or a timeout that ``kind`` cannot run; the timeout.

    Raises :class:`ConfigError` naming the parameter, the value and the fix.
    """
    if stage not in ("run", "score"):
        raise ConfigError(f"must be 'run' or 'score', got {stage!r}", option="stage", value=stage)
    if fn.is_async and kind != "async":
        raise ConfigError(
            f"is {kind!r} but `{fn.name}` in {fn.path} is `async def`: an async function is "
            "awaited on the event loop; use 'async'",
            option="execution",
            value=kind,
        )
    if not fn.is_async and kind == "async":
        raise ConfigError(
            f"is 'async' but `{fn.name}` in {fn.path} is a plain `def`; define it with "
            "`async def`, or use 'thread', 'process' or 'inline'",
            option="execution",
            value=kind,
        )
    return validate_timeout(timeout, "timeout", upper=None)
