"""Hostile and careless dataset files: every one loads whole or ends in a DatasetError that
names the file and line, never a parser's traceback, and the rules are one for all formats.

Classes of input, not single cases: nesting at random depths in random places, byte-order
marks in front of random rows, NaN/Infinity at random key paths, surrogate escapes,
arbitrary byte tails, ids that meet positions.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from evaluator import DatasetError, Example, load_examples
from evaluator._data._datafile import MAX_DEPTH

_settings = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_value = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_rows = st.lists(
    st.fixed_dictionaries({"input": st.dictionaries(st.text(max_size=4), _value, max_size=3)}),
    min_size=1,
    max_size=5,
)


def _load(path: Path, **kw: Any) -> list[Example] | DatasetError:
    try:
        return list(load_examples(path, **kw))
    except DatasetError as exc:
        return exc


def _write(path: Path, rows: list[str], suffix: str) -> Path:
    """Rows (JSON texts) as a .jsonl file (one per line) or a .json list (one per line)."""
    if suffix == ".jsonl":
        path.write_text("".join(r + "\n" for r in rows))
    else:
        path.write_text("[\n" + ",\n".join(rows) + "\n]")
    return path


def _nest(depth: int, leaf: str = "1") -> str:
    """A JSON value ``depth`` levels deep, mixing lists and objects."""
    levels = range(depth - 1, -1, -1)  # outermost first
    opening = "".join("[" if level % 2 else '{"k": ' for level in levels)
    closing = "".join("]" if level % 2 else "}" for level in reversed(levels))
    return opening + leaf + closing


class TestNesting:
    @_settings
    @given(
        depth=st.one_of(st.integers(1, 260), st.integers(260, 120_000)),
        position=st.integers(0, 3),
        suffix=st.sampled_from([".jsonl", ".json"]),
    )
    def test_any_depth_loads_or_names_the_line(
        self, tmp_path_factory: Any, depth: int, position: int, suffix: str
    ) -> None:
        """A row nested at any depth in any position loads when within the limit, else is
        a DatasetError for that very line: never a RecursionError."""
        rows = ['{"input": {"a": 1}}'] * 4
        rows[position] = '{"input": {"deep": ' + _nest(depth) + "}}"
        path = _write(tmp_path_factory.mktemp("d") / f"data{suffix}", rows, suffix)
        out = _load(path)
        # The row is level 1, "input" level 2: the nested value adds `depth` levels.
        if depth + 2 <= MAX_DEPTH:
            assert isinstance(out, list) and len(out) == 4
        else:
            assert isinstance(out, DatasetError), out
            assert "nested more than" in out.problem
            assert out.line == position + (1 if suffix == ".jsonl" else 2)

    @_settings
    @given(depth=st.integers(MAX_DEPTH, 50_000))
    def test_deep_cells_stay_strings_in_csv(self, tmp_path_factory: Any, depth: int) -> None:
        """In a CSV a cell is a string, however many brackets it holds."""
        path = tmp_path_factory.mktemp("d") / "data.csv"
        path.write_text("q,label\n" + '"' + "[" * depth + '"' + ",x\n")
        (example,) = load_examples(path, input_cols=["q"], output_cols=["label"])
        assert example.input["q"] == "[" * depth


class TestByteOrderMarks:
    @_settings
    @given(rows=_rows, suffix=st.sampled_from([".jsonl", ".json"]))
    def test_utf8_bom_changes_nothing(
        self, tmp_path_factory: Any, rows: list[Any], suffix: str
    ) -> None:
        """Any dataset loads the same with and without a UTF-8 byte-order mark."""
        folder = tmp_path_factory.mktemp("d")
        texts = [json.dumps(r) for r in rows]
        plain = _write(folder / f"plain{suffix}", texts, suffix)
        marked = folder / f"marked{suffix}"
        marked.write_bytes(codecs.BOM_UTF8 + plain.read_bytes())
        assert _load(plain) == _load(marked)

    @_settings
    @given(
        cells=st.lists(
            st.tuples(st.text(min_size=1, max_size=5), st.text(max_size=8)), min_size=1, max_size=5
        )
    )
    def test_csv_with_bom_keeps_its_id_column(
        self, tmp_path_factory: Any, cells: list[tuple[str, str]]
    ) -> None:
        """A 'CSV UTF-8' file (BOM first) keeps its first column's name: ids are read."""
        ids = [f"{i}-{a}" for i, (a, _) in enumerate(cells)]
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["id", "q"])
        writer.writerows([(i, q) for i, (_, q) in zip(ids, cells, strict=True)])
        # A raw NUL is refused in any CSV (the csv module's rule); a lone CR is a line end.
        assume(all("\r" not in a + q and "\x00" not in a + q for a, q in cells))
        path = tmp_path_factory.mktemp("d") / "data.csv"
        path.write_bytes(codecs.BOM_UTF8 + buffer.getvalue().encode())
        out = _load(path, input_cols=["q"])
        assert isinstance(out, list) and [e.id for e in out] == ids

    @_settings
    @given(
        rows=_rows,
        encoding=st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"]),
        suffix=st.sampled_from([".jsonl", ".json", ".csv"]),
    )
    def test_utf16_and_utf32_say_save_as_utf8(
        self, tmp_path_factory: Any, rows: list[Any], encoding: str, suffix: str
    ) -> None:
        """Wide encodings, with or without a mark, are refused with the fix, at line 1."""
        text = "".join(json.dumps(r) + "\n" for r in rows) if suffix != ".csv" else "q\na\n"
        path = tmp_path_factory.mktemp("d") / f"data{suffix}"
        path.write_bytes(text.encode(encoding))
        out = _load(path, input_cols=["q"] if suffix == ".csv" else None)
        assert isinstance(out, DatasetError) and "UTF-8" in out.problem and out.line == 1


