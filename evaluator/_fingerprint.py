"""What produced a results file: fingerprints of the dataset, metric, program and artifact.

A results file begins with a header line recording them, so that ``--resume`` can tell
results made by these files from results made by others (a metric edited since, another
dataset at the same path) instead of counting whatever is in the file. A fingerprint is
the SHA-256 of the file's bytes (of the canonical form of the artifact's value), with the
path beside it for the messages: a file that moved but kept its content is the same
file; a file edited in place is not.

The header is one JSON object whose first key is ``"skynet_eval_results"`` (the format's
version, 1). Readers (``--resume``, ``skynet-eval report``) know a header by that key: a
line whose object has it is a header, never a result.

What user code *reads* is fingerprinted too (the result cache's key holds it): an audit
hook on ``open``, added when this module is imported (``import evaluator`` does, before any
user file is imported), notes each file opened for reading outside the standard library,
installed packages and the engine, with the code files on the stack that opened it.
:func:`read_by` then gives the files opened while one of the user's files was running (at
import: ``RUBRIC = open("rubric.txt").read()``, a helper imported from a sibling folder
through ``sys.path`` and the files it reads; or during a call). What it does not see:
files opened by C code without Python's ``open`` (a C extension's own reads), by a
helper the process had imported before the user's file, and by another process (a
worker's reads during calls).
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

__all__ = [
    "FORMAT_VERSION",
    "HEADER_KEY",
    "ArtifactPrint",
    "DatasetPrint",
    "FilePrint",
    "Fingerprints",
    "ResultsHeader",
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
    """The dataset file, and the columns that decide how its rows are read."""

    path: str
    sha256: str
    input_cols: list[str] | None = None
    output_cols: list[str] | None = None


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


class ResultsHeader(msgspec.Struct, frozen=True, forbid_unknown_fields=False, omit_defaults=True):
    """The header line of a results file. Field order is line order: the key
    ``skynet_eval_results`` comes first.

    ``note`` says why a header was appended later in the file (a resume that went on
    with other files under ``force``); the last header describes the lines after it.
    """

    skynet_eval_results: int
    created: str
    dataset: DatasetPrint | None = None
    metric: FilePrint | None = None
    program: FilePrint | None = None
    artifact: ArtifactPrint | None = None
    note: str | None = None

    @classmethod
    def new(cls, prints: Fingerprints, note: str | None = None) -> ResultsHeader:
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
) -> Fingerprints:
    """The fingerprints of a run: reads each file once (SHA-256 at disk speed).

    ``artifact`` is the artifact's value as handed to ``run`` (``None``: no artifact);
    ``artifact_path`` the file it came from, if any.
    """
    data = None
    if dataset is not None:
        p = Path(dataset)
        data = DatasetPrint(
            str(p),
            _file_sha256(p),
            list(input_cols) if input_cols else None,
            list(output_cols) if output_cols else None,
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
            cols_then = (old.input_cols, old.output_cols)
            cols_now = (new.input_cols, new.output_cols)
            if cols_then != cols_now:
                changes.append(
                    f"{label}'s columns changed: input {old.input_cols}, output "
                    f"{old.output_cols} then; input {new.input_cols}, output "
                    f"{new.output_cols} now"
                )
                continue
        old_path, new_path = getattr(old, "path", None), getattr(new, "path", None)
        if old_path != new_path and old_path is not None and new_path is not None:
            moves.append(f"{label} is now {new_path} (it was {old_path}), with the same content")
    return changes, moves


# -- what user code reads ---------------------------------------------------------------


def _skipped_roots() -> tuple[str, ...]:
    """Folders whose files are nobody's input: the engine's own packages, the standard
    library, installed packages, and the kernel's virtual file systems."""
    engine = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = [os.path.join(engine, name) for name in ("evaluator", "reward", "llm_client", "skynet")]
    paths = sysconfig.get_paths()
    roots += [
        paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths
    ]
    roots += [p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)]
    roots += [sys.prefix, sys.base_prefix, sys.exec_prefix, "/proc", "/dev", "/sys"]
    return tuple(sorted({os.path.abspath(r).rstrip(os.sep) + os.sep for r in roots}))


_SKIPPED = _skipped_roots()
_NOT_USER_CODE = ("<", *_SKIPPED)  # "<frozen importlib._bootstrap>", "<string>"
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
#: path -> the user-side code files on the stack when it was opened, and when (a count).
_reads: dict[str, tuple[set[str], int]] = {}
_counter = [0]
_reads_lock = threading.Lock()
_MAX_DEPTH = 64


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
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            break
        name = frame.f_code.co_filename
        if not name.startswith(_NOT_USER_CODE):
            openers.add(name)
        frame = frame.f_back
    if not openers:
        return
    if path.endswith(".pyc"):  # a module's bytecode: its source is what was edited
        with contextlib.suppress(ValueError, NotImplementedError):
            path = importlib.util.source_from_cache(path)
    with _reads_lock:
        _counter[0] += 1
        seen = _reads.get(path)
        _reads[path] = (openers if seen is None else seen[0] | openers, _counter[0])


def read_by(roots: Collection[str | Path], since: int = 0) -> list[Path]:
    """The files opened for reading (since the mark ``since``) while one of ``roots`` (the
    user's files) was on the stack, but ``roots`` themselves; files gone since are left out."""
    wanted = {os.path.abspath(r) for r in roots}
    wanted |= {os.path.realpath(r) for r in wanted}
    with _reads_lock:
        items = list(_reads.items())
    out = []
    for path, (openers, when) in items:
        if when <= since or path in wanted or not openers & wanted:
            continue
        if os.path.isfile(path):
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
