"""Reading a results file back: what is in it, what may be repaired, what must be refused.

A results file is JSON Lines: header lines (an object with the key
``"skynet_eval_results"``, see :mod:`evaluator._fingerprint`) and result lines (a
:class:`Result`), blank lines allowed. A file written before headers existed has result
lines only; it is still a results file.

What is refused, never repaired:

- **A file that is not a results file** (its first line is neither a header nor a
  result; ``--output`` pointing at the dataset, say): :class:`NotAResultsFile`, and the
  file is not changed.
- **A complete line (one that ends with a newline) that is neither**, anywhere, the last
  line included: :class:`ResultsFileError` naming the line. Someone edited the file or
  another program wrote to it; deleting that line would destroy what they wrote.

What is repaired, and only when the caller holds the file's lock (so that it cannot be
another writer's line in the making):

- **A last line without its newline** is the one thing a killed writer leaves. If it is
  a whole header or result (cut just before the newline), the newline is added: nothing
  is lost. If it is the start of one (it begins like a result or header line, after at
  least one whole line, or with a whole header key), it is cut off with a
  :class:`ResumeWarning`; that example runs again. Anything else is refused like a bad
  line.

Reading counts each example once (ids matched by
:func:`evaluator._call._results.example_key`), or once per pass of a repeated run (keyed by the
id and :attr:`Result.repeat`): the first result of an id wins, later ones are
*duplicates* (two runs that wrote one file); with the dataset's ids given, results for
other ids are *foreign* (another dataset's file). Both are left in the file, never
counted, and reported by number.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from .._call._results import Result, example_key, result_key
from .._exceptions import NotAResultsFile, ResultsFileError
from .._fingerprint import FORMAT_VERSION, HEADER_KEY, ResultsHeader

__all__ = [
    "Reader",
    "ResultsScan",
    "ResumeWarning",
    "Torn",
    "buffered",
    "check_header",
    "diagnose",
    "scan",
    "torn_warning",
]

_result_decoder = msgspec.json.Decoder(Result)
_any_decoder = msgspec.json.Decoder()
RESULT_START = b'{"example_id":'
HEADER_START = b'{"' + HEADER_KEY.encode() + b'":'
_SHOWN = 60  # bytes of a bad line quoted in a strict reader's error


class ResumeWarning(UserWarning):
    """Something in a results file was set aside: a torn last line, old format, and so on."""


class Torn(msgspec.Struct, frozen=True):
    """The last line of a file, without its newline: at ``offset``, ``size`` bytes;
    ``whole`` when it is a complete header or result that only lacks the newline."""

    line: int
    offset: int
    size: int
    whole: bool


class ResultsScan:
    """What a results file holds (see :func:`scan`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Header lines, in file order, with their line numbers.
        self.headers: list[tuple[int, ResultsHeader | dict[str, Any]]] = []
        #: Ids counted: the first result of each id (restricted to the dataset's ids), of
        #: the first pass of a repeated run (``run --repeat``), or of the only one.
        self.done_ids: set[Any] = set()
        #: The ids counted for each later pass of a repeated run (pass 1 to K-1).
        self.done_repeats: dict[int, set[Any]] = {}
        #: Result lines read, counted or not.
        self.lines = 0
        #: Result lines not counted: an id seen before, or not in the dataset.
        self.duplicates = 0
        self.foreign = 0
        #: Results counted after the last header (made under it).
        self.since_header = 0
        #: A last line without its newline, if any.
        self.torn: Torn | None = None
        #: The byte offset just after the last whole line.
        self.end = 0

    @property
    def counted(self) -> int:
        return len(self.done_ids) + sum(len(ids) for ids in self.done_repeats.values())

    @property
    def empty(self) -> bool:
        """No header and no result (blank, or nothing at all)."""
        return not self.headers and not self.lines and self.torn is None

    @property
    def header(self) -> ResultsHeader | dict[str, Any] | None:
        """The header in force: the last one (results after it were made under it)."""
        return self.headers[-1][1] if self.headers else None

    @property
    def legacy(self) -> bool:
        """Results written before files had headers (or with none)."""
        return not self.headers and self.lines > 0


def _decode(decoder: msgspec.json.Decoder[Any], raw: bytes) -> Any:
    """Decode ``raw``; a line nested deeper than this thread's remaining stack allows is
    decoded again on a fresh thread, so every line the writer wrote reads back."""
    try:
        return decoder.decode(raw)
    except RecursionError:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = decoder.decode(raw)
            except BaseException as exc:  # handed to the caller's thread below
                box["error"] = exc

        thread = threading.Thread(target=target, name="skynet-results-decode")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"] from None
        return box["value"]


def _classify(raw: bytes) -> Result | ResultsHeader | dict[str, Any] | None:
    """A result, a header (a struct, or the raw object of a newer format), or None."""
    try:
        return _decode(_result_decoder, raw)  # type: ignore[no-any-return]
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        value = _decode(_any_decoder, raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(value, dict) or HEADER_KEY not in value:
        return None
    if value[HEADER_KEY] != FORMAT_VERSION:
        return value  # a format this version does not know: a header, unread
    try:
        return msgspec.convert(value, ResultsHeader)
    except msgspec.ValidationError:
        return value


def diagnose(path: str, number: int, raw: bytes, error: Exception, *, torn: bool) -> dict[str, Any]:
    """The header object of a line that is not a result, or the error that says why not
    (a strict reader's, for a report: the file and line, what is wrong, how to fix it)."""
    quoted = repr(raw[:_SHOWN]) + ("..." if len(raw) > _SHOWN else "")
    if isinstance(error, RecursionError):
        raise ResultsFileError(
            path,
            number,
            f"a value nested too deeply to read: {quoted}",
            "a result's output or extra must be nested less deeply; delete or repair that line",
        )
    try:
        value = _any_decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        if torn:
            raise ResultsFileError(
                path,
                number,
                f"the last line is cut short ({quoted}, no newline at its end): the run was "
                "stopped mid-write, or is still writing",
                "let the run finish, or go on with `skynet-eval run ... --resume` (which drops "
                "that line), or delete the line",
            ) from None
        raise ResultsFileError(
            path,
            number,
            f"not JSON ({error}): {quoted}",
            "a results file holds one JSON object per line, as `skynet-eval run --output` "
            "writes it; delete or repair that line",
        ) from None
    if isinstance(value, dict) and HEADER_KEY in value:
        return value
    if not isinstance(value, dict):
        problem = f"a JSON {type(value).__name__}, not a result object: {quoted}"
    elif "example_id" not in value or "score" not in value:
        keys = ", ".join(repr(k) for k in list(value)[:8]) or "none"
        problem = (
            f"an object that is not a result (keys {keys}; a result has 'example_id' and "
            "'score'), perhaps a dataset row or another tool's output"
        )
    else:
        problem = f"a result with a bad field: {error}"
    raise ResultsFileError(
        path, number, problem, "pass the results file `skynet-eval run --output` wrote"
    )


def check_header(path: str, number: int, value: dict[str, Any]) -> dict[str, Any]:
    version = value[HEADER_KEY]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ResultsFileError(
            path,
            number,
            f"a header whose format version {HEADER_KEY!r} is {version!r}, not a positive integer",
            "repair or delete that line",
        )
    if version > FORMAT_VERSION:
        raise ResultsFileError(
            path,
            number,
            f"written by a newer skynet-eval (results format {version}; this one reads "
            f"format {FORMAT_VERSION})",
            "upgrade skynet-eval to report on it",
        )
    return value


def _looks_torn(raw: bytes, after_records: bool) -> bool:
    """Whether an unterminated last line is the start of a line the writer writes."""
    text = raw.lstrip()
    if text.startswith((RESULT_START, HEADER_START)):
        return True
    return (
        after_records
        and bool(text)
        and (RESULT_START.startswith(text) or HEADER_START.startswith(text))
    )


def _shown(raw: bytes) -> str:
    text = raw[:60].decode("utf-8", "replace").rstrip("\n")
    return repr(text + ("..." if len(raw) > 60 else ""))


def scan(
    path: str | Path,
    fh: IO[bytes] | None = None,
    *,
    dataset_ids: Collection[Any] | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> ResultsScan:
    """Read a results file (from ``fh`` when given, positioned anywhere) without changing it.

    ``dataset_ids``: count only results for these ids (others are foreign).
    ``on_result`` is called with every counted result in file order (to rebuild a
    report). ``fh`` is left open (it is read through a duplicate descriptor).
    Raises :class:`NotAResultsFile` or :class:`ResultsFileError` as the module says; a
    torn last line is reported in ``.torn``, not repaired.
    """
    p = Path(path)
    reader = Reader(p, dataset_ids, on_result)
    if fh is None:
        if not p.exists():
            return reader.out
        with p.open("rb") as own:
            return reader.read(own)
    return reader.read(buffered(fh))


def buffered(fh: IO[bytes]) -> IO[bytes]:
    """A buffered reader from the start of ``fh``'s file, on a descriptor of its own.

    A writer's file is unbuffered (each write reaches the OS at once), and reading lines
    from an unbuffered file costs a system call per byte. The duplicate shares the file
    and its lock; the writer appends (``O_APPEND``), so where this one reads is moot.
    """
    reader = open(os.dup(fh.fileno()), "rb")  # noqa: SIM115 - closed by the caller's reading
    reader.seek(0)
    return reader


class Reader:
    """Reads one results file line by line; :attr:`out` is what it found so far.

    ``strict`` is the report's reading (:mod:`evaluator._results_file._load`): a report
    cannot redo an example, so every line that is not a result or a header, a torn last
    line included, raises the :class:`ResultsFileError` of :func:`diagnose`; headers are
    kept as written (version-checked by :func:`check_header`); ``decoder`` decodes
    result lines (a :class:`Result` subclass); :attr:`numbers` holds each result's line.
    ``bulk`` (strict readers) decodes the lines between a first header and a run's end
    line in one pass in C, and reads line by line only when one of them is not a result.
    """

    def __init__(
        self,
        path: Path,
        dataset_ids: Collection[Any] | None = None,
        on_result: Callable[[Result], None] | None = None,
        *,
        strict: bool = False,
        bulk: bool = False,
        decoder: msgspec.json.Decoder[Any] | None = None,
    ) -> None:
        self.path = path
        self.strict = strict
        self.bulk = bulk
        self.decoder = decoder
        #: The line number of each result line, in file order (strict readers only).
        self.numbers: list[int] = []
        self.out = ResultsScan(path)
        self.wanted = {example_key(i): i for i in dataset_ids} if dataset_ids is not None else None
        self.seen: set[Any] = set()
        self.on_result = on_result

    def read(self, fh: IO[bytes]) -> ResultsScan:
        """Read all of ``fh`` (and close it); the scan is :attr:`out`."""
        with fh:
            for _ in self.iterate(fh):
                pass
        return self.out

    def iterate(self, fh: IO[bytes]) -> Iterator[Result]:
        """Every result line of ``fh`` in file order (duplicates and foreign ones too),
        counting as it goes; raises at the first line that is refused."""
        if self.strict:
            yield from self._strict(fh)
            return
        out = self.out
        offset = 0
        for number, raw in enumerate(fh, start=1):
            start, offset = offset, offset + len(raw)
            terminated = raw.endswith(b"\n")
            blank = not raw.strip()
            record = None if blank else _classify(raw)
            if not terminated:
                # Only the last line can lack its newline.
                out.torn = self._torn(number, start, raw, record, blank)
                if not out.torn.whole:
                    return
            elif blank or record is not None:
                out.end = offset
            else:
                self._refuse(number, raw)
            if isinstance(record, Result):
                out.lines += 1
                self._count(record)
                yield record
            elif record is not None:
                out.headers.append((number, record))
                out.since_header = 0

    def _strict(self, fh: IO[bytes]) -> Iterator[Result]:
        lines = fh.read().split(b"\n")
        if self.bulk:
            bulk = self._bulk(lines)
            if bulk is not None:
                yield from bulk
                return
        for index in range(len(lines)):
            yield from self._strict_line(lines, index)

    def _strict_line(self, lines: list[bytes], index: int) -> Iterator[Result]:
        """The result on ``lines[index]`` (none for a blank line or a header, which is
        kept), or the error that names the line."""
        raw = lines[index]
        if not raw.strip():
            return
        out = self.out
        name = str(self.path)
        try:
            record = (self.decoder or _result_decoder).decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            # lines[-1] follows the final newline (b"" normally): only it can be torn.
            found = diagnose(name, index + 1, raw, exc, torn=index == len(lines) - 1)
            out.headers.append((index + 1, check_header(name, index + 1, found)))
            return
        out.lines += 1
        self.numbers.append(index + 1)
        self._count(record)
        yield record

    def _bulk(self, lines: list[bytes]) -> list[Result] | None:
        """Every line between a first header line and a last one (a run's end line)
        decoded in one pass in C, as results; None when any of them is not one (a blank
        line, a later session's header, a bad line): the line by line read then finds
        and names it, so this read needs no message of its own."""
        lo, hi = 0, len(lines)
        while hi > lo and not lines[hi - 1].strip():
            hi -= 1  # the empty string after the final newline
        first = lo < hi and lines[lo].startswith(HEADER_START)
        lo += first
        last = hi > lo and lines[hi - 1].startswith(HEADER_START)
        hi -= last
        try:
            records = list(map((self.decoder or _result_decoder).decode, lines[lo:hi]))
        except (msgspec.DecodeError, RecursionError):
            return None
        # A header is kept (or refused) and yields nothing; a result, as the first line.
        head = list(self._strict_line(lines, 0)) if first else []
        out = self.out
        out.lines += len(records)
        self.numbers.extend(range(lo + 1, hi + 1))
        count = self._count
        for record in records:
            count(record)
        if last:
            # After the results, as the line by line read keeps it.
            records.extend(self._strict_line(lines, hi))
        return head + records if head else records

    def _torn(self, number: int, start: int, raw: bytes, record: Any, blank: bool) -> Torn:
        out = self.out
        if record is not None or blank:
            return Torn(number, start, len(raw), whole=True)
        if _looks_torn(raw, after_records=bool(out.headers or out.lines)):
            return Torn(number, start, len(raw), whole=False)
        self._refuse(number, raw)
        raise AssertionError("unreachable")  # pragma: no cover - _refuse raises

    def _refuse(self, number: int, raw: bytes) -> None:
        out = self.out
        if not out.headers and not out.lines:
            raise NotAResultsFile(
                self.path,
                number,
                f"this is not a results file: its first line ({_shown(raw)}) is neither a "
                "results header nor a result, so it was not changed",
                "choose another output file (the dataset and other files are never written to)",
            )
        ended = "" if raw.endswith(b"\n") else " (it has no newline, but is not the start of one)"
        raise ResultsFileError(
            self.path,
            number,
            f"not a result line{ended}: {_shown(raw)}; the file was not changed (it was "
            "edited, or another program wrote to it)",
            "fix or delete that line to resume, or choose another output file",
        )

    def _count(self, result: Result) -> None:
        out = self.out
        # One result per (id, pass): a run without repeats has only pass 0.
        pair = result_key(result)
        key, repeat = pair
        wanted = self.wanted
        if wanted is not None and key not in wanted:
            out.foreign += 1
            return
        if pair in self.seen:
            out.duplicates += 1
            return
        self.seen.add(pair)
        # The dataset's own id object, so that `example.id in done_ids` holds.
        done = out.done_ids if not repeat else out.done_repeats.setdefault(repeat, set())
        done.add(wanted[key] if wanted is not None else result.example_id)
        out.since_header += 1
        if self.on_result is not None:
            self.on_result(result)


def torn_warning(path: Path, torn: Torn, *, cut: bool) -> None:
    """Warn that a torn last line was set aside (and ``cut`` off the file, or not)."""
    where = "cut off the file" if cut else "left in the file"
    warnings.warn(
        f"{path}:{torn.line}: dropped an incomplete last line ({torn.size} bytes, {where}), "
        "left by a run that was stopped mid-write; that example will be run again",
        ResumeWarning,
        stacklevel=3,
    )
