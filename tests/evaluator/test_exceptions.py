"""The engine's exceptions: the drawn hierarchy, and each one pickling itself whole."""

from __future__ import annotations

import errno
import pickle
from pathlib import Path

import pytest

from evaluator._exceptions import (
    STEP_RETURN,
    STEP_RUNS,
    ConfigError,
    ContractError,
    DatasetError,
    EngineClosedError,
    EvaluationError,
    InvalidReturn,
    ModelsFileError,
    NoModelError,
    NotAResultsFile,
    OutputPathError,
    OutsideCallError,
    ResultsFileError,
    ResultsLocked,
    ResultsWriteError,
    ResumeMismatch,
)

EXAMPLES = [
    ConfigError("must be between 0 and 600 seconds, got 900", option="timeout", value=900),
    ConfigError("the whole message"),
    DatasetError("data.jsonl", 12, "no 'input' object"),
    DatasetError(None, None, "empty"),
    ContractError(STEP_RUNS, "raised ValueError", example_id="q1", path="/m.py", line=3),
    InvalidReturn("returned 0.8 (float), not a pair", example_id=("a", 1)),
    OutsideCallError("observation"),
    OutputPathError("out/r.jsonl", "is a directory"),
    ResultsFileError("r.jsonl", 4, "not a result line", "fix or delete that line"),
    ResultsFileError(None, None, "no results", "pass at least one result"),
    NotAResultsFile("data.jsonl", 1, "this is not a results file", "choose another file"),
    ResultsLocked("r.jsonl"),
    ResumeMismatch("r.jsonl", ["the metric changed: a then, b now"], 12),
    ModelsFileError("models.toml", "unknown key", where="[models.a]", key="rpmm", line=3),
    ModelsFileError("models.json", "no models"),
    NoModelError(Path("/judge.py")),
    EngineClosedError("the model engine 'dspy' is closed"),
]


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_each_error_pickles_whole(error: EvaluationError) -> None:
    """An error crosses a process boundary with its type, message and data intact."""
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert vars(again) == vars(error)


class TestHierarchy:
    @pytest.mark.parametrize("cls", [ConfigError, DatasetError, OutsideCallError])
    def test_usage_errors_are_outside_the_failed_call_family(self, cls: type) -> None:
        """A caller's mistake is an EvaluationError but never a ContractError."""
        assert issubclass(cls, EvaluationError) and not issubclass(cls, ContractError)

    def test_stdlib_bases(self) -> None:
        """Each error is also the stdlib type its callers would catch."""
        assert issubclass(ConfigError, ValueError) and issubclass(DatasetError, ValueError)
        assert issubclass(OutsideCallError, RuntimeError)
        assert issubclass(EngineClosedError, RuntimeError)
        assert issubclass(ModelsFileError, ValueError) and issubclass(NoModelError, ValueError)
        assert issubclass(InvalidReturn, ContractError) and issubclass(InvalidReturn, TypeError)

    def test_invalid_return_is_the_return_value_step(self) -> None:
        """InvalidReturn names the contract step "Metric return value" and the example."""
        error = InvalidReturn("not a pair", example_id="q17")
        assert error.step == STEP_RETURN
        assert str(error) == "Metric return value: example 'q17': not a pair"


def test_config_error_renders_the_callers_name() -> None:
    """A ConfigError renders with the option as the caller spells it (a CLI flag)."""
    error = ConfigError("must be positive, got 0", option="workers", value=0)
    assert str(error) == "`workers` must be positive, got 0"
    assert error.render("--workers") == "--workers must be positive, got 0"


class TestResultsFileErrors:
    def test_one_class_for_both_readers(self) -> None:
        """The report's reader and --resume's reader raise the same ResultsFileError,
        a ConfigError (one line on the command line), whose message is where: problem; fix."""
        from evaluator._report.html import ResultsFileError as from_report
        from evaluator._results_file._reader import (  # type: ignore[attr-defined]  # the name as --resume sees it
            NotAResultsFile as from_resume,
        )

        assert from_report is ResultsFileError and issubclass(from_resume, ResultsFileError)
        assert issubclass(ResultsFileError, ConfigError)
        error = ResultsFileError("r.jsonl", 3, "not JSON", "delete that line")
        assert str(error) == error.render("--output") == "r.jsonl:3: not JSON; delete that line"
        assert (error.path, error.line, error.problem, error.fix) == (
            "r.jsonl",
            3,
            "not JSON",
            "delete that line",
        )

    @pytest.mark.parametrize("cls", [NotAResultsFile, ResultsLocked, ResumeMismatch])
    def test_refusals_are_results_file_errors(self, cls: type) -> None:
        """Every refusal to resume is a ResultsFileError, so one except catches them all."""
        assert issubclass(cls, ResultsFileError)

    def test_write_error_pickles_with_its_counts_and_cause(self) -> None:
        """A ResultsWriteError keeps path, counts, errno and the resume advice across pickling."""
        error = ResultsWriteError("r.jsonl", 5, 17, OSError(errno.ENOSPC, "No space left"))
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is ResultsWriteError and str(again) == str(error)
        assert (again.written, again.in_file, again.cause.errno) == (5, 17, errno.ENOSPC)
        assert "disk is full" in str(error) and "--resume" in str(error)
        assert isinstance(error, OSError) and isinstance(error, EvaluationError)
