"""Exceptions raised by the evaluation engine.

Every error a user can cause says what was wrong, where, and how to fix it; the data
stays on the exception as attributes, and every one pickles itself whole
(``__reduce__``), so that it can cross from a worker process to the engine and back.

    EvaluationError
    │   usage errors: the caller's mistake, raised at once, before or outside any call
    ├── ConfigError (ValueError)         a bad option: timeout out of range, unknown executor
    │   ├── OutputPathError              the output path cannot be written (checked before a run)
    │   ├── ModelsFileError              a mistake in a judges models file: file, line, table,
    │   │                                key, what is wrong and how to fix it
    │   ├── NoModelError                 skynet.llm() in a metric adapted for DSPy, no model
    │   │                                given to serve it
    │   └── ResultsFileError             a results file cannot be resumed, appended to or
    │       │                            reported on: path, line, problem, fix
    │       ├── NotAResultsFile          the file is something else (a dataset): never changed
    │       ├── ResultsLocked            another writer holds the file's lock
    │       └── ResumeMismatch           the file's results were made with other files
    ├── DatasetError (ValueError)        a bad dataset row: file, line, problem
    ├── EngineClosedError (RuntimeError) a model call reached the DSPy metric's engine after
    │                                    it closed (or the engine could not start)
    ├── OutsideCallError (RuntimeError)  observation() and friends used outside a call
    ├── ResultsWriteError (OSError)      the disk failed during a run: what was written, how
    │                                    to resume (not the caller's mistake, but it is theirs
    │                                    to fix: free space, remount)
    │   a call failed: the user's function broke the contract
    └── ContractError                    a failed contract step: step, example id, message
        └── InvalidReturn (TypeError)    the step "Metric return value"

During a run a failed call is never raised: it becomes that example's ``ErrorInfo``,
built in :mod:`evaluator._call._failures`, which names every failure kind and words its message.
Only the contract check raises ``ContractError`` (and ``InvalidReturn`` is how the return
value's validator reports to both). Model calls fail with ``llm_client.LLMError``; the
model client's own usage errors (``ModelConfigError``, ``ClientClosedError``) are never
labelled ``llm_error``.

Every exception class of the package is drawn here, and defined in this module. Outside
the tree, and not errors of the engine: ``Interrupted`` (a ``KeyboardInterrupt``: a stop
signal ended a command of the command line), ``CannotRoute`` (a condition the
model SDK routing catches itself: the request goes out unrouted), ``SimulatorOnly`` (a
``ConnectionRefusedError`` raised in user code, for a connection past ``--simulator``: the
user's SDK sees a refused connection), ``ScriptError`` (an ``AssertionError`` of
``skynet.testing``: a test's scripted replies did not fit the metric's calls), and the
warnings ``CacheWarning`` and ``ResumeWarning``.

The results file's errors are ``ConfigError``s (the command line prints them as one line
and exits 2): each names the file and, where it helps, the line, says what is wrong and how
to go on. One ``ResultsFileError`` serves every reading of the file
(:mod:`evaluator._results_file._reader`: ``--resume``'s, and the report's strict one).
"""

from __future__ import annotations

import errno as errno_module
from pathlib import Path
from typing import Any

STEP_FILE = "Metric file"
STEP_SIGNATURE = "Metric signature"
#: The same two steps for a program file (``run``): its errors never say "Metric".
STEP_PROGRAM_FILE = "Program file"
STEP_PROGRAM_SIGNATURE = "Program signature"
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


class ModelsFileError(ConfigError):
    """A mistake in a models file: names the file (and line when known), the model or
    provider table, the key, what is wrong and how to fix it."""

    def __init__(
        self,
        path: str | Path,
        problem: str,
        *,
        where: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.path = str(path)
        self.detail = problem
        self.where = where
        self.key = key
        self.line = line
        head = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{head}: {where}: {problem}" if where else f"{head}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_models_file_error, (self.path, self.detail, self.where, self.key, self.line))


def _models_file_error(
    path: str, problem: str, where: str | None, key: str | None, line: int | None
) -> ModelsFileError:
    return ModelsFileError(path, problem, where=where, key=key, line=line)


