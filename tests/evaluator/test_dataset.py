"""Loading datasets: JSON Lines, JSON and CSV; canonical and flat rows; bad rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluator import DatasetError, Example, load_examples
from evaluator._dataset import NO_OUTPUT, examples_from_rows


def jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TestLoadExamples:
    def test_canonical_jsonl(self, tmp_path: Path) -> None:
        """Canonical rows keep id, input, expected and output."""
        path = jsonl(
            tmp_path / "d.jsonl",
            [
                {"id": "a", "input": {"q": 1}, "expected": {"label": "x"}, "output": "x"},
                {"input": {"q": 2}},
            ],
        )
        first, second = load_examples(path)
        assert first == Example(id="a", input={"q": 1}, expected={"label": "x"}, output="x")
        assert second.id == 1 and second.expected is None and second.output is NO_OUTPUT

    def test_flat_rows(self, tmp_path: Path) -> None:
        """Flat rows map input and output columns; expected is keyed by column name."""
        path = jsonl(tmp_path / "d.jsonl", [{"question": "q", "label": "y", "other": 1}])
        (ex,) = load_examples(path, input_cols=["question"], output_cols=["label"])
        assert ex.input == {"question": "q"} and ex.expected == {"label": "y"}

    def test_csv(self, tmp_path: Path) -> None:
        """CSV rows map columns; values are strings."""
        path = tmp_path / "d.csv"
        path.write_text("id,question,label\nx1,hi,greet\n,bye,farewell\n")
        a, b = load_examples(path, input_cols=["question"], output_cols=["label"])
        assert a.id == "x1" and a.expected == {"label": "greet"}
        assert b.id == 1  # an empty id cell means "no id": the row's position

    def test_json_list(self, tmp_path: Path) -> None:
        """A JSON file holding a list of objects loads."""
        path = tmp_path / "d.json"
        path.write_text(json.dumps([{"input": {"a": 1}}, {"input": {"a": 2}}]))
        assert [e.input["a"] for e in load_examples(path)] == [1, 2]

    def test_lazy(self, tmp_path: Path) -> None:
        """Loading streams: a bad row late in the file is only seen when reached."""
        path = tmp_path / "d.jsonl"
        path.write_text('{"input": {"a": 1}}\n{broken\n')
        examples = load_examples(path)
        assert next(examples).input == {"a": 1}
        with pytest.raises(DatasetError):
            next(examples)

    def test_blank_lines_skipped(self, tmp_path: Path) -> None:
        """Blank lines in JSON Lines are not rows."""
        path = tmp_path / "d.jsonl"
        path.write_text('{"input": {"a": 1}}\n\n{"input": {"a": 2}}\n')
        assert [e.id for e in load_examples(path)] == [0, 1]


class TestBadRows:
    def check(self, path: Path, line: int | None, words: str, **kw: Any) -> None:
        with pytest.raises(DatasetError) as info:
            list(load_examples(path, **kw))
        assert info.value.line == line
        assert str(path) in str(info.value)
        assert words in info.value.problem

    def test_broken_json(self, tmp_path: Path) -> None:
        """Broken JSON names the line."""
        path = tmp_path / "d.jsonl"
        path.write_text('{"input": {}}\n{"input": \n')
        self.check(path, 2, "broken JSON")

    def test_not_an_object(self, tmp_path: Path) -> None:
        """A row that is not an object is refused."""
        self.check(jsonl(tmp_path / "d.jsonl", [{"input": {}}, [1, 2]]), 2, "not an object")

    def test_missing_input_column(self, tmp_path: Path) -> None:
        """A missing input column is named."""
        path = jsonl(tmp_path / "d.jsonl", [{"question": "q"}, {"text": "t"}])
        self.check(path, 2, "'question'", input_cols=["question"])

    def test_missing_output_column(self, tmp_path: Path) -> None:
        """A missing output column is named."""
        path = jsonl(tmp_path / "d.jsonl", [{"question": "q"}])
        self.check(path, 1, "'label'", input_cols=["question"], output_cols=["label"])

    def test_duplicate_id(self, tmp_path: Path) -> None:
        """A duplicate id names both lines."""
        path = jsonl(
            tmp_path / "d.jsonl",
            [{"id": 1, "input": {}}, {"id": 2, "input": {}}, {"id": 1, "input": {}}],
        )
        self.check(path, 3, "duplicate id 1 (first at line 1)")

    def test_no_input_object(self, tmp_path: Path) -> None:
        """A flat row without --input-cols says how to fix it."""
        self.check(jsonl(tmp_path / "d.jsonl", [{"question": "q"}]), 1, "--input-cols")

    def test_csv_ragged(self, tmp_path: Path) -> None:
        """A CSV row with too many fields is refused."""
        path = tmp_path / "d.csv"
        path.write_text("q,label\na,b\nc,d,e\n")
        self.check(path, 3, "3 fields", input_cols=["q"])

    def test_csv_needs_columns(self, tmp_path: Path) -> None:
        """A CSV dataset needs --input-cols."""
        path = tmp_path / "d.csv"
        path.write_text("q\na\n")
        with pytest.raises(DatasetError, match="--input-cols"):
            load_examples(path)

    def test_unknown_suffix(self, tmp_path: Path) -> None:
        """An unknown file type is refused."""
        path = tmp_path / "d.txt"
        path.write_text("x")
        with pytest.raises(DatasetError, match="unknown dataset type"):
            list(load_examples(path))

    def test_json_item(self, tmp_path: Path) -> None:
        """A bad item of a JSON list names its index."""
        path = tmp_path / "d.json"
        path.write_text(json.dumps([{"input": {}}, 5]))
        with pytest.raises(DatasetError, match=r"item 1"):
            list(load_examples(path))

    def test_unknown_key(self, tmp_path: Path) -> None:
        """An unknown key beside input is refused rather than dropped."""
        self.check(jsonl(tmp_path / "d.jsonl", [{"input": {}, "label": "x"}]), 1, "'label'")


class TestRows:
    def test_rows_and_examples(self) -> None:
        """In-memory rows and Example objects mix."""
        out = list(examples_from_rows([{"input": {"a": 1}}, Example(id="z", input={})]))
        assert [e.id for e in out] == [0, "z"]

    def test_rows_duplicate(self) -> None:
        """Duplicate ids in memory are refused with the row position."""
        with pytest.raises(DatasetError, match="row 1: duplicate id 'a'"):
            list(examples_from_rows([{"id": "a", "input": {}}, {"id": "a", "input": {}}]))
