"""Datasets: JSON Lines, JSON (a list of objects) and CSV, loaded lazily as ``Example``s.

The canonical row is ``{"id": ..., "input": {...}, "expected": {...} | null, "output": ...}``
(``expected`` and ``output`` optional). Flat rows are mapped by ``input_cols`` and
``output_cols``; ``expected`` is then the dict of the output columns, keyed by column name.
A column named ``output`` that is neither an input nor an output column gives the
example's output for score-only runs. A row without an id gets its 0-based position.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ._exceptions import DatasetError

__all__ = ["NO_OUTPUT", "Example", "examples_from_rows", "load_examples"]

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
) -> Example:
    def fail(problem: str) -> DatasetError:
        return DatasetError(path, line, problem)

    if isinstance(row, Example):
        return row
    if not isinstance(row, dict):
        raise fail(f"row is a {type(row).__name__}, not an object; each row must be a JSON object")
    example_id = row.get("id", position)
    if example_id is None or example_id == "":
        example_id = position
    if isinstance(example_id, bool) or not isinstance(example_id, (str, int)):
        raise fail(f"'id' is a {type(example_id).__name__}; use a string or an integer")
    if input_cols:
        missing = [c for c in input_cols if c not in row]
        if missing:
            have = ", ".join(map(repr, row)) or "none"
            raise fail(f"missing input column(s) {missing} (the row has {have})")
        inputs = {c: row[c] for c in input_cols}
        expected: dict[str, Any] | None = None
        if output_cols:
            absent = [c for c in output_cols if c not in row]
            if absent:
                have = ", ".join(map(repr, row))
                raise fail(f"missing output column(s) {absent} (the row has {have})")
            expected = {c: row[c] for c in output_cols}
        output = row.get("output", msgspec.UNSET) if "output" not in input_cols else msgspec.UNSET
        return Example(id=example_id, input=inputs, expected=expected, output=output)
    if "input" not in row:
        have = ", ".join(map(repr, row)) or "none"
        raise fail(
            f"row has no 'input' object (it has keys {have}); use the canonical row "
            '{"id", "input": {...}, "expected": {...}} or name the flat columns with '
            "--input-cols (and --output-cols for the expected values)"
        )
    inputs = row["input"]
    if not isinstance(inputs, dict):
        raise fail(f"'input' is a {type(inputs).__name__}, not an object of input fields")
    expected = row.get("expected")
    if expected is not None and not isinstance(expected, dict):
        if output_cols and len(output_cols) == 1:
            expected = {output_cols[0]: expected}
        else:
            raise fail(
                f"'expected' is a {type(expected).__name__}, not an object; write it as "
                '{"<output column>": value} or pass one --output-cols name to wrap it'
            )
    unknown = set(row) - _CANONICAL_KEYS
    if unknown:
        raise fail(
            f"unknown key(s) {sorted(unknown)} beside 'input'; put input fields inside 'input' "
            "and expected values inside 'expected'"
        )
    return Example(
        id=example_id, input=inputs, expected=expected, output=row.get("output", msgspec.UNSET)
    )


class _Unique:
    """Rejects a duplicate id, naming where it was first seen."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.seen: dict[Any, int | None] = {}

    def check(self, example: Example, line: int | None) -> Example:
        key = (type(example.id) is int, example.id)
        if key in self.seen:
            first = self.seen[key]
            where = f" (first at line {first})" if first is not None else ""
            raise DatasetError(
                self.path, line, f"duplicate id {example.id!r}{where}; ids must be unique"
            )
        self.seen[key] = line
        return example


def examples_from_rows(
    rows: Iterable[Any],
    *,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    check_unique: bool = True,
) -> Iterator[Example]:
    """Examples from in-memory rows (dicts or ``Example``s), lazily."""
    unique = _Unique(None) if check_unique else None
    for position, row in enumerate(rows):
        example = _row_to_example(
            row, position, input_cols=input_cols, output_cols=output_cols, path=None, line=None
        )
        if unique is not None:
            try:
                unique.check(example, None)
            except DatasetError as exc:
                raise DatasetError(None, None, f"row {position}: {exc.problem}") from None
        yield example


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    decoder = msgspec.json.Decoder()
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield line_no, decoder.decode(raw)
            except msgspec.DecodeError as exc:
                raise DatasetError(path, line_no, f"broken JSON: {exc}") from None


def _json_rows(path: Path) -> Iterator[tuple[int | None, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            path, exc.lineno, f"broken JSON: {exc.msg} (column {exc.colno})"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("examples"), list):
        data = data["examples"]
    if not isinstance(data, list):
        raise DatasetError(
            path, 1, f"the file holds a {type(data).__name__}; a JSON dataset is a list of objects"
        )
    for row in data:
        yield None, row


def _csv_rows(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None:
            return
        dupes = {c for c in reader.fieldnames if reader.fieldnames.count(c) > 1}
        if dupes:
            raise DatasetError(path, 1, f"duplicate column name(s) {sorted(dupes)} in the header")
        try:
            for row in reader:
                line = reader.line_num
                if None in row:
                    raise DatasetError(
                        path,
                        line,
                        f"row has {len(reader.fieldnames) + len(row[None])} fields, "
                        f"the header has {len(reader.fieldnames)}",
                    )
                if any(v is None for v in row.values()):
                    raise DatasetError(
                        path,
                        line,
                        f"row has fewer fields than the header's {len(reader.fieldnames)}",
                    )
                yield line, row
        except csv.Error as exc:
            raise DatasetError(path, reader.line_num, f"broken CSV: {exc}") from None


def load_examples(
    path: str | Path,
    *,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
) -> Iterator[Example]:
    """Stream the examples of a ``.jsonl``/``.ndjson``, ``.json`` or ``.csv`` file.

    Every bad row raises :class:`DatasetError` naming the file, the line and the problem.
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(p, None, "no such file")
    suffix = p.suffix.lower()
    if suffix == ".csv" and not input_cols:
        raise DatasetError(
            p, None, "a CSV dataset needs --input-cols (and --output-cols for expected values)"
        )
    return _load(p, suffix, input_cols, output_cols)


def _load(
    p: Path,
    suffix: str,
    input_cols: Sequence[str] | None,
    output_cols: Sequence[str] | None,
) -> Iterator[Example]:
    unique = _Unique(str(p))
    if suffix in (".jsonl", ".ndjson"):
        rows: Iterator[tuple[int | None, Any]] = _jsonl_rows(p)
    elif suffix == ".json":
        rows = _json_rows(p)
    elif suffix == ".csv":
        rows = _csv_rows(p)
    else:
        raise DatasetError(p, None, f"unknown dataset type {suffix!r}; use .jsonl, .json or .csv")
    for position, (line, row) in enumerate(rows):
        # A JSON list has no line per row: name the item's index instead.
        where = str(p) if line is not None else f"{p} (item {position})"
        example = _row_to_example(
            row, position, input_cols=input_cols, output_cols=output_cols, path=where, line=line
        )
        unique.path = where
        yield unique.check(example, line)
