"""Exceptions raised by the evaluation engine.

Every error a user can cause says what was wrong, where, and how to fix it; the data
stays on the exception as attributes, and every one pickles itself whole
(``__reduce__``), so that it can cross from a worker process to the engine and back.

    EvaluationError
    │   usage errors: the caller's mistake, raised at once, before or outside any call
    ├── ConfigError (ValueError)         a bad option: timeout out of range, unknown executor
    ├── DatasetError (ValueError)        a bad dataset row: file, line, problem
    ├── OutsideCallError (RuntimeError)  observation() and friends used outside a call
    │   a call failed: the user's function broke the contract
    └── ContractError                    a failed contract step: step, example id, message
        └── InvalidReturn (TypeError)    the step "Metric return value"

During a run a failed call is never raised: it becomes that example's ``ErrorInfo``,
built in :mod:`evaluator._failures`, which names every failure kind and words its message.
Only the contract check raises ``ContractError`` (and ``InvalidReturn`` is how the return
value's validator reports to both). Model calls fail with ``llm_client.LLMError``; the
model client's own usage errors (``ModelConfigError``, ``ClientClosedError``) are never
labelled ``llm_error``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STEP_FILE = "Metric file"
STEP_SIGNATURE = "Metric signature"
STEP_REWARD = "Reward spec"
STEP_RUNS = "Metric runs"
STEP_RETURN = "Metric return value"
STEPS = (STEP_FILE, STEP_SIGNATURE, STEP_REWARD, STEP_RUNS, STEP_RETURN)


class EvaluationError(Exception):
    """The root of every error this package raises on purpose."""


_UNSET: Any = object()


class ConfigError(EvaluationError, ValueError):
    """An option given to the engine or the CLI is out of range or malformed.

    ``option`` is the option's name in the Python API (``"timeout"``), ``value`` what was
    given, ``problem`` what is wrong with it, worded to follow the option's name
    (``"must be between 0 and 600 seconds, got 900"``). :meth:`render` names the option
    the way the caller spelt it, so the command line shows ``--timeout`` where the
    library shows ```timeout```, without editing message text. Without ``option`` the
    problem is the whole message.
    """

    def __init__(self, problem: str, *, option: str | None = None, value: Any = _UNSET) -> None:
        self.problem = problem
        self.option = option
        self.value = None if value is _UNSET else value
        super().__init__(self.render())

    def render(self, name: str | None = None) -> str:
        """The message, with the option called ``name`` (default: ```option```)."""
        if self.option is None:
            return self.problem
        return f"{name if name is not None else f'`{self.option}`'} {self.problem}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_config_error, (type(self), self.problem, self.option, self.value))


def _config_error(
    cls: type[ConfigError], problem: str, option: str | None, value: Any
) -> ConfigError:
    return cls(problem, option=option, value=value)


class DatasetError(EvaluationError, ValueError):
    """A dataset file or row is malformed; names the file, the line and the problem."""

    def __init__(self, path: str | Path | None, line: int | None, problem: str) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.problem = problem
        where = self.path or "<dataset>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.line, self.problem))


class ContractError(EvaluationError):
    """A step of the metric contract failed.

    ``step`` is one of the step names of ``docs/contract.md``; ``example_id`` is set for
    the steps that run the metric on an example.
    """

    def __init__(
        self,
        step: str,
        message: str,
        *,
        example_id: Any = None,
        path: str | Path | None = None,
        line: int | None = None,
    ) -> None:
        self.step = step
        self.message = message
        self.example_id = example_id
        self.path = str(path) if path is not None else None
        self.line = line
        parts = [step]
        if example_id is not None:
            parts.append(f"example {example_id!r}")
        if self.path is not None:
            parts.append(f"{self.path}:{line}" if line is not None else self.path)
        super().__init__(": ".join([*parts, message]))

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _contract_error,
            (type(self), self.step, self.message, self.example_id, self.path, self.line),
        )


def _contract_error(
    cls: type[ContractError],
    step: str,
    message: str,
    example_id: Any,
    path: str | None,
    line: int | None,
) -> ContractError:
    if issubclass(cls, InvalidReturn):
        return cls(message, example_id=example_id)
    return cls(step, message, example_id=example_id, path=path, line=line)


class InvalidReturn(ContractError, TypeError):
    """The metric's return value breaks the shape rules of the contract."""

    def __init__(self, message: str, *, example_id: Any = None) -> None:
        super().__init__(STEP_RETURN, message, example_id=example_id)


class OutsideCallError(EvaluationError, RuntimeError):
    """A facade function that needs the current example was called outside a call."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"skynet.{name}() can only be called while the engine runs your metric's `score` "
            f"(or, for llm(), your program's `run`); it was called outside such a call"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name,))
