"""Loading datasets: JSON Lines, JSON and CSV; canonical and flat rows; bad rows."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from evaluator import DatasetError, Example, load_examples
from evaluator._data._datafile import MAX_DEPTH
from evaluator._data._dataset import NO_OUTPUT, Selection, examples_from_rows, read_dataset


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

    def test_rows_position_meeting_an_id_names_both_rows(self) -> None:
        """In memory, a position that meets an explicit id names both rows by position,
        whichever came first."""
        with pytest.raises(DatasetError, match="row 2 has no id, so its position 2 is its id"):
            list(examples_from_rows([{"input": {}}, {"id": 2, "input": {}}, {"input": {}}]))
        with pytest.raises(
            DatasetError, match="row 0 has no id, so its position 0 is its id, and row 3"
        ):
            list(
                examples_from_rows(
                    [
                        {"input": {}},
                        *[{"id": f"x{i}", "input": {}} for i in range(2)],
                        {"id": 0, "input": {}},
                    ]
                )
            )

    def test_a_json_list_names_its_items(self, tmp_path: Path) -> None:
        """A JSON list's rows have no lines: a repeat names both items."""
        path = tmp_path / "d.json"
        path.write_text(
            json.dumps([{"id": "a", "input": {}}, {"input": {}}, {"id": "a", "input": {}}])
        )
        with pytest.raises(DatasetError, match=r"duplicate id 'a' \(first at item 0\)"):
            list(load_examples(path))

    @pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000])
    def test_rows_nested_too_deep_are_refused_with_the_position(self, depth: int) -> None:
        """A row in memory nested past the limit (what a service parses from a request)
        is a DatasetError naming its position and the fix, not a RecursionError later in
        a copy or a pickle; one at the limit is an example."""
        value: Any = 1
        for _ in range(depth - 2):  # the row and its input are two levels
            value = [value]
        rows = [{"input": {}}, {"input": {"x": value}}]
        with pytest.raises(DatasetError, match=f"row 1: the row is nested more than {MAX_DEPTH}"):
            list(examples_from_rows(rows))
        ok: Any = 1
        for _ in range(MAX_DEPTH - 2):
            ok = [ok]
        assert len(list(examples_from_rows([{"input": {"x": ok}}]))) == 1

    def test_bad_rows_in_memory_name_their_position(self) -> None:
        """A row in memory that is not an object, or has a bad id, is named by its
        position (it has no file line)."""
        with pytest.raises(DatasetError, match="row 1: row is a list"):
            list(examples_from_rows([{"input": {}}, [1]]))
        with pytest.raises(DatasetError, match="row 2: 'id' is a float"):
            list(examples_from_rows([{"input": {}}, {"input": {}}, {"id": 1.5, "input": {}}]))