_paths = st.lists(st.one_of(st.text(max_size=3), st.integers(0, 2)), min_size=0, max_size=4)


def _plant(value: Any, path: list[Any], literal: str) -> tuple[Any, list[Any]]:
    """``value`` with the marker ``literal`` planted along ``path`` (as far as it goes)."""
    marker = f"@@{literal}@@"
    if not path:
        return marker, []
    step, rest = path[0], path[1:]
    if isinstance(step, str):
        inner, used = _plant(None, rest, literal)
        return {step: inner}, [step, *used]
    inner, used = _plant(None, rest, literal)
    return [0] * step + [inner], [step, *used]


class TestNonFinite:
    @_settings
    @given(
        path=_paths,
        literal=st.sampled_from(["NaN", "Infinity", "-Infinity"]),
        suffix=st.sampled_from([".jsonl", ".json"]),
        line=st.integers(0, 2),
    )
    def test_refused_everywhere_naming_line_and_key_path(
        self, tmp_path_factory: Any, path: list[Any], literal: str, suffix: str, line: int
    ) -> None:
        """NaN/Infinity anywhere in a row of either JSON format: refused, naming the line and
        the key path where it sits."""
        value, used = _plant(None, path, literal)
        text = json.dumps({"input": {"x": value}}).replace(f'"@@{literal}@@"', literal)
        rows = ['{"input": {}}'] * 3
        rows[line] = text
        file = _write(tmp_path_factory.mktemp("d") / f"data{suffix}", rows, suffix)
        out = _load(file)
        assert isinstance(out, DatasetError)
        assert out.line == line + (1 if suffix == ".jsonl" else 2)
        keys = "".join(f"[{k!r}]" for k in used)
        row_path = f"$[{line}]" if suffix == ".json" else "$"
        assert f"{literal} at {row_path}['input']['x']{keys}" in out.problem


class TestText:
    @_settings
    @given(
        code=st.integers(0xD800, 0xDFFF),
        pair=st.booleans(),
        suffix=st.sampled_from([".jsonl", ".json"]),
    )
    def test_surrogate_escapes(
        self, tmp_path_factory: Any, code: int, pair: bool, suffix: str
    ) -> None:
        """A lone surrogate escape is refused by name in both formats; a proper pair loads."""
        escape = f"\\u{code:04x}"
        if pair:
            escape = f"\\u{0xD800 + code % 0x400:04x}\\u{0xDC00 + code % 0x400:04x}"
        row = '{"input": {"q": "a' + escape + 'b"}}'
        out = _load(_write(tmp_path_factory.mktemp("d") / f"data{suffix}", [row], suffix))
        if pair:
            assert isinstance(out, list) and len(out[0].input["q"]) == 3
        else:
            assert isinstance(out, DatasetError) and "lone surrogate" in out.problem

    @_settings
    @given(tail=st.binary(max_size=40), suffix=st.sampled_from([".jsonl", ".json", ".csv"]))
    def test_byte_tails(self, tmp_path_factory: Any, tail: bytes, suffix: str) -> None:
        """Any bytes after good rows: the file loads or the error names the file and a line
        inside it; nothing else escapes."""
        good = {
            ".jsonl": b'{"input": {"q": 1}}\n',
            ".json": b'[{"input": {"q": 1}}',
            ".csv": b"q,label\na,b\n",
        }[suffix]
        path = tmp_path_factory.mktemp("d") / f"data{suffix}"
        path.write_bytes(good + tail)
        kw: dict[str, Any] = (
            {"input_cols": ["q"], "output_cols": ["label"]} if suffix == ".csv" else {}
        )
        out = _load(path, **kw)
        if isinstance(out, DatasetError):
            assert out.path is not None and str(path) in out.path
            # A lone CR ends a line too (csv reads old Mac files so, and editors agree).
            lines = len((good + tail).splitlines()) + 1
            assert out.line is None or 1 <= out.line <= lines


class TestIds:
    @_settings
    @given(
        ids=st.lists(
            st.one_of(st.none(), st.integers(0, 6), st.sampled_from(["0", "1", "a"])),
            min_size=1,
            max_size=7,
        )
    )
    def test_positions_and_ids(self, tmp_path_factory: Any, ids: list[Any]) -> None:
        """Rows with and without ids load exactly when every id is unique (a missing id being
        the row's position); a clash names both lines, and says why when a position is in it."""
        rows = [{"input": {}} if i is None else {"id": i, "input": {}} for i in ids]
        effective = [pos if i is None else i for pos, i in enumerate(ids)]
        keys = [(type(x) is int, x) for x in effective]
        path = tmp_path_factory.mktemp("d") / "data.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = _load(path)
        if len(set(keys)) == len(keys):
            assert isinstance(out, list) and [e.id for e in out] == effective
            return
        assert isinstance(out, DatasetError)
        second = next(n for n in range(len(keys)) if keys[n] in keys[:n])
        first = keys.index(keys[second])
        assert out.line == second + 1
        assert f"line {first + 1}" in out.problem
        if ids[first] is None or ids[second] is None:
            assert "has no id, so its position" in out.problem
