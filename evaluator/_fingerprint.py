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
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ._dataset import Selection

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
    "fingerprint_run",
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

    @classmethod
    def new(
        cls, prints: Fingerprints, note: str | None = None, ended: RunEnd | None = None
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
