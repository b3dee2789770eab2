"""Checking the output path before a run: fail in a second with a clear line, not after
the contract check and an hour of model calls with a traceback.

The check does not create or change anything (a run that stops at the contract check
leaves no file behind); it looks at the path and the file system under it. It cannot
promise that the disk will not fill up later; the writer reports that case itself
(:class:`ResultsWriteError`).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

import msgspec

from ._exceptions import OutputPathError

__all__ = ["LOW_SPACE", "OutputCheck", "check_output_path", "strerror"]

#: Below this much free space the check warns (a result line is about 0.5-2 KB).
LOW_SPACE = 50 * 1024 * 1024


class OutputCheck(msgspec.Struct, frozen=True):
    """What the check found: whether the file exists already, the free space on its file
    system in bytes (``None`` when the system does not say), and warnings to show."""

    path: str
    exists: bool
    free_bytes: int | None
    notes: tuple[str, ...] = ()


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise OutputPathError(path, _under_a_file(path)) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise OutputPathError(
                path, "the name is longer than this file system allows; choose a shorter name"
            ) from None
        raise OutputPathError(path, f"cannot be looked at: {strerror(exc)}") from None


def _under_a_file(path: Path) -> str:
    for parent in path.parents:
        try:
            if parent.is_file():
                return (
                    f"{parent} is a file, not a directory, so nothing can be created under "
                    f"it; choose a path in a directory (e.g. {parent.parent / path.name})"
                )
        except OSError:
            continue
    return "a part of the path is not a directory"


def _existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of ``path`` that exists (the run creates the others)."""
    for parent in path.parents:
        st = _stat(parent)
        if st is None:
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(path, _under_a_file(path))
        return parent
    return Path(path.anchor or ".")


def check_output_path(path: str | Path, option: str = "output") -> OutputCheck:
    """Check that a file can be written at ``path``; raise :class:`OutputPathError`, naming
    ``option`` (the flag or parameter that gave the path), if not. The one check for every
    file the engine writes: results, report pages, JSON reports, plots, the cache's files.

    Refused: an empty path, a path holding a NUL character, a directory, something that
    is not a regular file (a device, a pipe), a path under a regular file, a name too
    long for its file system, a directory or file that cannot be written, a read-only
    file system, a full disk.
    Missing parent directories are fine (the writer creates them). Low free space is a
    note, since a run's size is not known in advance.
    """
    try:
        return _check(path)
    except OutputPathError as exc:
        if option == "output":
            raise
        raise OutputPathError(exc.path, exc.detail, option) from None


def _check(path: str | Path) -> OutputCheck:
    if str(path) == "":
        raise OutputPathError(path, "the path is empty; give a file name such as results.jsonl")
    if "\0" in str(path):
        # The OS cannot take it (Python raises ValueError on every call): say so here.
        raise OutputPathError(path, "holds a NUL character, which no file name can hold")
    p = Path(path).absolute()
    st = _stat(p)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputPathError(
                path, f"is a directory; name a file in it, e.g. {Path(path) / 'results.jsonl'}"
            )
        if not stat.S_ISREG(st.st_mode):
            raise OutputPathError(
                path,
                "is not a regular file (a device, pipe or socket) and is never written to or "
                "replaced; give a file path",
            )
    base = p.parent if st is not None else _existing_ancestor(p)
    _check_names(path, p, base)
    _check_writable(path, p if st is not None else None, base)
    free, notes = _free_space(path, base)
    return OutputCheck(str(path), st is not None, free, notes)


def _check_names(path: str | Path, p: Path, base: Path) -> None:
    try:
        limit = os.pathconf(base, "PC_NAME_MAX")
    except (OSError, ValueError):
        return
    for part in p.relative_to(base).parts:
        if len(os.fsencode(part)) > limit:
            raise OutputPathError(
                path,
                f"the name {part[:40]!r}... is longer than the {limit} bytes this file "
                "system allows; choose a shorter name",
            )


def _check_writable(path: str | Path, existing: Path | None, base: Path) -> None:
    try:
        flags = os.statvfs(base).f_flag
    except OSError:
        flags = 0
    if flags & os.ST_RDONLY:
        raise OutputPathError(
            path, f"{base} is on a read-only file system; choose a path on a writable disk"
        )
    if existing is not None and not os.access(existing, os.W_OK):
        raise OutputPathError(path, "the file cannot be written (permission denied)")
    if existing is None and not os.access(base, os.W_OK | os.X_OK):
        raise OutputPathError(
            path, f"cannot create files in {base} (permission denied); choose another directory"
        )


def _free_space(path: str | Path, base: Path) -> tuple[int | None, tuple[str, ...]]:
    try:
        usage = shutil.disk_usage(base)
    except OSError as exc:
        return None, (f"the free space under {base} is not known ({strerror(exc)})",)
    free = usage.free
    if usage.total == 0:
        raise OutputPathError(
            path,
            f"{base} is on a virtual file system (like /proc), not a disk; choose a path on a disk",
        )
    if free == 0:
        raise OutputPathError(path, f"the disk holding {base} is full; free some space")
    if free < LOW_SPACE:
        mib = free / (1024 * 1024)
        return free, (
            f"only {mib:.1f} MiB free on the disk of the output file (a result takes about "
            "1 KB); if it fills up the run stops and says how to resume",
        )
    return free, ()


def strerror(exc: OSError) -> str:
    """An ``OSError``'s reason without its errno number or the repeated file name."""
    if exc.strerror:
        return exc.strerror
    if exc.errno:
        return os.strerror(exc.errno)
    return str(exc)