class TestFileRules:
    def check(self, path: Path, line: int | None, words: str, **kw: Any) -> None:
        with pytest.raises(DatasetError) as info:
            list(load_examples(path, **kw))
        assert info.value.line == line
        assert str(path) in str(info.value)
        assert words in info.value.problem

    @pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv"])
    def test_utf8_byte_order_mark_is_not_data(self, tmp_path: Path, suffix: str) -> None:
        """A UTF-8 BOM (as spreadsheets save 'CSV UTF-8') is skipped: the id column stays."""
        path = tmp_path / f"d{suffix}"
        body = {
            ".jsonl": '{"id": "x1", "input": {"q": "hi"}}\n',
            ".json": '[{"id": "x1", "input": {"q": "hi"}}]',
            ".csv": "id,q\nx1,hi\n",
        }[suffix]
        path.write_bytes(b"\xef\xbb\xbf" + body.encode())
        kw: dict[str, Any] = {"input_cols": ["q"]} if suffix == ".csv" else {}
        (example,) = load_examples(path, **kw)
        assert example.id == "x1" and example.input == {"q": "hi"}

    @pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
    def test_utf16_and_utf32_are_refused_with_the_fix(self, tmp_path: Path, encoding: str) -> None:
        """UTF-16/32 files (with a BOM, or NULs without one) say to save as UTF-8."""
        path = tmp_path / "d.csv"
        path.write_bytes("id,q\nx1,hi\n".encode(encoding))
        self.check(path, 1, "save it as UTF-8", input_cols=["q"])

    def test_non_utf8_csv_names_the_line_and_byte(self, tmp_path: Path) -> None:
        """A Latin-1 cell is refused at its line, naming the byte, never a UnicodeDecodeError."""
        path = tmp_path / "d.csv"
        path.write_bytes(b"id,q\nx1,hi\nx2,caf\xe9\n")
        self.check(path, 3, "0xE9", input_cols=["q"])

    @pytest.mark.parametrize("suffix", [".jsonl", ".json"])
    @pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
    def test_nan_and_infinity_are_refused_in_every_json_format(
        self, tmp_path: Path, suffix: str, literal: str
    ) -> None:
        """One rule for .json and .jsonl: NaN/Infinity refused, naming the line and key path."""
        path = tmp_path / f"d{suffix}"
        row = '{"input": {"q": [1, ' + literal + "]}}"
        first = '{"input": {}}'
        path.write_text(f"{first}\n{row}\n" if suffix == ".jsonl" else f"[{first},\n{row}]")
        with pytest.raises(DatasetError) as info:
            list(load_examples(path))
        assert info.value.line == 2
        assert f"{literal} at $" in info.value.problem and "['q'][1]" in info.value.problem

    @pytest.mark.parametrize("suffix", [".jsonl", ".json"])
    def test_lone_surrogate_escape_is_refused(self, tmp_path: Path, suffix: str) -> None:
        """A lone \\ud800 escape is named as a lone surrogate in every JSON format."""
        path = tmp_path / f"d{suffix}"
        row = r'{"input": {"q": "a\ud800b"}}'
        path.write_text(row + "\n" if suffix == ".jsonl" else f"[{row}]")
        self.check(path, 1, "lone surrogate")

    def test_surrogate_pair_and_escaped_backslash_are_fine(self, tmp_path: Path) -> None:
        """A real pair decodes to its character; an escaped backslash is not an escape."""
        path = tmp_path / "d.jsonl"
        path.write_text(r'{"input": {"q": "\ud83d\ude00 \\ud800"}}' + "\n")
        (example,) = load_examples(path)
        assert example.input["q"] == "\U0001f600 \\ud800"

    @pytest.mark.parametrize("depth", [201, 5_000, 100_000])
    @pytest.mark.parametrize("suffix", [".jsonl", ".json"])
    def test_deep_nesting_is_a_dataset_error(self, tmp_path: Path, depth: int, suffix: str) -> None:
        """A row nested past the limit is a DatasetError naming file and line, never a
        RecursionError, however deep."""
        path = tmp_path / f"d{suffix}"
        deep = "[" * depth + "]" * depth
        row = '{"input": {"q": ' + deep + "}}"
        first = '{"input": {}}'
        path.write_text(f"{first}\n{row}\n" if suffix == ".jsonl" else f"[{first},\n{row}]")
        with pytest.raises(DatasetError) as info:
            list(load_examples(path))
        assert info.value.line == 2 and "nested more than 200 levels" in info.value.problem

    def test_nesting_at_the_limit_loads(self, tmp_path: Path) -> None:
        """A row exactly 200 levels deep (the row object is level 1) loads."""
        path = tmp_path / "d.jsonl"
        path.write_text('{"input": {"q": ' + "[" * 198 + "]" * 198 + "}}\n")
        (example,) = load_examples(path)
        assert isinstance(example.input["q"], list)

    def test_deep_row_across_a_read_chunk_is_refused_with_its_line(self, tmp_path: Path) -> None:
        """The file is read in chunks of 1 MiB: a row nested past the limit that straddles
        two chunks is still refused with its own line, and the rows before it load."""
        filler = '{"input": {"q": "' + "x" * 1000 + '"}}\n'
        count = (1 << 20) // len(filler) + 1  # the deep row starts just before 1 MiB
        deep = '{"input": {"q": ' + "[" * 300 + "]" * 300 + "}}\n"
        path = tmp_path / "d.jsonl"
        path.write_text(filler * (count - 1) + deep)
        assert path.stat().st_size > 1 << 20 > (count - 1) * len(filler)
        with pytest.raises(DatasetError) as info:
            list(load_examples(path))
        assert info.value.line == count and "nested more than 200 levels" in info.value.problem

    def test_brackets_inside_strings_are_not_nesting(self, tmp_path: Path) -> None:
        """A long, shallow row whose strings hold thousands of brackets loads: counting
        them only decides whether the row's depth is walked."""
        path = jsonl(tmp_path / "d.jsonl", [{"input": {"q": "[{" * 5000}}])
        (example,) = load_examples(path)
        assert example.input["q"] == "[{" * 5000

    def test_position_meeting_an_explicit_id_names_both_lines(self, tmp_path: Path) -> None:
        """A row without an id whose position equals another row's id: both lines named,
        and the fix (give every row an id)."""
        path = jsonl(tmp_path / "d.jsonl", [{"id": 1, "input": {}}, {"input": {}}])
        self.check(path, 2, "line 2 has no id, so its position 1 is its id, and line 1")
        path = jsonl(tmp_path / "e.jsonl", [{"input": {}}, {"id": 0, "input": {}}])
        self.check(path, 2, "line 1 has no id, so its position 0 is its id, and line 2")

    def test_string_and_integer_ids_differ(self, tmp_path: Path) -> None:
        """ "1" and 1 are different ids (JSON and the results file keep them apart)."""
        path = jsonl(tmp_path / "d.jsonl", [{"id": "1", "input": {}}, {"input": {}}])
        assert [e.id for e in load_examples(path)] == ["1", 1]

    def test_directory_is_not_a_dataset(self, tmp_path: Path) -> None:
        """A directory given as the dataset says so."""
        with pytest.raises(DatasetError, match="a directory"):
            load_examples(tmp_path)


