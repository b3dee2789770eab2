"""The executor interface: where user calls run, and what every executor promises.

An executor is owned by an ``Evaluator`` for one user function and one stage, opened with
``async with`` inside the running loop (by :func:`evaluator._executors._factory.
open_executor`), and given calls in batches. Whatever the user function does (raise,
hang, crash its worker, return garbage), :meth:`Executor.submit` returns exactly one
:class:`Outcome` per call, in order, with the timeout enforced per call; a cancelled
``submit`` returns at once and leaves the executor usable.

Every executor says how many calls it runs at once (:attr:`Executor.parallelism`): the
pipeline keeps that many busy, and never guesses it from the executor's kind. An
executor that can tells the pipeline, while a submit runs, how many of its calls are
done (:data:`Progress`): a submit held up by one slow call (a hang waiting out its
timeout) then stops counting its finished calls as work in progress, and the pipeline
gives the idle workers more.

Every executor derives from :class:`ExecutorBase`, which holds what they share: the
checks of the function, stage and timeout, the lifetime (entered once, used while open,
closed once; a failed opening closes again) and the defaults of :attr:`Executor.backlog_s`
and :attr:`Executor.idle`, and how the factory builds one from :class:`ExecutorOptions`.
Each kind adds its own ``_open``, ``_close``, ``submit`` and ``statistics``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, Self, TypeVar

import msgspec

from .._call._calls import Call, LLMHandler, Outcome
from .._call._context import Stage
from .._call._kinds import ExecutionKind, refusal
from .._call._loader import UserFunction
from .._exceptions import ConfigError
from .._options import validate_count, validate_ray_address, validate_timeout

__all__ = [
    "MAX_THREADS",
    "PROCESSES_PER_CORE",
    "Executor",
    "ExecutorBase",
    "ExecutorOptions",
    "ExecutorStatistics",
    "Progress",
    "check_executor",
    "check_workers",
    "fit_workers",
]

#: Worker processes at most per core: each is a whole interpreter (tens of MB, a start-up
#: of a third of a second), and more than a few per core only makes them queue for CPU.
PROCESSES_PER_CORE = 8
#: Threads at most: enough for a model-bound stage's concurrency, far from the point
#: where the operating system refuses to start one.
MAX_THREADS = 4096

#: ``progress(k)``: ``k`` more calls of a running submit have their outcomes. Called on
#: the event loop, before the submit returns, never for more calls than it has; the
#: calls whose outcomes arrive with its return need not be reported. Must not raise.
Progress = Callable[[int], None]


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
        """Where calls run: one of :data:`evaluator._call._kinds.EXECUTIONS`."""
        ...

    @property
    def stage(self) -> Stage:
        """The stage whose calls it runs: "run" (the program) or "score" (the metric)."""
        ...

    @property
    def parallelism(self) -> int:
        """How many calls it runs at once: threads, the async bound, worker processes."""
        ...

    @property
    def backlog_s(self) -> float:
        """Seconds of work it wants queued, beyond the calls it runs, to stay busy: 0 for
        the local executors (a call starts within microseconds of its submit); the Ray
        executor's round trips to its nodes need a backlog to hide behind."""
        ...

    @property
    def idle(self) -> bool:
        """A worker is free and no call waits for one: more work would start at once.
        Where an executor cannot tell cheaply, False. The pipeline feeds an idle stage
        beyond its in-flight bound (within a memory bound) when the calls it counts as
        busy are held up behind a slow one."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def submit(
        self, calls: Sequence[Call], progress: Progress | None = None
    ) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe. ``progress``, if
        given, is told of finished calls as they finish, where the executor can."""
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
    processes, ``llm_handler`` answers ``skynet.llm`` from the calls (None: no model), and
    ``ray_address`` is the Ray cluster of "ray" (None: a local instance).
    ``model_limit`` reads the stage's model's in-flight limit now (None: no model): a
    model-bound thread pool runs as many calls at once as it says, within its size.
    """

    timeout: float
    workers: int | None = None
    model_budget: int | None = None
    concurrency: int | None = None
    max_calls_per_worker: int | None = None
    memory_limit_mb: int | None = None
    llm_handler: LLMHandler | None = None
    ray_address: str | None = None
    model_limit: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        validate_timeout(self.timeout, "timeout", upper=None)
        validate_count(self.workers, "workers")
        validate_count(self.model_budget, "model_budget")
        validate_count(self.concurrency, "concurrency")
        validate_count(self.max_calls_per_worker, "max_calls_per_worker")
        validate_count(self.memory_limit_mb, "memory_limit_mb")
        validate_ray_address(self.ray_address)


#: Where an executor is in its lifetime: never reopened once closed.
Lifetime = Literal["new", "open", "closed"]
_S = TypeVar("_S", bound=ExecutorStatistics)


class ExecutorBase:
    """What every executor shares: the checked function, stage and timeout, and the
    lifetime of an ``async with`` object that refuses to reopen.

    A subclass sets :attr:`kind` and :attr:`OPTIONS`, implements ``submit`` and
    ``statistics``, and overrides the ``_open`` and ``_close`` hooks (and
    :attr:`backlog_s`, :attr:`idle`) where it needs to. ``_open`` runs with the
    executor already open; if it raises, ``_close`` runs before the error goes on.
    ``_close`` runs once, for an executor that was opened, however often it is exited.
    """

    kind: ClassVar[ExecutionKind]
    #: The fields of :class:`ExecutorOptions` its constructor takes, by the same names,
    #: beside ``timeout``.
    OPTIONS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, fn: UserFunction, stage: Stage, timeout: Any) -> None:
        self.timeout = check_executor(fn, stage, self.kind, timeout)
        self.fn = fn
        self.stage: Stage = stage
        self._state: Lifetime = "new"

    @classmethod
    def from_options(cls, fn: UserFunction, stage: Stage, options: ExecutorOptions) -> Self:
        """The executor for ``fn`` in ``stage`` with the options it uses (:attr:`OPTIONS`):
        the factory's way to build one."""
        taken = {name: getattr(options, name) for name in cls.OPTIONS}
        return cls(fn, stage, timeout=options.timeout, **taken)

    @property
    def parallelism(self) -> int:
        """How many calls it runs at once (see :class:`Executor`)."""
        raise NotImplementedError

    @property
    def backlog_s(self) -> float:
        """0: a call starts within microseconds of its submit (see :class:`Executor`)."""
        return 0.0

    @property
    def idle(self) -> bool:
        """False: the in-flight bound keeps a large parallelism fed (see :class:`Executor`)."""
        return False

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError(
                f"a {type(self).__name__} can be entered only once; create a new one for a new run"
            )
        self._state = "open"
        try:
            await self._open()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        opened = self._state == "open"
        self._state = "closed"
        if opened:
            await self._close()

    async def _open(self) -> None:
        """Start what the executor needs, inside the running loop."""

    async def _close(self) -> None:
        """Stop and release everything it started; no call may be left running."""

    def _snapshot(self, cls: type[_S], **fields: Any) -> _S:
        """A statistics struct of ``cls``: the fields every kind has, and ``fields``."""
        return cls(kind=self.kind, stage=self.stage, parallelism=self.parallelism, **fields)

    def _check_open(self) -> None:
        """Refuse a submit before ``async with`` or after the block."""
        if self._state != "open":
            name = type(self).__name__
            raise RuntimeError(
                f"the {name} is closed"
                if self._state == "closed"
                else f"enter the {name} with `async with` before submitting"
            )


