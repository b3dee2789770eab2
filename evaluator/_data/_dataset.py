"""Datasets: JSON Lines, JSON (a list of objects) and CSV, loaded lazily as ``Example``s.

The canonical row is ``{"id": ..., "input": {...}, "expected": {...} | null, "output": ...}``
(``expected`` and ``output`` optional). Flat rows are mapped by ``input_cols`` and
``output_cols``; ``expected`` is then the dict of the output columns, keyed by column name.
A column named ``output`` that is neither an input nor an output column gives the
example's output for score-only runs.

Ids: a string or an integer (``"2"`` and ``2`` are different ids); a row without one (or
with ``null`` or ``""``) gets its 0-based position. Ids are unique in a file; when a
position meets an explicit id, the message names both rows and says to give every row an
id. How files are read (encodings, byte-order marks, NaN, nesting) is
:mod:`evaluator._data._datafile`'s. :func:`read_dataset` reads a JSON Lines file of
canonical rows whole, in a few passes in C (:func:`_bulk_read`), and any other file, or
one with a row that read refuses, row by row, which names what is wrong.

A :class:`Selection` picks some of a dataset's examples to try first: the first N, N
drawn at random with a seed, or those with given ids; always in the dataset's order, and
recorded in a results file's header so that a resume knows what was chosen.
"""

from __future__ import annotations

import codecs
import difflib
import hashlib
import random
from array import array
from collections.abc import Callable, Generator, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .._call._results import example_key
from .._exceptions import ConfigError, DatasetError
from ._datafile import (
    _DEEP_BYTES,
    _SNIFF,
    _may_be_too_deep,
    _skip_bom,
    csv_rows,
    json_rows,
    jsonl_rows,
    too_deep,
    too_deep_problem,
)

__all__ = [
    "NO_OUTPUT",
    "DatasetRead",
    "Example",
    "Selection",
    "examples_from_rows",
    "load_examples",
    "read_dataset",
]

if TYPE_CHECKING:
    from ._seen_ids import SeenIds

NO_OUTPUT: Any = msgspec.UNSET