class TestReadDataset:
    @pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv"])
    def test_one_open_gives_the_examples_and_the_fingerprint(
        self, tmp_path: Path, suffix: str, opens_of: Any
    ) -> None:
        """The file is opened once: the examples are those load_examples gives, and the
        digest is the SHA-256 of every byte of the file, from that same read."""
        path = tmp_path / f"d{suffix}"
        rows = [{"id": f"e{i}", "input": {"q": str(i)}} for i in range(5_000)]
        if suffix == ".jsonl":
            jsonl(path, rows)
        elif suffix == ".json":
            path.write_text(json.dumps(rows))
        else:
            path.write_text("id,q\n" + "".join(f"e{i},{i}\n" for i in range(5_000)))
        cols = {"input_cols": ["q"], "id_col": "id"} if suffix == ".csv" else {}
        expected = list(load_examples(path, **cols))  # type: ignore[arg-type]
        opens = opens_of(path)
        read = read_dataset(path, **cols)  # type: ignore[arg-type]
        assert len(opens) == 1
        assert read.examples == expected and len(expected) == 5_000
        assert read.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()

    @pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
    def test_a_limit_still_fingerprints_the_whole_file(self, tmp_path: Path, suffix: str) -> None:
        """With a limit the rows past it are not parsed (a broken one is not seen), yet
        the digest is the whole file's, more than one read chunk of it."""
        path = tmp_path / f"d{suffix}"
        if suffix == ".jsonl":
            good = "".join(json.dumps({"input": {"q": "x" * 100}}) + "\n" for _ in range(12_000))
            path.write_text(good + "{broken\n")
        else:
            path.write_text("q\n" + ("x" * 100 + "\n") * 12_000 + '"unclosed\n')
        cols = {"input_cols": ["q"]} if suffix == ".csv" else {}
        read = read_dataset(path, selection=Selection(limit=2), **cols)  # type: ignore[arg-type]
        assert len(read.examples) == 2 and path.stat().st_size > 1 << 20
        assert read.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()

    def test_every_canonical_row_reads_as_row_by_row(self, tmp_path: Path) -> None:
        """The whole-file read of canonical JSON Lines gives what the row by row read
        gives: ids given, absent, null or empty (then positions), strings apart from
        integers, expected and output present, null or absent, blank and CRLF lines, a
        leading byte-order mark."""
        lines = [
            '{"id": "a", "input": {"q": 1}, "expected": {"x": [1, {"y": null}]}}',
            '{"input": {"q": 2}, "output": null}',
            "",
            '{"id": null, "input": {}, "expected": null, "output": {"o": 1}}\r',
            '{"id": "", "input": {"q": "\u00e9"}}',
            "   ",
            '{"id": "2", "input": {}}',
            '{"id": 7, "output": "x", "input": {}}',
        ]
        path = tmp_path / "d.jsonl"
        path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
        expected = list(load_examples(path))
        read = read_dataset(path)
        assert read.examples == expected
        assert [ex.id for ex in read.examples] == ["a", 1, 2, 3, "2", 7]
        assert [type(ex.id) for ex in read.examples] == [type(ex.id) for ex in expected]
        assert read.examples[1].output is None and read.examples[0].output is NO_OUTPUT
        assert read.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()

    @pytest.mark.parametrize(
        "bad",
        [
            '{"id": 1, "input": {}}',  # a duplicate of line 1's id
            '{"input": {}}',  # its position 2 meets line 1's explicit id... of 2
            '{"id": 1.5, "input": {}}',
            '{"id": true, "input": {}}',
            '{"input": []}',
            '{"input": {}, "expected": 3}',
            '{"input": {}, "other": 1}',
            '{"q": 1}',
            "[1]",
            '{"input": {"a": NaN}}',
            '{"input": {}} {"input": {}}',
            '{"input": {"a": "\\ud800"}}',
            "\ufeff" + '{"id": 1, "input": {}}',
            "{broken",
        ],
    )
    def test_a_bad_row_is_named_as_row_by_row(self, tmp_path: Path, bad: str) -> None:
        """A bad row among good ones, past the first: the whole-file read refuses it with
        the row by row read's own message (file, line, problem, fix)."""
        path = tmp_path / "d.jsonl"
        good = ['{"id": 1, "input": {}}', '{"id": 2, "input": {}}']
        path.write_text("\n".join([*good, bad, '{"id": 9, "input": {}}']) + "\n")
        with pytest.raises(DatasetError) as row_by_row:
            list(load_examples(path))
        with pytest.raises(DatasetError) as whole:
            read_dataset(path)
        assert str(whole.value) == str(row_by_row.value)
        assert ":3" in str(whole.value) or "line 3" in str(whole.value)

    def test_a_sample_reads_the_file_once(self, tmp_path: Path, opens_of: Any) -> None:
        """A sample counts the rows and takes some from the one read."""
        path = jsonl(tmp_path / "d.jsonl", [{"input": {"q": i}} for i in range(50)])
        opens = opens_of(path)
        read = read_dataset(path, selection=Selection(sample=5, seed=3))
        assert len(opens) == 1
        every = list(load_examples(path))
        assert read.examples == list(Selection(sample=5, seed=3).select(lambda: iter(every)))


