"""The executor interface, as every kind implements it: opened by one factory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._calls import ScoreCall
from evaluator._call._loader import UserFunction, load_metric
from evaluator._executors._async import (
    ASYNC_CONCURRENCY,
    AsyncExecutor,
    AsyncExecutorStatistics,
)
from evaluator._executors._base import ExecutorBase, ExecutorOptions, ExecutorStatistics
from evaluator._executors._factory import open_executor
from evaluator._executors._process._executor import ProcessExecutor, ProcessExecutorStatistics
from evaluator._executors._threads import (
    InlineExecutor,
    ThreadExecutor,
    ThreadExecutorStatistics,
)

SOURCES = Path(__file__).resolve().parents[1] / "sources"

#: kind -> (executor class, statistics class, parallelism)
KINDS: dict[str, tuple[type[Any], type[Any], int | None]] = {
    "async": (AsyncExecutor, AsyncExecutorStatistics, ASYNC_CONCURRENCY),
    "thread": (ThreadExecutor, ThreadExecutorStatistics, min(64, (os.cpu_count() or 1) * 8)),
    "inline": (InlineExecutor, ThreadExecutorStatistics, 1),
    "process": (ProcessExecutor, ProcessExecutorStatistics, os.cpu_count()),
}


def _metric(tmp_path: Path, execution: str) -> UserFunction:
    name = "async_behaviours.py" if execution == "async" else "behaviours.py"
    path = tmp_path / f"{execution}_{name}"
    path.write_text((SOURCES / name).read_text())
    return load_metric(path)


def _calls(kinds: list[str]) -> list[ScoreCall]:
    return [
        ScoreCall(i, f"e{i}", {"kind": kind, "n": i}, "a", {"label": "a"})
        for i, kind in enumerate(kinds)
    ]


@pytest.mark.parametrize("execution", list(KINDS))
class TestEveryExecutor:
    async def test_opened_by_the_factory_with_its_own_parallelism(
        self, tmp_path: Path, execution: str
    ) -> None:
        """open_executor gives the kind's executor, which says its kind, stage and how many
        calls it runs at once, and returns one outcome per call in order."""
        cls, stats_cls, parallelism = KINDS[execution]
        executor: Any = open_executor(
            _metric(tmp_path, execution), "score", execution, ExecutorOptions(timeout=10)
        )
        assert type(executor) is cls
        assert (executor.kind, executor.stage, executor.parallelism) == (
            execution,
            "score",
            parallelism,
        )
        async with executor:
            outcomes = await executor.submit(_calls(["ok", "raise", "invalid", "ok"]))
            assert await executor.submit([]) == []
            stats = executor.statistics()
        assert [o.error.kind if o.error else "ok" for o in outcomes] == [
            "ok",
            "metric_error",
            "invalid_return",
            "ok",
        ]
        assert type(stats) is stats_cls and isinstance(stats, ExecutorStatistics)
        assert (stats.kind, stats.stage, stats.parallelism, stats.workers) == (
            execution,
            "score",
            parallelism,
            parallelism,
        )
        assert stats.calls == 4 and stats.timeouts == 0 and stats.busy == 0
        with pytest.raises(AttributeError):
            stats.calls = 0  # type: ignore[misc]

    async def test_used_only_inside_its_lifetime(self, tmp_path: Path, execution: str) -> None:
        """An executor refuses calls before it is entered and after it is closed, and
        cannot be entered twice."""
        executor: Any = open_executor(
            _metric(tmp_path, execution), "score", execution, ExecutorOptions(timeout=10)
        )
        with pytest.raises(RuntimeError, match="async with"):
            await executor.submit(_calls(["ok"]))
        async with executor:
            pass
        with pytest.raises(RuntimeError):
            await executor.submit(_calls(["ok"]))
        with pytest.raises(RuntimeError):
            async with executor:
                pass


def test_options_reach_the_executor(tmp_path: Path) -> None:
    """The factory passes each option to the executor that uses it."""
    sync = _metric(tmp_path, "thread")
    asynchronous = _metric(tmp_path, "async")
    assert (
        open_executor(sync, "score", "thread", ExecutorOptions(timeout=1, workers=3)).parallelism
        == 3
    )
    assert (
        open_executor(
            asynchronous, "score", "async", ExecutorOptions(timeout=1, concurrency=7)
        ).parallelism
        == 7
    )
    process: Any = open_executor(
        sync,
        "run",
        "process",
        ExecutorOptions(timeout=1, workers=2, max_calls_per_worker=5, memory_limit_mb=100),
    )
    assert (process.parallelism, process.stage, process._max_calls, process._memory_limit_mb) == (
        2,
        "run",
        5,
        100,
    )


class TestWorkerCounts:
    def test_absurd_process_counts_are_refused_naming_the_limit(self) -> None:
        """More worker processes than 8 per core is refused, the limit and the cores
        named; a count within it passes."""
        from evaluator._exceptions import ConfigError
        from evaluator._executors._base import PROCESSES_PER_CORE, check_workers

        limit = PROCESSES_PER_CORE * (os.cpu_count() or 1)
        assert check_workers(limit, "process") == limit
        with pytest.raises(ConfigError) as info:
            check_workers(100_000, "process")
        assert info.value.option == "workers"
        assert f"at most {limit} for worker processes" in str(info.value)
        assert "got 100000" in str(info.value)

    def test_thread_counts_have_their_own_limit(self) -> None:
        """Threads allow more than processes, up to MAX_THREADS."""
        from evaluator._exceptions import ConfigError
        from evaluator._executors._base import MAX_THREADS, check_workers

        assert check_workers(MAX_THREADS, "thread") == MAX_THREADS
        with pytest.raises(ConfigError, match=f"at most {MAX_THREADS} threads"):
            check_workers(MAX_THREADS + 1, "thread")

    async def test_an_executor_refuses_before_starting_anything(self, tmp_path: Path) -> None:
        """A ProcessExecutor with an absurd count fails when built: no process started."""
        from evaluator._exceptions import ConfigError

        with pytest.raises(ConfigError, match="worker processes"):
            open_executor(
                _metric(tmp_path, "process"),
                "score",
                "process",
                ExecutorOptions(timeout=10, workers=100_000),
            )

    def test_fit_workers_caps_at_the_examples(self) -> None:
        """fit_workers caps a sane count at the examples, passes an absurd one on to be
        refused as given, and leaves the default alone."""
        from evaluator._executors._base import fit_workers

        assert fit_workers(None, 3) is None
        assert fit_workers(2, 1) == 1 and fit_workers(2, 40) == 2
        assert fit_workers(100_000, 40) == 100_000


class TestRegistry:
    def test_every_kind_has_its_executor(self) -> None:
        """The factory's registry holds one executor class per kind, which says that kind
        and shares the one lifecycle."""
        from evaluator._call._kinds import EXECUTIONS
        from evaluator._executors._base import ExecutorBase
        from evaluator._executors._factory import EXECUTORS, executor_class

        assert tuple(EXECUTORS) == EXECUTIONS
        for kind in EXECUTIONS:
            cls = executor_class(kind)
            assert issubclass(cls, ExecutorBase) and cls.kind == kind

    def test_each_kind_takes_options_by_their_names(self) -> None:
        """Every option an executor says it takes is an ExecutorOptions field and a
        keyword of its constructor, so the factory hands it over by name."""
        import dataclasses
        import inspect

        from evaluator._executors._factory import EXECUTORS, executor_class

        fields = {f.name for f in dataclasses.fields(ExecutorOptions)}
        for kind in EXECUTORS:
            cls = executor_class(kind)
            keywords = set(inspect.signature(cls.__init__).parameters)
            assert set(cls.OPTIONS) <= fields & keywords, kind


class _Recorder(ExecutorBase):
    """An executor that only records its hooks (the lifecycle, without calls)."""

    kind = "inline"

    def __init__(self, fn: UserFunction, fail_open: bool = False) -> None:
        super().__init__(fn, "score", 1.0)
        self.fail_open = fail_open
        self.hooks: list[str] = []

    async def _open(self) -> None:
        self.hooks.append("open")
        if self.fail_open:
            raise OSError("cannot start")

    async def _close(self) -> None:
        self.hooks.append("close")


class TestExecutorBase:
    async def test_opened_once_closed_once(self, tmp_path: Path) -> None:
        """The hooks run once each, in order, however often the executor is exited; it
        refuses to be entered again, and refuses use outside its block."""
        executor = _Recorder(_metric(tmp_path, "inline"))
        with pytest.raises(RuntimeError, match="async with"):
            executor._check_open()
        async with executor:
            executor._check_open()
        await executor.__aexit__(None, None, None)
        assert executor.hooks == ["open", "close"]
        with pytest.raises(RuntimeError, match="closed"):
            executor._check_open()
        with pytest.raises(RuntimeError, match="only once"):
            await executor.__aenter__()

    async def test_a_failed_opening_closes(self, tmp_path: Path) -> None:
        """An _open that raises is followed by _close before the error goes on."""
        executor = _Recorder(_metric(tmp_path, "inline"), fail_open=True)
        with pytest.raises(OSError, match="cannot start"):
            await executor.__aenter__()
        assert executor.hooks == ["open", "close"]

    async def test_never_opened_is_never_closed(self, tmp_path: Path) -> None:
        """Exiting an executor never entered closes nothing, and it stays closed."""
        executor = _Recorder(_metric(tmp_path, "inline"))
        await executor.__aexit__(None, None, None)
        assert executor.hooks == []
        with pytest.raises(RuntimeError, match="only once"):
            await executor.__aenter__()

    def test_checks_and_defaults(self, tmp_path: Path) -> None:
        """The function, stage and timeout are checked for the subclass's kind; a local
        executor wants no backlog and cannot tell when it is idle."""
        from evaluator._exceptions import ConfigError

        executor = _Recorder(_metric(tmp_path, "inline"))
        assert (executor.timeout, executor.stage, executor.backlog_s, executor.idle) == (
            1.0,
            "score",
            0.0,
            False,
        )
        with pytest.raises(ConfigError, match="async def"):
            _Recorder(_metric(tmp_path, "async"))
