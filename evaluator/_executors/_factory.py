"""The one way the engine opens an executor: :func:`open_executor`, over a registry."""

from __future__ import annotations

import importlib
from typing import cast

from .._call._context import Stage
from .._call._kinds import ExecutionKind, refusal
from .._call._loader import UserFunction
from .._exceptions import ConfigError
from ._base import Executor, ExecutorBase, ExecutorOptions

__all__ = ["EXECUTORS", "executor_class", "open_executor"]

#: Each kind's executor, as (module, class): imported when first opened, so that a run
#: that uses neither loads no process pool and no Ray.
EXECUTORS: dict[ExecutionKind, tuple[str, str]] = {
    "process": ("._process._executor", "ProcessExecutor"),
    "thread": ("._threads", "ThreadExecutor"),
    "async": ("._async", "AsyncExecutor"),
    "inline": ("._threads", "InlineExecutor"),
    "ray": ("._ray._executor", "RayExecutor"),
}


def executor_class(kind: ExecutionKind) -> type[ExecutorBase]:
    """The executor class of ``kind`` (see :data:`EXECUTORS`)."""
    module, name = EXECUTORS[kind]
    return cast(type[ExecutorBase], getattr(importlib.import_module(module, __package__), name))


def open_executor(
    fn: UserFunction, stage: Stage, execution: str, options: ExecutorOptions
) -> Executor:
    """The executor of kind ``execution`` for ``fn`` in ``stage``, ready for ``async with``.

    Raises :class:`ConfigError` for an unknown kind, a function the kind cannot run
    (an ``async def`` anywhere but "async", a plain ``def`` there) or a bad option.
    """
    problem = refusal(fn, execution)
    if problem is not None:
        raise ConfigError(problem, option="execution", value=execution)
    kind = cast(ExecutionKind, execution)
    return cast(Executor, executor_class(kind).from_options(fn, stage, options))