class TestSelection:
    @staticmethod
    def examples(n: int) -> Any:
        from evaluator._data._dataset import examples_from_rows

        rows = [{"id": f"e{i}" if i % 2 else i, "input": {"i": i}} for i in range(n)]
        return lambda: examples_from_rows(rows)

    def test_limit_takes_the_first(self) -> None:
        """limit=3: the first three examples, nothing read past them matters."""
        from evaluator._data._dataset import Selection

        assert [e.id for e in Selection(limit=3).select(self.examples(10))] == [0, "e1", 2]

    def test_sample_is_seeded_and_in_order(self) -> None:
        """The same seed draws the same examples, in the dataset's order; a sample larger
        than the dataset is all of it."""
        from evaluator._data._dataset import Selection

        def draw(seed: int) -> list[Any]:
            return [e.id for e in Selection(sample=4, seed=seed).select(self.examples(20))]

        assert draw(1) == draw(1) and draw(1) != draw(2) and len(draw(1)) == 4
        order = [e.id for e in self.examples(20)()]
        assert draw(1) == [i for i in order if i in draw(1)]
        assert len(list(Selection(sample=50).select(self.examples(5)))) == 5

    def test_ids_match_as_text(self) -> None:
        """ids are matched as text, so '2' finds the integer id 2."""
        from evaluator._data._dataset import Selection

        picked = Selection(ids=["e3", "2"]).select(self.examples(6))
        assert [e.id for e in picked] == [2, "e3"]

    def test_an_unknown_id_is_named_with_a_guess(self) -> None:
        """An id no example has raises ConfigError naming it and a close one."""
        from evaluator import ConfigError
        from evaluator._data._dataset import Selection

        with pytest.raises(ConfigError, match=r"'e33'.*did you mean 'e3'"):
            list(Selection(ids=["e33"]).select(self.examples(6)))