class NoModelError(ConfigError):
    """``skynet.llm()`` was called in a metric adapted for DSPy, and no model serves it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"skynet.llm() in {path.name} has no model to call under DSPy: pass the judge's "
            "model to to_dspy_metric() as lm= (a dspy.LM, an llm_client.ModelConfig or a "
            "name such as 'openai/gpt-4o-mini'), as reflection_lm= (the fallback: the "
            "reflection_lm you give dspy.GEPA) or as models=evaluator.Models(metric=...); "
            "dspy.configure(lm=...) sets the program's model, not the judge's"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (NoModelError, (self.path,))


class EngineClosedError(EvaluationError, RuntimeError):
    """A model call reached an engine that is closed (or closed while the call waited)."""


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


# -- the results file and the output path ------------------------------------------------


class OutputPathError(ConfigError):
    """The output path cannot be written; ``path`` and the ``detail`` of what is wrong
    (with the fix). Raised before a run by ``check_output_path``; ``option`` is the flag
    or parameter that named the path (``output``, ``report``, ``html``, ``plot``...)."""

    def __init__(self, path: str | Path, problem: str, option: str = "output") -> None:
        self.path = str(path)
        self.detail = problem
        # A path with control characters (a NUL, a newline) is shown quoted, so the line
        # stays one line and the character is visible.
        shown = self.path if self.path.isprintable() else repr(self.path)
        super().__init__(f"{shown}: {problem}", option=option, value=self.path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path, self.detail, self.option))


class ResultsFileError(ConfigError):
    """A results file cannot be resumed, appended to or reported on as it stands.

    ``path`` (None for results given in memory) and ``line`` (1-based; None for the
    whole file) say where, ``problem`` what is wrong and ``fix`` what to do about it; the
    message is ``path:line: problem; fix``.
    """

    def __init__(self, path: str | Path | None, line: int | None, problem: str, fix: str) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.fix = fix
        where = self.path or "<results>"
        if line is not None:
            where = f"{where}:{line}"
        self.message = f"{where}: {problem}; {fix}"
        super().__init__(self.message)
        self.problem = problem  # ConfigError's `problem` is the whole message; this is the part

    def render(self, name: str | None = None) -> str:
        """The whole message (no option to name: the file is in it)."""
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path, self.line, self.problem, self.fix))


class NotAResultsFile(ResultsFileError):
    """The file holds something other than results (a dataset, say); it was not changed."""


class ResultsLocked(ResultsFileError):
    """Another run (or another writer in this process) is writing the file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(
            path,
            None,
            "another skynet-eval run is writing this results file (it holds the file's lock)",
            "wait for that run to end, or choose another output file",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path))


class ResumeMismatch(ResultsFileError):
    """The file was written for other files; ``changes`` says which and how, ``results``
    how many results it holds for the dataset."""

    def __init__(self, path: str | Path, changes: list[str], results: int) -> None:
        self.changes = list(changes)
        self.results = results
        super().__init__(
            path,
            None,
            "these results were made with other files, so they are not what this run "
            f"would compute: {'; '.join(changes)}",
            "choose another output file to start afresh (or move this one away), or force "
            f"the resume (--force; in Python, open_results(..., force=True)) to keep its {results} "
            "result(s) for ids still in the "
            "dataset and run only the missing examples with the current files",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path, self.changes, self.results))


_ADVICE = {
    errno_module.ENOSPC: "the disk is full: free some space",
    errno_module.EDQUOT: "the disk quota is used up: free some space or raise the quota",
    errno_module.EROFS: "the file system became read-only: fix or remount it",
    errno_module.EIO: "the disk reported an input/output error: check the disk",
    errno_module.EFBIG: "the file reached the largest size allowed: choose another file",
}


class ResultsWriteError(EvaluationError, OSError):
    """Writing the results file failed during a run.

    ``path``; ``written``, the results this writer wrote before the failure; ``in_file``,
    the results the file holds (whole lines: a half-written batch is cut off when the
    file system allows it, else the next resume drops it); ``cause``, the ``OSError``.
    """

    def __init__(self, path: str | Path, written: int, in_file: int, cause: OSError) -> None:
        self.path = str(path)
        self.written = written
        self.in_file = in_file
        self.cause = cause
        code = cause.errno or 0
        name = errno_module.errorcode.get(code, str(code))
        reason = cause.strerror or str(cause)
        advice = _ADVICE.get(code, "fix the cause")
        message = (
            f"could not write to the results file {self.path}: {reason} ({name}); "
            f"{written} result(s) of this run were written before it, and the file holds "
            f"{in_file} whole result(s). To go on, {advice}, then run again with --resume "
            "(in the library: open_results(..., resume=True)); only the missing examples "
            "will run"
        )
        OSError.__init__(self, code, message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        cause = OSError(self.cause.errno, self.cause.strerror)
        return (_rebuild, (type(self), self.path, self.written, self.in_file, cause))


def _rebuild(cls: type[Exception], *args: Any) -> Exception:
    return cls(*args)
