"""Fingerprints of a run: file digests, canonical artifacts, what changed and what moved."""

from __future__ import annotations

from pathlib import Path

import msgspec

from evaluator._fingerprint import HEADER_KEY, ResultsHeader, compare, fingerprint_run


def _files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, text in (
        ("data.jsonl", '{"input": {}}\n'),
        ("metric.py", "x = 1\n"),
        ("program.py", "y = 2\n"),
    ):
        out[name] = tmp_path / name
        out[name].write_text(text)
    return out


class TestFingerprintRun:
    def test_digests_and_paths(self, tmp_path: Path) -> None:
        """Each file is recorded by path and SHA-256; absent parts are None."""
        f = _files(tmp_path)
        prints = fingerprint_run(dataset=f["data.jsonl"], metric=f["metric.py"], input_cols=["q"])
        assert prints.dataset is not None and prints.dataset.input_cols == ["q"]
        assert prints.metric is not None and prints.metric.path == str(f["metric.py"])
        assert len(prints.metric.sha256) == 64
        assert prints.program is None and prints.artifact is None

    def test_artifact_is_canonical(self) -> None:
        """The artifact's digest ignores dict order, and tells text from JSON."""
        a = fingerprint_run(dataset=None, metric=None, artifact={"a": 1, "b": [2]})
        b = fingerprint_run(dataset=None, metric=None, artifact={"b": [2], "a": 1})
        text = fingerprint_run(dataset=None, metric=None, artifact='{"a": 1, "b": [2]}')
        assert a.artifact == b.artifact and a.artifact != text.artifact

    def test_odd_artifacts_still_fingerprint(self) -> None:
        """Text with lone surrogates (a command line in another encoding) and objects
        JSON cannot hold get a digest too."""
        for value in ("a\udcff", {1: object()}, float("nan")):
            prints = fingerprint_run(dataset=None, metric=None, artifact=value)
            assert prints.artifact is not None and len(prints.artifact.sha256) == 64


class TestCompare:
    def test_changes_and_moves(self, tmp_path: Path) -> None:
        """An edited file is a change naming both digests; the same bytes elsewhere, a move."""
        f = _files(tmp_path)
        then = fingerprint_run(
            dataset=f["data.jsonl"], metric=f["metric.py"], program=f["program.py"]
        )
        f["metric.py"].write_text("x = 2\n")
        moved = f["data.jsonl"].rename(tmp_path / "moved.jsonl")
        now = fingerprint_run(dataset=moved, metric=f["metric.py"], program=f["program.py"])
        changes, moves = compare(then, now)
        assert len(changes) == 1 and changes[0].startswith("the metric changed")
        assert then.metric is not None and then.metric.sha256[:12] in changes[0]
        assert moves == [
            f"the dataset is now {moved} (it was {f['data.jsonl']}), with the same content"
        ]

    def test_columns_and_missing_parts_are_changes(self, tmp_path: Path) -> None:
        """Other columns, or a program that one side lacks, are changes."""
        f = _files(tmp_path)
        then = fingerprint_run(dataset=f["data.jsonl"], metric=f["metric.py"], input_cols=["a"])
        now = fingerprint_run(
            dataset=f["data.jsonl"],
            metric=f["metric.py"],
            program=f["program.py"],
            input_cols=["b"],
        )
        changes, _ = compare(then, now)
        assert [c.split(":")[0] for c in changes] == [
            "the dataset's columns changed",
            "the program changed",
        ]


class TestResultsHeader:
    def test_header_key_comes_first(self, tmp_path: Path) -> None:
        """A header line starts with the key that marks it, and reads back."""
        f = _files(tmp_path)
        header = ResultsHeader.new(fingerprint_run(dataset=f["data.jsonl"], metric=f["metric.py"]))
        line = msgspec.json.encode(header)
        assert line.startswith(b'{"' + HEADER_KEY.encode() + b'":1,')
        assert msgspec.json.decode(line, type=ResultsHeader) == header
