"""The failure vocabulary: every kind made in one place, each message saying what and how."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evaluator._call import _failures as failures
from evaluator._call._loader import UserFunction, load_function
from evaluator._call._results import ERROR_KINDS
from evaluator._exceptions import InvalidReturn
from llm_client import ClientClosedError, LLMError, ModelConfigError


@pytest.fixture
def fn(tmp_path: Path) -> UserFunction:
    path = tmp_path / "metric.py"
    path.write_text("def score(input, output, expected=None):\n    return 1.0, {'feedback': ''}\n")
    return load_function(path, "score")


class TestKindOf:
    @pytest.mark.parametrize(
        ("stage", "kind"), [("run", "program_error"), ("score", "metric_error")]
    )
    def test_the_users_error_follows_the_stage(self, stage: str, kind: str) -> None:
        """An exception of the user's code is the stage's own error kind."""
        assert failures.kind_of(stage, ValueError("x")) == kind  # type: ignore[arg-type]

    def test_a_model_call_given_up_is_llm_error(self) -> None:
        """An LLMError (a model call given up) is llm_error in either stage."""
        assert failures.kind_of("run", LLMError("quota", status=429)) == "llm_error"
        assert failures.kind_of("score", LLMError("timed out")) == "llm_error"

    @pytest.mark.parametrize(
        "error", [ClientClosedError("use it inside async with"), ModelConfigError("bad rpm")]
    )
    def test_model_client_usage_errors_are_not_llm_error(self, error: Exception) -> None:
        """A misused or misconfigured model client is the user's code failing, whatever
        its base classes, never llm_error."""
        assert failures.kind_of("score", error) == "metric_error"
        assert failures.kind_of("run", error) == "program_error"

    def test_invalid_return(self) -> None:
        """The contract's return-value error is invalid_return."""
        assert failures.kind_of("score", InvalidReturn("no pair")) == "invalid_return"

    def test_classifying_never_imports_the_model_client(self) -> None:
        """Naming a failure in a process without the model client does not import it (it
        takes long enough to push a worker's call past its timeout)."""
        code = (
            "import sys\n"
            "from evaluator._call._failures import kind_of\n"
            "assert kind_of('score', ValueError('x')) == 'metric_error'\n"
            "sys.exit(1 if 'llm_client._client' in sys.modules else 0)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


class TestMessages:
    @pytest.mark.parametrize(
        ("stage", "kind", "option"),
        [("run", "program_timeout", "program_timeout"), ("score", "metric_timeout", "timeout")],
    )
    def test_a_timeout_names_the_example_the_limit_and_the_fix(
        self, stage: str, kind: str, option: str
    ) -> None:
        """Every executor's timeout reads the same: which call, which example, the limit,
        what the executor did, and the option to raise."""
        error = failures.timed_out(stage, 2.5, "q17", "; its thread was abandoned")  # type: ignore[arg-type]
        assert error.kind == kind
        assert error.message == (
            f"`{'run' if stage == 'run' else 'score'}` did not return within the 2.5 s timeout "
            f"on example 'q17'; its thread was abandoned; make it faster or raise `{option}`"
        )

    def test_a_crash_names_the_cause(self, fn: UserFunction) -> None:
        """A worker crash names the function and how its worker ended."""
        error = failures.worker_died(fn, "killed by SIGSEGV")
        assert error.kind == "worker_crash"
        assert "`score`" in error.message and "killed by SIGSEGV" in error.message

    def test_values_that_cannot_cross_say_how_to_fix_it(self, fn: UserFunction) -> None:
        """Arguments or values that cannot cross the process boundary are the stage's own
        error and suggest EXECUTION = 'thread'."""
        exc = TypeError("cannot pickle 'generator'")
        for error in (
            failures.unsendable_arguments(fn, "score", exc),
            failures.unsendable_value("score", exc),
            failures.unreadable_value(fn, "score", exc),
        ):
            assert error.kind == "metric_error"
            assert "cannot pickle" in error.message and "EXECUTION = 'thread'" in error.message

    def test_missing_output_names_the_example_and_the_fix(self) -> None:
        """A score-only example without an output says which one and what to add."""
        error = failures.missing_output("b")
        assert error.kind == "missing_output"
        assert "'b'" in error.message and "--program" in error.message


def test_budget_exhausted_says_why_and_how_to_raise_it() -> None:
    """An example its budget left unevaluated: which, why, and the fix in both spellings."""
    error = failures.budget_exhausted("e7", "the budget's 3 calls are spent (3 of 3 calls)")
    assert error.kind == "budget_exhausted"
    assert "'e7'" in error.message and "3 of 3 calls" in error.message
    assert "Budget(" in error.message and "--max-calls" in error.message


def test_every_kind_is_made_here(fn: UserFunction) -> None:
    """Every error kind of ERROR_KINDS is built by this module, and nothing else."""
    made = {
        failures.raised(fn, "run", ValueError()).kind,
        failures.raised(fn, "score", ValueError()).kind,
        failures.raised(fn, "score", LLMError("x")).kind,
        failures.invalid_return(InvalidReturn("x")).kind,
        failures.timed_out("run", 1, 0).kind,
        failures.timed_out("score", 1, 0).kind,
        failures.worker_died(fn, "x").kind,
        failures.memory_exceeded("score", 10).kind,
        failures.died_outside_call(3).kind,
        failures.workers_fail_to_start("x", 3).kind,
        failures.could_not_load("x").kind,
        failures.missing_output(0).kind,
        failures.closed_before_done("process executor").kind,
        failures.budget_exhausted(0, "x").kind,
    }
    assert made == set(ERROR_KINDS)
