"""The one way the engine opens an executor: :func:`open_executor`."""

from __future__ import annotations

from typing import get_args

from .._context import Stage
from .._exceptions import ConfigError
from .._loader import UserFunction
from ._async import ASYNC_CONCURRENCY, AsyncExecutor
from ._base import ExecutionKind, Executor, ExecutorOptions
from ._threads import InlineExecutor, ThreadExecutor

__all__ = ["open_executor"]

KINDS: tuple[str, ...] = get_args(ExecutionKind)


def open_executor(
    fn: UserFunction, stage: Stage, execution: str, options: ExecutorOptions
) -> Executor:
    """The executor of kind ``execution`` for ``fn`` in ``stage``, ready for ``async with``.

    Raises :class:`ConfigError` for an unknown kind, a function the kind cannot run
    (an ``async def`` anywhere but "async", a plain ``def`` there) or a bad option.
    """
    if execution == "async":
        return AsyncExecutor(
            fn,
            stage,
            timeout=options.timeout,
            concurrency=options.concurrency or max(ASYNC_CONCURRENCY, options.model_budget or 0),
            llm_handler=options.llm_handler,
        )
    if execution == "thread":
        return ThreadExecutor(
            fn,
            stage,
            timeout=options.timeout,
            workers=options.workers,
            model_budget=options.model_budget,
            concurrency=options.concurrency,
            llm_handler=options.llm_handler,
            model_limit=options.model_limit if options.model_budget is not None else None,
        )
    if execution == "inline":
        return InlineExecutor(fn, stage, timeout=options.timeout, llm_handler=options.llm_handler)
    if execution == "process":
        from ._process._executor import ProcessExecutor

        return ProcessExecutor(
            fn,
            stage,
            timeout=options.timeout,
            workers=options.workers,
            llm_handler=options.llm_handler,
            max_calls_per_worker=options.max_calls_per_worker,
            memory_limit_mb=options.memory_limit_mb,
        )
    if execution == "ray":
        from ._ray._executor import RayExecutor

        return RayExecutor(
            fn,
            stage,
            timeout=options.timeout,
            workers=options.workers,
            llm_handler=options.llm_handler,
            max_calls_per_worker=options.max_calls_per_worker,
            memory_limit_mb=options.memory_limit_mb,
            address=options.ray_address,
        )
    raise ConfigError(
        f"must be one of {', '.join(map(repr, KINDS))}, got {execution!r}",
        option="execution",
        value=execution,
    )
