"""The execution kinds: one definition for the loader, the options, the CLI and the
executors, and one function that says which kind can run which function."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

import pytest

from evaluator._call._kinds import EXECUTIONS, ExecutionKind, refusal
from evaluator._call._loader import UserFunction, load_metric
from evaluator._cli._main import build_parser
from evaluator._exceptions import ConfigError
from evaluator._executors._base import ExecutorOptions, check_executor
from evaluator._executors._factory import open_executor
from evaluator._pipeline import choose_execution

SOURCES = Path(__file__).resolve().parents[1] / "sources"


@pytest.fixture(scope="module")
def sync_fn() -> UserFunction:
    return load_metric(SOURCES / "exact.py")


@pytest.fixture(scope="module")
def async_fn() -> UserFunction:
    return load_metric(SOURCES / "async_behaviours.py")


def _choices(parser: argparse.ArgumentParser) -> dict[str, tuple[str, ...]]:
    """The choices of every ``--*execution`` flag of every command, by command and flag."""
    found: dict[str, tuple[str, ...]] = {}
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for command, sub in action.choices.items():  # type: ignore[union-attr]
            for flag in sub._actions:
                if any(name.endswith("execution") for name in flag.option_strings):
                    found[f"{command} {flag.option_strings[0]}"] = tuple(flag.choices or ())
    return found


class TestExecutions:
    def test_the_tuple_is_the_literal(self) -> None:
        """EXECUTIONS lists exactly the kinds of the ExecutionKind type, once each."""
        assert get_args(ExecutionKind) == EXECUTIONS
        assert len(set(EXECUTIONS)) == len(EXECUTIONS)

    def test_the_command_line_offers_every_kind(self) -> None:
        """Every command's --execution and --program-execution offer exactly the kinds."""
        found = _choices(build_parser())
        assert {"run --execution", "run --program-execution"} <= set(found)
        assert set(found.values()) == {EXECUTIONS}

    def test_the_loader_refuses_another(self, tmp_path: Path) -> None:
        """A file's EXECUTION outside the kinds is refused, listing every kind."""
        from evaluator._exceptions import ContractError

        path = tmp_path / "m.py"
        path.write_text("EXECUTION = 'gpu'\ndef score(i, o):\n    pass\n")
        with pytest.raises(ContractError) as info:
            load_metric(path)
        assert all(repr(kind) in info.value.message for kind in EXECUTIONS)


class TestRefusal:
    def test_what_each_function_can_run_in(
        self, sync_fn: UserFunction, async_fn: UserFunction
    ) -> None:
        """A plain def runs in every kind but "async"; an async def only there."""
        assert [k for k in EXECUTIONS if refusal(sync_fn, k) is None] == [
            k for k in EXECUTIONS if k != "async"
        ]
        assert [k for k in EXECUTIONS if refusal(async_fn, k) is None] == ["async"]

    def test_words(self, sync_fn: UserFunction, async_fn: UserFunction) -> None:
        """Each refusal says what was chosen, what the function is, and what to use."""
        unknown = refusal(sync_fn, "dask")
        assert unknown is not None and unknown.endswith("got 'dask'")
        assert all(repr(kind) in unknown for kind in EXECUTIONS)
        awaited = refusal(async_fn, "thread")
        assert awaited is not None and "`async def`" in awaited and "use 'async'" in awaited
        plain = refusal(sync_fn, "async")
        assert plain is not None and "plain `def`" in plain
        assert all(repr(kind) in plain for kind in EXECUTIONS if kind != "async")

    @pytest.mark.parametrize(("which", "kind"), [("async", "thread"), ("sync", "async")])
    def test_one_decision_for_the_evaluator_and_the_executors(
        self, sync_fn: UserFunction, async_fn: UserFunction, which: str, kind: ExecutionKind
    ) -> None:
        """The Evaluator's choice, the factory and an executor refuse a mismatch in the
        same words: one function decides."""
        fn = async_fn if which == "async" else sync_fn
        problems = []
        with pytest.raises(ConfigError) as chosen:
            choose_execution(fn, kind, option="execution")
        problems.append(chosen.value.problem)
        with pytest.raises(ConfigError) as opened:
            open_executor(fn, "score", kind, ExecutorOptions(timeout=1.0))
        problems.append(opened.value.problem)
        with pytest.raises(ConfigError) as checked:
            check_executor(fn, "score", kind, 1.0)
        problems.append(checked.value.problem)
        assert problems == [refusal(fn, kind)] * 3
