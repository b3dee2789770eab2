"""Reading results files for a report: with or without a header, and every bad line named."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from evaluator import Example, Result
from evaluator._call._results import example_key
from evaluator._report.html import ResultsFileError, load_results_file
from evaluator._results_file._load import (
    ReportLine,
    header_fields,
    join_examples,
    results_from,
)
from tests.evaluator.report.conftest import result, write_results

HEADER = {
    "skynet_eval_results": 1,
    "created": "2026-05-01T10:00:00Z",
    "fingerprints": {"dataset": "sha256:aa", "metric": "sha256:bb"},
}


class TestLoadResultsFile:
    def test_a_file_without_a_header(self, tmp_path: Path) -> None:
        """Every line is a result, in file order, each with its line number."""
        path = write_results(tmp_path / "r.jsonl", [result("a", 1.0), result("b", 0.0)])
        loaded = load_results_file(path)
        assert [r.example_id for r in loaded.results] == ["a", "b"]
        assert loaded.header is None and loaded.sessions == []
        assert loaded.line_numbers == [1, 2]
        assert all(isinstance(r, Result) for r in loaded.results)

    def test_a_file_with_a_header(self, tmp_path: Path) -> None:
        """A first line holding "skynet_eval_results" is the header: kept, not a result."""
        path = write_results(tmp_path / "r.jsonl", [result("a", 1.0)], header=HEADER)
        loaded = load_results_file(path)
        assert loaded.header == HEADER
        assert [r.example_id for r in loaded.results] == ["a"]
        assert loaded.line_numbers == [2]

    def test_header_metadata_is_flattened_for_display(self) -> None:
        """Nested header objects become dotted labels; the version key is left out."""
        assert header_fields(HEADER) == [
            ("created", "2026-05-01T10:00:00Z"),
            ("fingerprints.dataset", "sha256:aa"),
            ("fingerprints.metric", "sha256:bb"),
        ]

    def test_a_later_header_is_a_session(self, tmp_path: Path) -> None:
        """A header further down (a resumed run) is kept as a session with its line."""
        path = tmp_path / "r.jsonl"
        write_results(path, [result("a", 1.0)], header=HEADER)
        with path.open("ab") as fh:
            fh.write(msgspec.json.encode({**HEADER, "created": "later"}) + b"\n")
            fh.write(msgspec.json.encode(result("b", 0.5)) + b"\n")
        loaded = load_results_file(path)
        assert loaded.header == HEADER
        assert loaded.sessions == [(3, {**HEADER, "created": "later"})]
        assert loaded.line_numbers == [2, 4]

    def test_blank_lines_keep_line_numbers_right(self, tmp_path: Path) -> None:
        """Blank lines are skipped, and the results keep their true line numbers."""
        path = tmp_path / "r.jsonl"
        lines = [msgspec.json.encode(result(i, 1.0)).decode() for i in range(3)]
        path.write_text(lines[0] + "\n\n" + lines[1] + "\n   \n" + lines[2] + "\n")
        assert load_results_file(path).line_numbers == [1, 3, 5]

    def test_a_byte_order_mark_is_read_as_one(self, tmp_path: Path) -> None:
        """A UTF-8 BOM before the header (an editor's save) is not part of the first line."""
        path = tmp_path / "r.jsonl"
        write_results(path, [result("a", 1.0)], header=HEADER)
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        assert load_results_file(path).header == HEADER

    def test_a_complete_last_line_without_newline_is_kept(self, tmp_path: Path) -> None:
        """A whole result on the last line, with no newline after it, is a result."""
        path = tmp_path / "r.jsonl"
        path.write_bytes(msgspec.json.encode(result("a", 1.0)))
        assert [r.example_id for r in load_results_file(path).results] == ["a"]

    def test_a_torn_last_line_is_named(self, tmp_path: Path) -> None:
        """A last line cut short is an error naming its line and how to go on."""
        path = write_results(tmp_path / "r.jsonl", [result("a", 1.0)])
        with path.open("ab") as fh:
            fh.write(msgspec.json.encode(result("b", 1.0))[:25])
        with pytest.raises(ResultsFileError) as caught:
            load_results_file(path)
        assert caught.value.line == 2 and caught.value.path == str(path)
        assert str(caught.value).startswith(f"{path}:2: the last line is cut short")
        assert "--resume" in str(caught.value)

    def test_a_line_that_is_not_json_is_named(self, tmp_path: Path) -> None:
        """Garbage in the middle of the file names its line and quotes it."""
        path = tmp_path / "r.jsonl"
        good = msgspec.json.encode(result("a", 1.0)).decode()
        path.write_text(f"{good}\nthis is not json\n{good.replace('a', 'b', 1)}\n")
        with pytest.raises(ResultsFileError) as caught:
            load_results_file(path)
        message = str(caught.value)
        assert message.startswith(f"{path}:2: not JSON")
        assert "this is not json" in message and "delete or repair that line" in message

    def test_a_foreign_object_is_named(self, tmp_path: Path) -> None:
        """A JSON object that is not a result (a dataset row) names its line and keys."""
        path = write_results(tmp_path / "r.jsonl", [result("a", 1.0)])
        with path.open("a") as fh:
            fh.write(json.dumps({"id": "q1", "input": {"q": "?"}}) + "\n")
        with pytest.raises(ResultsFileError) as caught:
            load_results_file(path)
        assert caught.value.line == 2
        assert "not a result (keys 'id', 'input'" in str(caught.value)
        assert "skynet-eval run --output" in str(caught.value)

    def test_a_result_with_a_bad_field_is_named(self, tmp_path: Path) -> None:
        """A result whose score is a string says which field is wrong."""
        path = tmp_path / "r.jsonl"
        path.write_text(json.dumps({"example_id": "a", "score": "high"}) + "\n")
        with pytest.raises(ResultsFileError, match=r"r\.jsonl:1: a result with a bad field: "
                           r"Expected `float`, got `str` - at `\$\.score`"):  # fmt: skip
            load_results_file(path)

    def test_a_json_array_line_is_named(self, tmp_path: Path) -> None:
        """A line that is JSON but not an object says what it is."""
        path = tmp_path / "r.jsonl"
        path.write_text("[1, 2]\n")
        with pytest.raises(ResultsFileError, match=r":1: a JSON list, not a result object"):
            load_results_file(path)

    def test_a_value_nested_too_deep_is_named(self, tmp_path: Path) -> None:
        """A deeply nested output is a clear error naming the line, not a RecursionError."""
        path = tmp_path / "r.jsonl"
        deep = "[" * 20_000 + "]" * 20_000
        path.write_text('{"example_id": "a", "score": 1, "output": ' + deep + "}\n")
        with pytest.raises(ResultsFileError, match=r":1: a value nested too deeply"):
            load_results_file(path)

    def test_a_newer_format_asks_for_an_upgrade(self, tmp_path: Path) -> None:
        """A header of a later format version is refused with what to do."""
        path = write_results(
            tmp_path / "r.jsonl", [result("a", 1.0)], header={"skynet_eval_results": 2}
        )
        with pytest.raises(
            ResultsFileError, match=r":1: written by a newer skynet-eval .* upgrade"
        ):
            load_results_file(path)

    def test_a_duplicate_id_names_both_lines(self, tmp_path: Path) -> None:
        """One id on two lines (two writers) is an error naming both lines."""
        path = write_results(
            tmp_path / "r.jsonl", [result("a", 1.0), result("b", 1.0), result("a", 0.0)]
        )
        with pytest.raises(ResultsFileError) as caught:
            load_results_file(path)
        assert caught.value.line == 3
        assert "example id 'a' has two results (lines 1 and 3)" in str(caught.value)

    def test_ids_of_different_types_are_different(self, tmp_path: Path) -> None:
        """The id 1 and the id "1" are two examples, not a duplicate."""
        path = write_results(tmp_path / "r.jsonl", [result(1, 1.0), result("1", 0.0)])
        assert len(load_results_file(path).results) == 2

    @pytest.mark.parametrize(
        ("content", "problem"),
        [(b"", "holds no results"), (b'{"skynet_eval_results": 1}\n', "(only a header)")],
    )
    def test_a_file_without_results(self, tmp_path: Path, content: bytes, problem: str) -> None:
        """An empty file, or a header alone, is an error rather than an empty report."""
        path = tmp_path / "r.jsonl"
        path.write_bytes(content)
        with pytest.raises(ResultsFileError, match=problem.replace("(", r"\(").replace(")", r"\)")):
            load_results_file(path)

    def test_a_missing_file(self, tmp_path: Path) -> None:
        """A path that does not exist says so."""
        with pytest.raises(ResultsFileError, match="the results file does not exist"):
            load_results_file(tmp_path / "nope.jsonl")

    def test_input_and_expected_on_a_line_are_kept(self, tmp_path: Path) -> None:
        """A result line carrying `input` and `expected` (a later format) keeps them."""
        path = tmp_path / "r.jsonl"
        row = {"example_id": "a", "score": 1.0, "input": {"q": "2+2"}, "expected": {"a": "4"}}
        path.write_text(json.dumps(row) + "\n")
        line = load_results_file(path).results[0]
        assert isinstance(line, ReportLine)
        assert line.input == {"q": "2+2"} and line.expected == {"a": "4"}


class TestResultsFrom:
    def test_results_in_memory(self) -> None:
        """A run's own results need no file; they have no line numbers."""
        loaded = results_from([result("a", 1.0)])
        assert loaded.path is None and loaded.line_numbers is None

    def test_something_else_is_refused(self) -> None:
        """An item that is not a Result is named by its position."""
        with pytest.raises(ResultsFileError, match=r"item 2 is a dict, not an evaluator\.Result"):
            results_from([result("a", 1.0), {"example_id": "b", "score": 1.0}])  # type: ignore[list-item]

    def test_duplicates_in_memory_are_refused(self) -> None:
        """The same id twice in memory is named by the items' positions."""
        with pytest.raises(ResultsFileError, match=r"items 1 and 2"):
            results_from([result("a", 1.0), result("a", 0.0)])


class TestJoinExamples:
    def test_examples_are_keyed_by_typed_id(self) -> None:
        """Dataset examples are found by the same key as results' ids."""
        joined = join_examples(
            [
                Example(id=1, input={"q": "a"}, expected={"l": "x"}),
                Example(id="1", input={"q": "b"}),
            ]
        )
        assert joined[example_key(1)].input == {"q": "a"}
        assert joined[example_key("1")].expected is None
