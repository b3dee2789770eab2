"""The one line reader's bulk mode: the same reading as line by line, in one pass in C."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator._exceptions import ResultsFileError
from evaluator._results_file._reader import Reader
from tests.evaluator.report.conftest import result

HEADER = {"skynet_eval_results": 1, "created": "2026-05-01T10:00:00Z"}
END = {"skynet_eval_results": 1, "ended": {"wall_s": 2.0, "results": 3, "throughput": 1.5}}


def line(value: Any) -> bytes:
    return msgspec.json.encode(value) + b"\n"


RESULTS = b"".join(line(result(i, 1.0)) for i in range(3))


def read(data: bytes, *, bulk: bool) -> tuple[Reader, list[Any]]:
    reader = Reader(Path("r.jsonl"), strict=True, bulk=bulk)
    return reader, list(reader.iterate(io.BytesIO(data)))


class TestBulk:
    @pytest.mark.parametrize(
        "data",
        [
            RESULTS,
            line(HEADER) + RESULTS,
            line(HEADER) + RESULTS + line(END),
            line(HEADER) + RESULTS + line(HEADER) + line(result(9, 0.5)),
            line(HEADER) + b"\n" + RESULTS + b"  \n" + line(END),
            line(HEADER),
            RESULTS + line(END),
            RESULTS.rstrip(b"\n"),
        ],
        ids=[
            "results",
            "header",
            "header-and-end",
            "later-session",
            "blank-lines",
            "header-only",
            "end-only",
            "no-final-newline",
        ],
    )
    def test_reads_as_line_by_line(self, data: bytes) -> None:
        """Results, their line numbers, headers and counts are those of the line by line read."""
        refused: str | None = None
        try:
            slow, expected = read(data, bulk=False)
        except ResultsFileError as exc:
            refused = str(exc)
        if refused is not None:
            with pytest.raises(ResultsFileError) as raised:
                read(data, bulk=True)
            assert str(raised.value) == refused
            return
        fast, got = read(data, bulk=True)
        assert got == expected
        assert fast.numbers == slow.numbers
        assert fast.out.headers == slow.out.headers
        assert (fast.out.lines, fast.out.done_ids) == (slow.out.lines, slow.out.done_ids)

    def test_a_bad_line_is_named_by_its_number(self) -> None:
        """A line that is not a result makes the bulk read fall back and name that line."""
        lines = RESULTS.split(b"\n")
        data = line(HEADER) + lines[0] + b"\n" + b'{"nope": 1}\n' + lines[1] + b"\n" + line(END)
        with pytest.raises(ResultsFileError, match=r"r\.jsonl:3") as raised:
            read(data, bulk=True)
        assert "not a result" in str(raised.value)

    def test_a_torn_end_line_is_named(self) -> None:
        """A last line cut short after the results is named as torn, as line by line."""
        data = line(HEADER) + RESULTS + line(END)[:20]
        with pytest.raises(ResultsFileError, match="cut short"):
            read(data, bulk=True)
