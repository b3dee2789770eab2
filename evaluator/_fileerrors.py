"""Errors of the results file and the ``--output`` path.

They belong in ``_exceptions.py`` with the package's other errors; they live here until
that module (being restructured at the same time) takes them. Each says what is wrong,
where, and how to go on; the data stays on the exception.

    EvaluationError
    ├── ConfigError (ValueError)
    │   ├── OutputPathError            the output path cannot be written: checked before a run
    │   └── ResultsFileError           a results file cannot be resumed or appended to
    │       ├── NotAResultsFile        the file is something else: it is never changed
    │       ├── ResultsLocked          another writer holds the file
    │       └── ResumeMismatch         the file was written for other files
    └── ResultsWriteError (OSError)    writing failed during a run: what was written, how to resume
"""

from __future__ import annotations

import errno as errno_module
import os
from pathlib import Path
from typing import Any

from ._exceptions import ConfigError, EvaluationError

__all__ = [
    "NotAResultsFile",
    "OutputPathError",
    "ResultsFileError",
    "ResultsLocked",
    "ResultsWriteError",
    "ResumeMismatch",
    "strerror",
]


class OutputPathError(ConfigError):
    """The output path cannot be written; ``path`` and the ``problem`` with it."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.detail = problem
        super().__init__(f"{self.path}: {problem}", option="output", value=self.path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path, self.detail))


class ResultsFileError(ConfigError):
    """A results file cannot be resumed or appended to: ``path``, ``line``, and ``detail``
    (what is wrong and how to go on; the message is ``path:line: detail``)."""

    def __init__(self, path: str | Path, line: int | None, detail: str) -> None:
        self.path = str(path)
        self.line = line
        self.detail = detail
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path, self.line, self.detail))


class NotAResultsFile(ResultsFileError):
    """The file holds something other than results (a dataset, say); it was not changed."""


class ResultsLocked(ResultsFileError):
    """Another run (or another writer in this process) is writing the file."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(
            path,
            None,
            "another skynet-eval run is writing this results file (it holds the file's "
            "lock); wait for that run to end, or choose another output file",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.path))


class ResumeMismatch(ResultsFileError):
    """The file was written for other files; ``changes`` says which and how."""

    def __init__(self, path: str | Path, changes: list[str], results: int) -> None:
        self.changes = list(changes)
        self.results = results
        super().__init__(
            path,
            None,
            "these results were made with other files, so they are not what this run "
            f"would compute: {'; '.join(changes)}. Choose another output file to start "
            f"afresh (or move this one away), or force the resume to keep its {results} "
            "result(s) for ids still in the dataset and run only the missing examples "
            "with the current files",
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


def strerror(exc: OSError) -> str:
    """An ``OSError``'s reason without its errno number or the repeated file name."""
    if exc.strerror:
        return exc.strerror
    if exc.errno:
        return os.strerror(exc.errno)
    return str(exc)