def check_executor(fn: UserFunction, stage: Any, kind: ExecutionKind, timeout: Any) -> float:
    """Refuse a stage, a function or a timeout that ``kind`` cannot run (the function:
    :func:`evaluator._call._kinds.refusal`, as the Evaluator's choice does); the timeout.

    Raises :class:`ConfigError` naming the parameter, the value and the fix.
    """
    if stage not in ("run", "score"):
        raise ConfigError(f"must be 'run' or 'score', got {stage!r}", option="stage", value=stage)
    problem = refusal(fn, kind)
    if problem is not None:
        raise ConfigError(problem, option="execution", value=kind)
    return validate_timeout(timeout, "timeout", upper=None)


def check_workers(workers: Any, kind: ExecutionKind) -> int | None:
    """``workers`` for an executor of ``kind``: a positive integer within the kind's
    limit (or None, the executor's default).

    An absurd count (``--workers 100000``) is refused with the limit named, before a
    single process or thread starts.
    """
    count = validate_count(workers, "workers")
    if count is None:
        return None
    if kind == "process":
        cores = os.cpu_count() or 1
        limit = PROCESSES_PER_CORE * cores
        if count > limit:
            raise ConfigError(
                f"must be at most {limit} for worker processes ({PROCESSES_PER_CORE} per "
                f"core, {cores} cores here), got {count}; each worker is a whole Python "
                "interpreter: use fewer (the default is one per core), or threads for "
                "code that waits on the network",
                option="workers",
                value=workers,
            )
    elif count > MAX_THREADS:
        raise ConfigError(
            f"must be at most {MAX_THREADS} threads, got {count}; use fewer",
            option="workers",
            value=workers,
        )
    return count


def fit_workers(workers: int | None, examples: int) -> int | None:
    """``workers`` for a run of ``examples`` known in advance (the command line): never
    more than the examples can use, since a process pool starts all its interpreters at
    once (a thread pool starts threads as calls need them).

    A count above what worker processes allow is passed on unchanged, so that the
    executor refuses the value the user gave (:func:`check_workers`), not a capped one.
    """
    if workers is None or isinstance(workers, bool) or not isinstance(workers, int):
        return workers
    if workers > PROCESSES_PER_CORE * (os.cpu_count() or 1):
        return workers
    return max(1, min(workers, examples))
