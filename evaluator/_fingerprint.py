"""What produced a results file: fingerprints of the dataset, metric, program and artifact.

A results file begins with a header line recording them, so that ``--resume`` can tell
results made by these files from results made by others (a metric edited since, another
dataset at the same path) instead of counting whatever is in the file. A fingerprint is
the SHA-256 of the file's bytes (of the canonical form of the artifact's value), with the
path beside it for the messages: a file that moved but kept its content is the same
file; a file edited in place is not.

The header is one JSON object whose first key is ``"skynet_eval_results"`` (the format's
version, 1). A run that wrote results appends one more when it stops, with ``ended``
(its wall time and throughput), so that ``report`` can show them. Readers (``--resume``,
``skynet-eval report``) know a header by that key: a line whose object has it is a
header, never a result.

What user code *reads* is fingerprinted too (the result cache's key holds it): an audit
hook on ``open``, added when this module is imported (``import evaluator`` does, before any
user file is imported), notes each file opened for reading, with the user's code files on
the stack that opened it and whether each was running its import (module code) or a
call. :func:`read_by` gives the files one of the user's files read at its import
(``RUBRIC = open("rubric.txt").read()``, a helper imported from a sibling folder through
``sys.path`` and the files that helper reads) or in its calls. A file counts when the
user's code opened it itself (through the standard library: ``Path.read_text``,
``json.load``, the import system), or through an installed library when it lies in the
user's file's folder or below (``pandas.read_csv("rubric.csv")``); files of the engine,
of installed packages, of the interpreter, ``/etc``, ``/usr``, ``/proc``, ``/dev`` and
``/sys`` never count (an SDK reads ``/etc/os-release`` for its user agent). Not seen:
files opened by C code without Python's ``open``, reads by a helper the process imported
before the user's file, reads in other processes (a worker's during calls), and new paths
past the first 10,000.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib.util
import json
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ._data._dataset import Selection

__all__ = [
    "FORMAT_VERSION",
    "HEADER_KEY",
    "ArtifactPrint",
    "DatasetPrint",
    "FilePrint",
    "Fingerprints",
    "ResultsHeader",
    "RunEnd",
    "compare",
    "files_print",
    "fingerprint_run",
    "read_by",
    "reads_since",
]

#: The key that marks a header line, and the version of the format it announces.
HEADER_KEY = "skynet_eval_results"
FORMAT_VERSION = 1


class FilePrint(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """A user file (metric, program): where it was and the SHA-256 of its bytes."""

    path: str
    sha256: str


class DatasetPrint(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """The dataset file, the columns that decide how its rows are read, and which of its
    examples the run takes (``None``: all)."""

    path: str
    sha256: str
    input_cols: list[str] | None = None
    output_cols: list[str] | None = None
    selection: Selection | None = None
    id_col: str | None = None


class ArtifactPrint(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """The artifact handed to ``run``: the SHA-256 of its canonical form, and its file if
    it came from one (``--artifact FILE``; ``None`` for ``--artifact-text``)."""

    sha256: str
    path: str | None = None


class Fingerprints(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """What a run evaluates; a part is ``None`` when the run has none (no program)."""

    dataset: DatasetPrint | None = None
    metric: FilePrint | None = None
    program: FilePrint | None = None
    artifact: ArtifactPrint | None = None


class RunEnd(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """How one run (or one resume) that wrote results ended: its wall time, how many
    results it wrote, and their rate (``None``: too short to tell)."""

    wall_s: float
    examples: int
    throughput: float | None = None
    interrupted: bool = False


class ResultsHeader(msgspec.Struct, frozen=True, forbid_unknown_fields=False, omit_defaults=True):
    """The header line of a results file. Field order is line order: the key
    ``skynet_eval_results`` comes first.

    ``note`` says why a header was appended later in the file (a resume that went on
    with other files under ``force``); the last header describes the lines after it.
    ``ended`` marks the line a run appends when it stops: the same files, and its
    wall time and throughput (results made under the header before it).
    """

    skynet_eval_results: int
    created: str
    dataset: DatasetPrint | None = None
    metric: FilePrint | None = None
    program: FilePrint | None = None
    artifact: ArtifactPrint | None = None
    note: str | None = None
    ended: RunEnd | None = None
    repeat: int | None = None
    """The passes over the dataset of a run with ``--repeat`` K > 1 (None: one pass)."""

    @classmethod
    def new(
        cls,
        prints: Fingerprints,
        note: str | None = None,
        ended: RunEnd | None = None,
        repeat: int = 1,
    ) -> ResultsHeader:
        """A header for a run evaluating ``prints``, created now (UTC)."""
        created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        return cls(
            FORMAT_VERSION,
            created,
            prints.dataset,
            prints.metric,
            prints.program,
            prints.artifact,
            note,
            ended,
            repeat if repeat > 1 else None,
        )

    @property
    def fingerprints(self) -> Fingerprints:
        return Fingerprints(self.dataset, self.metric, self.program, self.artifact)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _canonical(value: Any) -> bytes:
    """The artifact's value as bytes that do not depend on dict order or on how it was
    built: text as its code points, JSON values as sorted compact JSON, others by repr."""
    if isinstance(value, str):
        return b"text:" + value.encode("utf-8", "surrogatepass")
    try:
        text = json.dumps(
            value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=True
        )
    except (TypeError, ValueError, RecursionError):
        return b"repr:" + repr(value).encode("utf-8", "surrogatepass")
    return b"json:" + text.encode()


def _file_print(path: str | Path | None) -> FilePrint | None:
    if path is None:
        return None
    p = Path(path)
    return FilePrint(str(p), _file_sha256(p))


def fingerprint_run(
    *,
    dataset: str | Path | None,
    metric: str | Path | None,
    program: str | Path | None = None,
    artifact: Any = None,
    artifact_path: str | Path | None = None,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    selection: Selection | None = None,
    id_col: str | None = None,
    dataset_sha256: str | None = None,
) -> Fingerprints:
    """The fingerprints of a run: reads each file once (SHA-256 at disk speed).

    ``artifact`` is the artifact's value as handed to ``run`` (``None``: no artifact);
    ``artifact_path`` the file it came from, if any. ``dataset_sha256``: the dataset's
    digest when the caller hashed it as it read the rows (the file is then not read again).
    """
    data = None
    if dataset is not None:
        p = Path(dataset)
        data = DatasetPrint(
            str(p),
            dataset_sha256 if dataset_sha256 is not None else _file_sha256(p),
            list(input_cols) if input_cols else None,
            list(output_cols) if output_cols else None,
            selection if selection != Selection() else None,
            id_col,
        )
    art = None
    if artifact is not None or artifact_path is not None:
        art = ArtifactPrint(
            hashlib.sha256(_canonical(artifact)).hexdigest(),
            str(artifact_path) if artifact_path is not None else None,
        )
    return Fingerprints(data, _file_print(metric), _file_print(program), art)


_NAMES = {"dataset": "the dataset", "metric": "the metric", "program": "the program"}


def _label(name: str, part: Any) -> str:
    if part is None:
        return "none"
    where = getattr(part, "path", None)
    digest = part.sha256[:12]
    return f"{where} (sha256 {digest}...)" if where else f"sha256 {digest}..."


def _selected(part: DatasetPrint) -> str:
    return (part.selection or Selection()).describe()


def compare(then: Fingerprints, now: Fingerprints) -> tuple[list[str], list[str]]:
    """``(changes, moves)`` from ``then`` (a file's header) to ``now`` (this run).

    A change is a part whose content differs (or that one side lacks): results made with
    it are not what this run computes. A move is a part at another path with the same
    content: worth a note, not a refusal.
    """
    changes: list[str] = []
    moves: list[str] = []
    for name in ("dataset", "metric", "program", "artifact"):
        old, new = getattr(then, name), getattr(now, name)
        label = _NAMES.get(name, f"the {name}")
        if old is None and new is None:
            continue
        if old is None or new is None or old.sha256 != new.sha256:
            changes.append(f"{label} changed: {_label(name, old)} then, {_label(name, new)} now")
            continue
        if isinstance(old, DatasetPrint) and isinstance(new, DatasetPrint):
            cols_then = (old.input_cols, old.output_cols, old.id_col)
            cols_now = (new.input_cols, new.output_cols, new.id_col)
            if cols_then != cols_now:
                changes.append(
                    f"{label}'s columns changed: input {old.input_cols}, output "
                    f"{old.output_cols}, id {old.id_col or 'id'} then; input "
                    f"{new.input_cols}, output {new.output_cols}, id {new.id_col or 'id'} now"
                )
                continue
        if (
            isinstance(old, DatasetPrint)
            and isinstance(new, DatasetPrint)
            and old.selection != new.selection
        ):
            # Which examples, not how each is computed: the results of examples in both
            # selections stand; the others run (or are left out).
            moves.append(
                f"the selection changed: {_selected(old)} then, {_selected(new)} now; "
                "the results of examples in this selection are kept and the rest of it runs"
            )
        old_path, new_path = getattr(old, "path", None), getattr(new, "path", None)
        if old_path != new_path and old_path is not None and new_path is not None:
            moves.append(f"{label} is now {new_path} (it was {old_path}), with the same content")
    return changes, moves


# -- what user code reads ---------------------------------------------------------------


def _folders(*paths: str) -> tuple[str, ...]:
    return tuple(sorted({os.path.abspath(p).rstrip(os.sep) + os.sep for p in paths if p}))


_ENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SYSPATHS = sysconfig.get_paths()
#: Code that reads for others: the engine's own packages and installed packages.
_LIBRARIES = _folders(
    *(os.path.join(_ENGINE, name) for name in ("evaluator", "reward", "llm_client", "skynet")),
    *(_SYSPATHS.get(name, "") for name in ("purelib", "platlib")),
    *(p for p in sys.path if "site-packages" in p or "dist-packages" in p),
)
#: The standard library (and frozen or generated code): read through, it is the caller
#: who reads (``Path.read_text``, ``json.load``, the import system).
_STDLIB = ("<", *_folders(*(_SYSPATHS.get(name, "") for name in ("stdlib", "platstdlib"))))
#: Files that are nobody's input: those of the engine, the libraries, the interpreter's
#: own folders, the kernel's virtual file systems and the system's settings (``/etc``:
#: an SDK reads ``/etc/os-release`` for its user agent).
_SKIPPED = _folders(
    *_LIBRARIES, *_STDLIB[1:], sys.prefix, sys.base_prefix, sys.exec_prefix,
    "/proc", "/dev", "/sys", "/etc", "/usr", "/lib",
)  # fmt: skip
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
#: path -> {(a user code file on the stack when it was opened, whether that frame was the
#: file's module code (its import), whether user code opened it itself rather than a
#: library it called): the mark of the last such open}.
_reads: dict[str, dict[tuple[str, bool, bool], int]] = {}
_counter = [0]
_reads_lock = threading.Lock()
_MAX_DEPTH = 64
#: Paths kept at most: a metric that reads a new temporary file on every call must not
#: grow the process without bound (past it, new paths are not noted: the docs say so).
_MAX_PATHS = 10_000


def _read_path(args: tuple[object, ...]) -> str | None:
    """The absolute path an ``open`` event reads, or None (a write, a descriptor)."""
    path, mode, flags = (*args, None, None)[:3]
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return None  # a file descriptor
    if isinstance(mode, str):
        if "r" not in mode or "+" in mode:
            return None
    elif isinstance(flags, int) and flags & _WRITING:
        return None
    return os.path.abspath(path)


def _read_hook(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or (path := _read_path(args)) is None or path.startswith(_SKIPPED):
        return
    openers = set()
    direct: bool | None = None  # whether the nearest code outside the stdlib is the user's
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            break
        code = frame.f_code
        name = code.co_filename
        if name.startswith(_LIBRARIES):
            direct = False if direct is None else direct
        elif not name.startswith(_STDLIB):
            direct = True if direct is None else direct
            openers.add((name, code.co_name == "<module>"))
        frame = frame.f_back
    if not openers:
        return
    if path.endswith(".pyc"):  # a module's bytecode: its source is what was edited
        with contextlib.suppress(ValueError, NotImplementedError):
            path = importlib.util.source_from_cache(path)
    with _reads_lock:
        if path not in _reads and len(_reads) >= _MAX_PATHS:
            return
        _counter[0] += 1
        seen = _reads.setdefault(path, {})
        for opener, at_import in openers:
            seen[opener, at_import, bool(direct)] = _counter[0]


def read_by(roots: Collection[str | Path], *, at_import: bool, since: int = 0) -> list[Path]:
    """The files opened for reading while one of ``roots`` (the user's files) was running:
    its import (``at_import``: its module code on the stack, and what that imported), or
    else its functions, since the mark ``since``. Not ``roots`` themselves, nor files gone
    since."""
    wanted = {os.path.abspath(r) for r in roots}
    wanted |= {os.path.realpath(r) for r in wanted}
    direct = {(root, at_import, True) for root in wanted}
    through = {(root, at_import, False) for root in wanted}
    folders = _folders(*(os.path.dirname(r) for r in wanted))
    with _reads_lock:
        items = [(path, dict(seen)) for path, seen in _reads.items()]
    out = []
    for path, seen in items:
        if path in wanted:
            continue
        # Opened by the user's code itself; or by a library it called (pandas.read_csv),
        # when the file is in the user's folders (not a library's own settings or cache).
        mine = any(seen.get(key, 0) > since for key in direct)
        if not mine and path.startswith(folders):
            mine = any(seen.get(key, 0) > since for key in through)
        if mine and os.path.isfile(path):
            out.append(Path(path))
    return sorted(out)


def reads_since() -> int:
    """A mark: :func:`read_by` with it sees only the files opened after now."""
    with _reads_lock:
        return _counter[0]


def files_print(paths: Collection[Path]) -> bytes:
    """One BLAKE2b digest of ``paths`` and their bytes (a file that cannot be read counts
    as missing): editing any of them changes it."""
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(paths):
        h.update(str(path).encode("utf-8", "surrogatepass") + b"\0")
        try:
            data = path.read_bytes()
        except OSError:
            h.update(b"missing\0")
            continue
        h.update(len(data).to_bytes(8, "little") + data)
    return h.digest()


sys.addaudithook(_read_hook)
