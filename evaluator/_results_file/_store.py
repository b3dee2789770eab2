"""The results file: JSON Lines, a header then one :class:`Result` per line, appended as
results arrive.

Every write ends on a line boundary and is handed to the operating system at once, so a
run killed at any moment keeps every result it had written (at worst the last line is
cut short if the kill lands inside a write). The pieces, in the order a run uses them:

- :func:`check_output_path` (in :mod:`evaluator._outpath`): before anything runs.
- :func:`open_results`: opens the file for a run and holds its lock for the writer's
  life (a second writer is refused: :class:`ResultsLocked`). A new file gets a header
  recording the run's :class:`Fingerprints`; a file with results is refused unless
  ``resume``; resuming checks the fingerprints (a mismatch is refused unless ``force``),
  counts each dataset id once, and repairs a torn last line (only a line without its
  newline, only under the lock; see :mod:`evaluator._results_file._reader` for what is refused).
- :meth:`ResultsWriter.write`: stores any value (the rule is :mod:`evaluator._storable`:
  what JSON cannot hold is replaced and reported, never a crash) and turns a failing
  disk into one :class:`ResultsWriteError` saying what was written and how to resume.
- :func:`read_results` and :func:`done_ids` read a file back.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from .._call._results import Result
from .._exceptions import ResultsFileError, ResultsLocked, ResultsWriteError, ResumeMismatch
from .._fingerprint import FORMAT_VERSION, HEADER_KEY, Fingerprints, ResultsHeader, RunEnd, compare
from .._storable import StoreChange, encode_results
from ._reader import (
    Reader,
    ResultsScan,
    ResumeWarning,
    Torn,
    buffered,
    scan,
    torn_warning,
)

if sys.platform != "win32":
    import fcntl

__all__ = [
    "ResultsWriter",
    "ResumeWarning",
    "Resumed",
    "done_ids",
    "open_results",
    "read_results",
]

_encoder = msgspec.json.Encoder()
#: How many changes a writer keeps for its report (all are counted).
_KEEP_CHANGES = 100


def _encode_header(header: ResultsHeader) -> bytes:
    try:
        return _encoder.encode(header) + b"\n"
    except UnicodeEncodeError:
        # A path that is not valid text (a file name in another encoding): stored with
        # U+FFFD, so a later resume sees a moved file, not a crash.
        fixed = _fix_text(msgspec.to_builtins(header))
        return _encoder.encode(fixed) + b"\n"


def _fix_text(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_fix_text(k): _fix_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_text(v) for v in value]
    return value


class ResultsWriter:
    """Appends results to a results file; each :meth:`write` reaches the OS at once.

    ``with ResultsWriter(path) as writer:`` opens the file for appending and holds its
    lock until closed; an existing file must be a whole results file (use
    :func:`open_results` to resume one, which also repairs a torn last line). ``header``
    is written before the first result when the file is new.

    ``written`` counts the results this writer wrote; ``changes`` holds the first
    replacements the storing rule made (``changed`` counts them all).
    """

    def __init__(self, path: str | Path, *, header: ResultsHeader | None = None) -> None:
        self.path = Path(path)
        self.written = 0
        self.in_file = 0
        self.changes: list[StoreChange] = []
        self.changed = 0
        self.notes: list[str] = []
        self._header = header
        #: What this run evaluates (set by open_results): the line :meth:`finish` writes.
        self.fingerprints: Fingerprints | None = None
        self._fh: Any = None  # a raw binary file (io.FileIO), or a stand-in in tests
        self._end = 0
        self._broken: ResultsWriteError | None = None

    def __enter__(self) -> ResultsWriter:
        if self._fh is not None:  # opened by open_results: `with writer:` closes it after
            return self
        self._open()
        try:
            info = scan(self.path, self._fh)
            if info.torn is not None:
                raise ResultsFileError(
                    self.path,
                    info.torn.line,
                    "the file ends with an incomplete line",
                    "open it with open_results(..., resume=True) (the CLI's --resume), "
                    "which repairs it",
                )
            self.in_file = info.lines
            if not info.empty:
                self._header = None
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered, appending, readable (to scan it under the lock).
        fh = open(self.path, "a+b", buffering=0)  # noqa: SIM115 - held for the writer's life
        try:
            self._lock(fh)
            self._end = os.fstat(fh.fileno()).st_size
        except BaseException:
            fh.close()
            raise
        self._fh = fh

    def _lock(self, fh: io.FileIO) -> None:
        """Take the file's advisory lock, refusing at once if another writer holds it."""
        if sys.platform == "win32":  # pragma: no cover - no flock there
            self.notes.append("the results file is not locked on Windows")
            return
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResultsLocked(self.path) from None
        except OSError as exc:  # a file system without locks (some network mounts)
            self.notes.append(
                f"the results file could not be locked ({exc.strerror}); a second run "
                "writing it at the same time would not be refused"
            )

    def write(self, results: Iterable[Result]) -> list[StoreChange]:
        """Append ``results``, one line each, in one write; return the replacements made.

        Raises :class:`ResultsWriteError` if the file system fails (full disk, I/O
        error, read-only); the lines of this batch are then cut off again where the file
        system allows, so the file holds whole lines only, and every later call raises
        the same error.
        """
        if self._fh is None:
            raise RuntimeError("the results file is not open; use `with ResultsWriter(...)`")
        if self._broken is not None:
            raise self._failed(self._broken.cause)
        batch = results if isinstance(results, list) else list(results)
        if not batch:
            return []
        data, changes = encode_results(batch)
        if self._header is not None:
            data = _encode_header(self._header) + data
        try:
            _write_all(self._fh, data)
        except OSError as exc:
            self._undo()
            self._broken = self._failed(exc)
            raise self._broken from exc
        self._header = None
        self._end += len(data)
        self.written += len(batch)
        self.in_file += len(batch)
        if changes:
            self.changed += len(changes)
            room = _KEEP_CHANGES - len(self.changes)
            self.changes.extend(changes[: max(room, 0)])
        return changes

    def finish(self, ended: RunEnd) -> bool:
        """Append the line that says how the run ended (its wall time and throughput,
        read by ``skynet-eval report``): a header with this run's fingerprints and
        ``ended``. Nothing when this writer wrote no result, knows no fingerprints, or
        its file failed; False when the line could not be written (the results stand)."""
        if self._fh is None or self._broken is not None or not self.written:
            return True
        if self.fingerprints is None:
            return True
        header = ResultsHeader.new(
            self.fingerprints, note="the end of a run: its wall time and throughput", ended=ended
        )
        data = _encode_header(header)
        try:
            _write_all(self._fh, data)
        except OSError:
            self._undo()
            return False
        self._end += len(data)
        return True

    def _failed(self, cause: OSError) -> ResultsWriteError:
        return ResultsWriteError(self.path, self.written, self.in_file, cause)

    def _undo(self) -> None:
        """Cut a partly written batch off, so that the file ends on a whole line."""
        # If even that fails, the next resume drops the torn last line instead.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.ftruncate(self._fh.fileno(), self._end)

    def _append_raw(self, data: bytes) -> None:
        _write_all(self._fh, data)
        self._end += len(data)

    def close(self) -> None:
        """Close the file and release its lock."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            fh.close()


def _write_all(fh: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = fh.write(view)
        if not n:
            raise OSError(errno.EIO, "the file system accepted no bytes")
        view = view[n:]


class Resumed(msgspec.Struct):
    """What :func:`open_results` found in the file and kept.

    ``done_ids``: the dataset's ids that already have a result (skip them); ``results``:
    how many; ``foreign`` and ``duplicates``: result lines not counted (ids not in the
    dataset; an id's second and later lines); ``forced``: the fingerprint changes
    accepted under ``force``; ``legacy``: the file had no header; ``notes``: what to tell
    the user (each a sentence).
    """

    done_ids: set[Any]
    results: int = 0
    #: With ``run --repeat``: the ids already done in each later pass (1 to K-1).
    done_repeats: dict[int, set[Any]] = {}
    foreign: int = 0
    duplicates: int = 0
    forced: list[str] = []
    legacy: bool = False
    notes: list[str] = []


def open_results(
    path: str | Path,
    *,
    fingerprints: Fingerprints | None,
    resume: bool = False,
    force: bool = False,
    dataset_ids: Collection[Any] | None = None,
    on_result: Callable[[Result], None] | None = None,
    repeat: int = 1,
) -> tuple[ResultsWriter, Resumed]:
    """Open ``path`` for a run and return ``(writer, resumed)``; close the writer after.

    A new (or empty) file gets a header with ``fingerprints`` before its first result.
    A file with results is refused unless ``resume``. Resuming refuses a file written
    for other files (:class:`ResumeMismatch`) unless ``force``, which keeps its results
    for ids still in the dataset (and appends a header saying so); it counts each of
    ``dataset_ids`` once, calls ``on_result`` with each result kept (to rebuild the
    report), and repairs a torn last line. A file that is not a results file, or has a
    bad line, is refused and never changed. The lock is taken first, so all of this
    happens while no other writer can touch the file. ``repeat``: the passes over the
    dataset the run makes (``run --repeat``), recorded in the header when more than 1.
    """
    header = ResultsHeader.new(fingerprints, repeat=repeat) if fingerprints is not None else None
    writer = ResultsWriter(path, header=header)
    writer.fingerprints = fingerprints
    writer._open()
    try:
        resumed = _resume(writer, fingerprints, resume, force, dataset_ids, on_result)
    except BaseException:
        writer.close()
        raise
    resumed.notes[:0] = writer.notes
    return writer, resumed


def _resume(
    writer: ResultsWriter,
    prints: Fingerprints | None,
    resume: bool,
    force: bool,
    dataset_ids: Collection[Any] | None,
    on_result: Callable[[Result], None] | None,
) -> Resumed:
    path = writer.path
    if writer._end == 0:
        # A new (or empty) file: nothing to read, nor the dataset's ids to index for it.
        return Resumed(set())
    info = scan(path, writer._fh, dataset_ids=dataset_ids)
    if info.lines == 0:
        # Nothing to resume: empty, or the header of a run that wrote no result.
        _repair(writer, info)
        return Resumed(set())
    if not resume:
        raise ResultsFileError(
            path,
            None,
            f"the file already holds {info.lines} result(s)",
            "resume to go on from them (--resume; in Python, open_results(..., resume=True)), "
            "or choose another output file",
        )
    writer.in_file = info.lines
    resumed = Resumed(info.done_ids, info.counted, info.done_repeats, info.foreign, info.duplicates)
    _check_prints(writer, info, prints, force, resumed)
    _repair(writer, info, resumed.notes)
    _count_notes(info, dataset_ids, resumed.notes)
    if on_result is not None and info.counted:
        Reader(path, dataset_ids, on_result).read(buffered(writer._fh))
    return resumed


def _check_prints(
    writer: ResultsWriter,
    info: ResultsScan,
    prints: Fingerprints | None,
    force: bool,
    resumed: Resumed,
) -> None:
    """Compare the file's header with this run; decide whether a new header goes in.

    A header is appended (before this run's first result) when the file had none, or
    when a forced resume goes on with other files: the last header always describes the
    lines after it.
    """
    header = info.header
    notes = resumed.notes
    note: str | None = None
    if header is None:
        resumed.legacy = True
        notes.append(
            f"{writer.path} has no header (it predates fingerprints), so it cannot be "
            "checked that its results were made with these files; resuming from it, and "
            "adding a header so that the next resume is checked"
        )
        note = "added when resuming a file without a header"
    elif isinstance(header, dict):
        version = header.get(HEADER_KEY)
        if not force:
            raise ResultsFileError(
                writer.path,
                None,
                f"the header says format {version!r}; this skynet-eval reads format "
                f"{FORMAT_VERSION}",
                "use the version that wrote it, or force the resume (--force; in Python, "
                "open_results(..., force=True))",
            )
        resumed.forced.append(f"the header's format {version!r} could not be read")
    elif prints is not None:
        changes, moves = compare(header.fingerprints, prints)
        notes.extend(moves)
        if changes and not force:
            raise ResumeMismatch(writer.path, changes, info.counted)
        resumed.forced.extend(changes)
        if _selection(header.fingerprints) != _selection(prints):
            note = "appended by a resume with another selection of the dataset's examples"
    if resumed.forced:
        notes.append(
            f"resuming anyway (forced): kept {info.counted} result(s) made with other "
            f"files ({'; '.join(resumed.forced)}); they are not recomputed, and a new "
            "header marks where this run's results begin"
        )
        note = "appended by a forced resume: the lines before it were made with other files"
    if note is None or writer._header is None:
        writer._header = None  # the file's header already describes this run
    else:
        writer._header = msgspec.structs.replace(writer._header, note=note)


def _selection(prints: Fingerprints) -> Any:
    return None if prints.dataset is None else prints.dataset.selection


def _repair(writer: ResultsWriter, info: ResultsScan, notes: list[str] | None = None) -> None:
    torn = info.torn
    if torn is None:
        return
    if torn.whole:
        writer._append_raw(b"\n")
        if notes is not None:
            notes.append(f"{writer.path}:{torn.line}: the last line had no newline; added")
        return
    os.ftruncate(writer._fh.fileno(), torn.offset)
    os.fsync(writer._fh.fileno())
    writer._end = torn.offset
    if notes is not None:
        notes.append(
            f"{writer.path}:{torn.line}: cut off an incomplete last line ({torn.size} "
            "bytes) left by a run stopped mid-write; that example runs again"
        )


def _count_notes(info: ResultsScan, dataset_ids: Collection[Any] | None, notes: list[str]) -> None:
    if info.foreign:
        notes.append(
            f"ignored {info.foreign} result line(s) for ids that are not in the dataset, "
            "or not in this run's selection of it (left in the file, not counted)"
        )
    if info.duplicates:
        notes.append(
            f"ignored {info.duplicates} repeated result line(s) (an id's first result "
            "counts; two runs wrote this file?)"
        )
    if dataset_ids is None:
        notes.append("the dataset's ids were not given: results for other ids may be counted")


def read_results(path: str | Path, *, repair: bool = True) -> Iterator[Result]:
    """Every result line stored in ``path``, in file order (header lines skipped;
    duplicates included: :func:`open_results` counts each id once).

    An incomplete last line (a run killed mid-write) is dropped with a
    :class:`ResumeWarning`; with ``repair`` it is also cut off the file, but only when
    no writer holds the file's lock. A file that is not a results file raises
    :class:`NotAResultsFile`, a bad line :class:`ResultsFileError`; neither is changed.
    """
    p = Path(path)
    if not p.exists():
        return
    reader = Reader(p)
    with p.open("rb") as fh:
        yield from reader.iterate(fh)
    torn = reader.out.torn
    if torn is not None and not torn.whole:
        cut = repair and _cut_if_unlocked(p, torn)
        torn_warning(p, torn, cut=cut)


def _cut_if_unlocked(path: Path, torn: Torn) -> bool:
    """Cut a torn last line off, unless a writer holds the file (it may be its line)."""
    try:
        writer = ResultsWriter(path)
        writer._open()
    except ResultsLocked:
        return False
    try:
        os.ftruncate(writer._fh.fileno(), torn.offset)
        os.fsync(writer._fh.fileno())
    finally:
        writer.close()
    return True


def done_ids(path: str | Path, dataset_ids: Collection[Any] | None = None) -> set[Any]:
    """The example ids that have a result in ``path`` (only ``dataset_ids`` if given)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResumeWarning)
        return scan(path, dataset_ids=dataset_ids).done_ids