class Example(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One dataset example; ``output`` is ``NO_OUTPUT`` unless the row carries one.

    ``gc=False``: a dataset holds many of these and the cyclic collector rescanning them
    all slows every run down; an example holds the row's data, built before it, so it
    cannot be part of a reference cycle.
    """

    id: Any
    input: dict[str, Any]
    expected: dict[str, Any] | None = None
    output: Any = msgspec.UNSET


_CANONICAL_KEYS = frozenset({"id", "input", "expected", "output"})


def _row_to_example(
    row: Any,
    position: int,
    *,
    input_cols: Sequence[str] | None,
    output_cols: Sequence[str] | None,
    path: str | None,
    line: int | None,
    id_col: str | None = None,
) -> Example:
    if isinstance(row, Example):
        return row
    # A row in memory is named by its position (a file's by its path and line).
    where = f"row {position}: " if path is None and line is None else ""
    if not isinstance(row, dict):
        raise DatasetError(
            path,
            line,
            f"{where}row is a {type(row).__name__}, not an object; each row must be a JSON object",
        )
    if where and too_deep(row):  # a file's rows were measured as they were read
        raise DatasetError(path, line, where + too_deep_problem())
    try:
        example_id = _id_of(row, position, id_col)
        if input_cols:
            return _flat_example(row, example_id, input_cols, output_cols)
        return _canonical_example(row, example_id, output_cols)
    except _RowProblem as exc:
        raise DatasetError(path, line, f"{where}{exc}") from None


class _RowProblem(Exception):
    """What is wrong with a row, before it is placed in its file."""


def _id_of(row: dict[str, Any], position: int, id_col: str | None = None) -> Any:
    key = id_col or "id"
    if id_col is not None and id_col not in row:
        raise _RowProblem(
            f"missing id column {id_col!r}{_guess([id_col], row)} (the row has {_have(row)})"
        )
    example_id = row.get(key, position)
    if example_id is None or example_id == "":
        example_id = position
    if isinstance(example_id, bool) or not isinstance(example_id, (str, int)):
        raise _RowProblem(f"{key!r} is a {type(example_id).__name__}; use a string or an integer")
    return example_id


def _have(row: dict[str, Any]) -> str:
    return ", ".join(map(repr, row)) or "none"


def _guess(missing: Sequence[str], row: dict[str, Any]) -> str:
    """`` (did you mean 'question' for 'questoin'?)`` for the names close to a key."""
    keys = [k for k in row if isinstance(k, str)]
    pairs = [(m, difflib.get_close_matches(m, keys, n=1)) for m in missing]
    shown = [f"{close[0]!r} for {m!r}" for m, close in pairs if close]
    return f" (did you mean {', '.join(shown)}?)" if shown else ""


def _flat_example(
    row: dict[str, Any],
    example_id: Any,
    input_cols: Sequence[str],
    output_cols: Sequence[str] | None,
) -> Example:
    missing = [c for c in input_cols if c not in row]
    if missing:
        raise _RowProblem(
            f"missing input column(s) {missing}{_guess(missing, row)} (the row has {_have(row)})"
        )
    inputs = {c: row[c] for c in input_cols}
    expected: dict[str, Any] | None = None
    if output_cols:
        absent = [c for c in output_cols if c not in row]
        if absent:
            raise _RowProblem(
                f"missing output column(s) {absent}{_guess(absent, row)} (the row has {_have(row)})"
            )
        expected = {c: row[c] for c in output_cols}
    output = row.get("output", msgspec.UNSET) if "output" not in input_cols else msgspec.UNSET
    return Example(id=example_id, input=inputs, expected=expected, output=output)


def _canonical_example(
    row: dict[str, Any], example_id: Any, output_cols: Sequence[str] | None
) -> Example:
    if "input" not in row:
        raise _RowProblem(
            f"row has no 'input' object (it has keys {_have(row)}); use the canonical row "
            '{"id", "input": {...}, "expected": {...}} or name the flat columns with '
            "--input-cols (and --output-cols for the expected values; in Python, "
            "input_cols= and output_cols=)"
        )
    inputs = row["input"]
    if not isinstance(inputs, dict):
        raise _RowProblem(f"'input' is a {type(inputs).__name__}, not an object of input fields")
    expected = row.get("expected")
    if expected is not None and not isinstance(expected, dict):
        if not output_cols or len(output_cols) != 1:
            raise _RowProblem(
                f"'expected' is a {type(expected).__name__}, not an object; write it as "
                '{"<output column>": value} or pass one --output-cols name (in Python, '
                "output_cols=) to wrap it"
            )
        expected = {output_cols[0]: expected}
    unknown = set(row) - _CANONICAL_KEYS
    if unknown:
        raise _RowProblem(
            f"unknown key(s) {sorted(unknown)} beside 'input'; put input fields inside 'input' "
            "and expected values inside 'expected'"
        )
    return Example(
        id=example_id, input=inputs, expected=expected, output=row.get("output", msgspec.UNSET)
    )


class _Unique:
    """Rejects a duplicate id, naming both rows, and whether an id was given or positional.

    A row without an id gets its 0-based position as its id, so a positional id can meet
    an explicit one (row 3 has no id and is given ``2``; another row says ``"id": 2``):
    the message then says so and how to avoid it, rather than name an id the file never
    wrote. ``"2"`` and ``2`` are different ids (JSON keeps them apart; so does the
    results file: both match ids by :func:`evaluator._call._results.example_key`).

    The ids taken are a :class:`SeenIds` (id -> position, the one store of ids taken: a
    library stream's too, through :func:`check_unique_ids`), keyed by ``example_key``;
    beside it, for the message alone, each row's line (0: none) and whether its id was
    given: 9 bytes a row. ``unit`` names a row without a line: "item" in a JSON list,
    "row" in memory.
    """

    def __init__(self, unit: str) -> None:
        # Imported here: a worker process imports this module (for the fingerprint's
        # Selection) and never checks ids.
        from ._seen_ids import SeenIds

        self.unit = unit
        self.seen: SeenIds = SeenIds()
        self._lines = array("q")
        self._explicit = bytearray()

    def check(self, example: Example, position: int, line: int | None, explicit: bool) -> None:
        """Take ``example``'s id (the row at ``position``, on ``line``), or raise
        :class:`_Duplicate` naming both rows."""
        key = example_key(example.id)
        seen = self.seen
        if key in seen:
            first = seen[key]
            first_where = self._where(first, self._lines[first])
            self._refuse(example.id, self._where(position, line), explicit, first_where, first)
        seen[key] = position
        self._lines.append(line or 0)
        self._explicit.append(explicit)

    def _where(self, position: int, line: int | None) -> str:
        return f"line {line}" if line else f"{self.unit} {position}"

    def _refuse(self, ident: Any, where: str, explicit: bool, first_where: str, first: int) -> None:
        if explicit and self._explicit[first]:
            raise _Duplicate(f"duplicate id {ident!r} (first at {first_where}); ids must be unique")
        positional, other = (where, first_where) if not explicit else (first_where, where)
        raise _Duplicate(
            f"id {ident!r} is used twice: {positional} has no id, so its position "
            f"{ident!r} is its id, and {other} has the id {ident!r}; give every "
            "row an id (or none), so that positions and ids cannot meet"
        )


class _Duplicate(Exception):
    """A duplicate id, before it is placed in its file."""


def check_unique_ids(seen: MutableMapping[Any, int], examples: list[Example], start: int) -> None:
    """Refuses an id already ``seen`` (id -> position) or repeated in ``examples`` (those
    at positions ``start ..``), naming the id, both positions and the parameter: the
    library's ``examples``, as :class:`_Unique` is the files' (the same store of ids
    taken, :class:`SeenIds`, as the Source passes it). One update per chunk; only a
    duplicate pays for a loop."""
    ids = [ex.id for ex in examples]
    fresh = dict(zip(ids, range(start, start + len(ids)), strict=True))
    if len(fresh) == len(examples) and seen.keys().isdisjoint(fresh):
        seen.update(fresh)
        return
    for position, ex in enumerate(examples, start):
        first = seen.setdefault(ex.id, position)
        if first != position:
            raise DatasetError(
                None,
                None,
                f"`examples` has the id {ex.id!r} twice, at positions {first} and {position}; "
                "every example needs its own id (a row without an id gets its position as "
                "its id); to score an example more than once on purpose, pass "
                "unique_ids=False",
            )


def _explicit_id(row: Any, id_col: str | None = None) -> bool:
    if isinstance(row, Example):
        return True
    return isinstance(row, dict) and row.get(id_col or "id") not in (None, "")


def examples_from_rows(
    rows: Iterable[Any],
    *,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    check_unique: bool = True,
) -> Iterator[Example]:
    """Examples from in-memory rows (dicts or ``Example``s), lazily."""
    unique = _Unique("row") if check_unique else None
    for position, row in enumerate(rows):
        example = _row_to_example(
            row, position, input_cols=input_cols, output_cols=output_cols, path=None, line=None
        )
        if unique is not None:
            try:
                unique.check(example, position, None, _explicit_id(row))
            except _Duplicate as exc:
                raise DatasetError(None, None, f"row {position}: {exc}") from None
        yield example


def load_examples(
    path: str | Path,
    *,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    id_col: str | None = None,
    digest: Any = None,
) -> Generator[Example, None, None]:
    """Stream the examples of a ``.jsonl``/``.ndjson``, ``.json`` or ``.csv`` file.

    ``id_col``: the column (key) that holds each row's id (default ``id``; a row without
    one gets its position). CSV values, ids included, arrive as strings.

    Every bad row raises :class:`DatasetError` naming the file, the line and the problem;
    the file rules (encoding, byte-order marks, NaN, nesting) are those of
    :mod:`evaluator._data._datafile`. ``digest`` (a ``hashlib`` object), when given, is
    updated with every byte of the file as it is read.
    """
    p = Path(path)
    if not p.is_file():
        what = "a directory, not a file" if p.is_dir() else "no such file"
        raise DatasetError(p, None, what)
    suffix = p.suffix.lower()
    if suffix == ".csv" and not input_cols:
        raise DatasetError(
            p,
            None,
            "a CSV dataset needs --input-cols (and --output-cols for expected values; in "
            "Python, input_cols= and output_cols=)",
        )
    if suffix not in _READERS:
        raise DatasetError(p, None, f"unknown dataset type {suffix!r}; use .jsonl, .json or .csv")
    return _load(p, suffix, input_cols, output_cols, id_col, digest)


@dataclass(frozen=True, slots=True)
class DatasetRead:
    """One read of a dataset file: the examples a run takes (every one, or those of a
    selection) and the SHA-256 of every byte of the file, from the same read."""

    examples: list[Example]
    sha256: str


def read_dataset(
    path: str | Path,
    *,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    id_col: str | None = None,
    selection: Selection | None = None,
) -> DatasetRead:
    """The file read once: every row checked as in :func:`load_examples`, the examples
    kept, the bytes hashed as they are read (a run's fingerprint needs no second read,
    and names exactly the bytes its examples came from). With a ``limit`` the rows past
    it are hashed but not parsed, as a lazy read would leave them."""
    if selection is None or selection.sample is not None:  # every row is read
        bulk = _bulk_read(Path(path), input_cols, id_col)
        if bulk is not None:
            every, sha256 = bulk
            if selection is not None:
                every = list(selection.select(lambda: iter(every)))
            return DatasetRead(every, sha256)
    digest = hashlib.sha256()
    rows = load_examples(
        path, input_cols=input_cols, output_cols=output_cols, id_col=id_col, digest=digest
    )
    try:
        if selection is None:
            examples = list(rows)
        elif selection.sample is not None:
            every = list(rows)  # a sample counts, then takes: from the one read
            examples = list(selection.select(lambda: iter(every)))
        else:
            examples = list(selection.select(lambda: rows))
    finally:
        rows.close()  # a reader stopped early hashes the rest of the file as it closes
    return DatasetRead(examples, digest.hexdigest())


class _Row(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A canonical row as the bulk read takes it: what :func:`_canonical_example` accepts
    without a question (no wrapped ``expected``, no unknown key, an id or none)."""

    input: dict[str, Any]
    id: str | int | None = None
    expected: dict[str, Any] | None = None
    output: Any = msgspec.UNSET


_ROW_DECODER = msgspec.json.Decoder(_Row)
#: Files up to this size are read whole by :func:`_bulk_read` (the examples are kept
#: in memory anyway); larger ones row by row.
_BULK_BYTES = 1 << 28


def _bulk_read(
    p: Path, input_cols: Sequence[str] | None, id_col: str | None
) -> tuple[list[Example], str] | None:
    """A JSON Lines file of canonical rows, read in a few passes in C: every line decoded
    straight into a typed row (which checks its shape), the ids made unique by one set.
    ``None`` when the file is anything else or any row is wrong in any way: the row by
    row read (:func:`_load`) then reads it again and names what is wrong, where and the
    fix, so this read needs no message of its own, and accepts only what that read
    accepts."""
    if input_cols or id_col is not None or p.suffix.lower() not in (".jsonl", ".ndjson"):
        return None
    try:
        if not p.is_file() or p.stat().st_size > _BULK_BYTES:
            return None
        data = p.read_bytes()
    except OSError:
        return None
    sha256 = hashlib.sha256(data).hexdigest()
    data = data[_skip_bom(p, data[:_SNIFF]) :]  # refuses UTF-16 and -32 as the rows' read does
    if codecs.BOM_UTF8 in data:
        return None  # files joined with their marks: the row reader's case
    lines = [raw for raw in data.split(b"\n") if raw and not raw.isspace()]
    if any(_may_be_too_deep(raw) for raw in lines if len(raw) >= _DEEP_BYTES):
        return None
    try:
        rows = list(map(_ROW_DECODER.decode, lines))
    except (msgspec.DecodeError, RecursionError):
        return None
    ids = [
        position if row.id is None or row.id == "" else row.id for position, row in enumerate(rows)
    ]
    # str | int only (no bool): equal as Python values exactly when example_key is equal.
    if len(set(ids)) != len(ids):
        return None
    examples = [
        Example(id=i, input=row.input, expected=row.expected, output=row.output)
        for i, row in zip(ids, rows, strict=True)
    ]
    return examples, sha256


_READERS: dict[str, Callable[[Path, Any], Generator[tuple[int | None, Any], None, None]]] = {
    ".jsonl": jsonl_rows,
    ".ndjson": jsonl_rows,
    ".json": json_rows,
    ".csv": csv_rows,
}


def _load(
    p: Path,
    suffix: str,
    input_cols: Sequence[str] | None,
    output_cols: Sequence[str] | None,
    id_col: str | None = None,
    digest: Any = None,
) -> Generator[Example, None, None]:
    unique = _Unique("item")
    reader = _READERS[suffix](p, digest)
    try:
        for position, (line, row) in enumerate(reader):
            # A JSON list has no line per row: name the item's index instead.
            where = str(p) if line is not None else f"{p} (item {position})"
            example = _row_to_example(
                row,
                position,
                input_cols=input_cols,
                output_cols=output_cols,
                path=where,
                line=line,
                id_col=id_col,
            )
            try:
                unique.check(example, position, line, _explicit_id(row, id_col))
            except _Duplicate as exc:
                raise DatasetError(where, line, str(exc)) from None
            yield example
    finally:
        reader.close()  # stopped early: the reader finishes its digest as it closes


class Selection(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=False):
    """Which of a dataset's examples a run takes: the first ``limit``, ``sample`` drawn
    with ``seed`` (the same seed, the same examples), or those whose id is in ``ids``
    (ids as text: ``2`` matches the integer id 2). At most one of the three."""

    limit: int | None = None
    sample: int | None = None
    seed: int | None = None
    ids: list[str] | None = None

    def describe(self) -> str:
        """The selection in words, for a note."""
        if self.limit is not None:
            return f"the first {self.limit:,} examples"
        if self.sample is not None:
            return f"{self.sample:,} examples drawn with seed {self.seed or 0}"
        if self.ids is not None:
            shown = ",".join(self.ids[:5]) + (",..." if len(self.ids) > 5 else "")
            return f"{len(self.ids):,} examples by id ({shown})"
        return "every example"

    def select(self, examples: Callable[[], Iterator[Example]]) -> Iterator[Example]:
        """The chosen examples, in the dataset's order; ``examples`` reads the dataset
        afresh at each call (a sample reads it twice: to count, then to take)."""
        if self.limit is not None:
            return islice(examples(), self.limit)
        if self.sample is not None:
            total = sum(1 for _ in examples())
            chosen = set(
                random.Random(self.seed or 0).sample(range(total), min(self.sample, total))
            )
            return (ex for i, ex in enumerate(examples()) if i in chosen)
        if self.ids is not None:
            return iter(self._by_id(examples()))
        return examples()

    def _by_id(self, examples: Iterator[Example]) -> list[Example]:
        wanted = dict.fromkeys(self.ids or ())
        found: list[Example] = []
        seen: list[str] = []
        for example in examples:
            key = str(example.id)
            seen.append(key)
            if key in wanted:
                found.append(example)
                wanted.pop(key)
        if wanted:
            missing = list(wanted)
            close = [m for m in (difflib.get_close_matches(k, seen, n=1) for k in missing) if m]
            hint = f" (did you mean {', '.join(repr(m[0]) for m in close)}?)" if close else ""
            raise ConfigError(
                f"names ids no example has: {', '.join(map(repr, missing))}{hint}; the "
                f"dataset's ids begin {', '.join(map(repr, seen[:5]))}",
                option="ids",
                value=self.ids,
            )
        return found
