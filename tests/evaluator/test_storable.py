"""What a results file stores: JSON values as they are, standard forms, marked replacements."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import math
import uuid
from typing import Any

import msgspec
import numpy as np
import pytest

from evaluator._call._results import ErrorInfo, Result
from evaluator._storable import UNSTORED_KEY, StoreChange, encode_results, printable_id

_decoder = msgspec.json.Decoder(Result)


def _round_trip(**fields: Any) -> tuple[Result, list[StoreChange]]:
    data, changes = encode_results([Result(**{"example_id": "e", "score": 0.5, **fields})])
    (back,) = _decoder.decode_lines(data)
    return back, changes


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Color(enum.Enum):
    RED = "red"


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque>"


class TestEncodeResults:
    def test_plain_batch_is_one_fast_encode(self) -> None:
        """JSON values go through as they are, with no change reported."""
        batch = [Result(example_id=i, score=1.0, output={"a": [1, "x", None]}) for i in range(3)]
        data, changes = encode_results(batch)
        assert changes == [] and _decoder.decode_lines(data) == batch

    @pytest.mark.parametrize(
        ("value", "stored"),
        [
            ((1, 2), [1, 2]),
            ({3}, [3]),
            (b"\x00\xff", "AP8="),
            (datetime.date(2024, 1, 2), "2024-01-02"),
            (decimal.Decimal("1.5"), "1.5"),
            (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
            (Color.RED, "red"),
            (Point(1.0, 2.0), {"x": 1.0, "y": 2.0}),
            ({1: "a", 2.5: "b"}, {"1": "a", "2.5": "b"}),
            (np.arange(3), [0, 1, 2]),
            (np.float32(1.5), 1.5),
        ],
    )
    def test_standard_forms_are_not_reported(self, value: Any, stored: Any) -> None:
        """Values with a standard JSON form are stored in it, content kept, unreported."""
        back, changes = _round_trip(output=value)
        assert back.output == stored and changes == []

    @pytest.mark.parametrize(
        ("value", "kind", "text"),
        [
            (float("nan"), "float", "nan"),
            (float("-inf"), "float", "-inf"),
            (np.float64("nan"), "float", "nan"),
            (1 + 2j, "complex", "(1+2j)"),
            (Opaque(), "Opaque", "<Opaque>"),
            (Point(math.inf, 0.0), "float", "inf"),
        ],
    )
    def test_values_json_cannot_hold_become_markers(self, value: Any, kind: str, text: str) -> None:
        """NaN, infinities, complex numbers and other objects become a marker with the
        exact repr, and the change is reported; the score is untouched."""
        back, changes = _round_trip(output=value)
        marker = {UNSTORED_KEY: kind, "repr": text}
        assert back.output == marker or marker in back.output.values()
        assert back.score == 0.5 and len(changes) == 1 and changes[0].field == "output"

    def test_cycle_and_depth_are_cut_with_a_marker(self) -> None:
        """A list that contains itself, and nesting past the limit, are stored and reported."""
        loop: list[Any] = [1]
        loop.append(loop)
        deep: Any = 0
        for _ in range(3_000):
            deep = [deep]
        back, changes = _round_trip(output=loop, extra={"deep": deep})
        assert back.output[0] == 1 and back.output[1][UNSTORED_KEY] == "list"
        assert {c.field for c in changes} == {"output", "extra"}
        assert any("a cycle" in c.problem for c in changes)
        assert any("nested more than" in c.problem for c in changes)

    def test_lone_surrogates_become_replacement_characters_everywhere(self) -> None:
        """Surrogates in the id, feedback, error message, keys and output are stored as
        U+FFFD; a surrogate pair becomes its character."""
        back, changes = _round_trip(
            example_id="id\ud800",
            feedback="fb\udc00",
            error=ErrorInfo("metric_error", "msg\ud800"),
            output={"k\ud800": "\ud83d\ude00"},
        )
        assert back.example_id == "id\ufffd" and back.feedback == "fb\ufffd"
        assert back.error == ErrorInfo("metric_error", "msg\ufffd")
        assert back.output == {"k\ufffd": "\U0001f600"}
        assert {c.field for c in changes} >= {"example_id", "feedback", "error", "output"}
        assert all(c.example_id == "id\ufffd" for c in changes)  # printable in messages

    def test_odd_keys_are_text(self) -> None:
        """Keys of other types become their text; two keys written alike are kept apart."""
        back, changes = _round_trip(output={(1, 2): "t", None: "n", 1: "a", "1": "b"})
        assert back.output == {"(1, 2)": "t", "null": "n", "1": "a", "1#": "b"}
        assert len(changes) == 3

    def test_huge_integer_and_broken_repr(self) -> None:
        """An integer too long to print, and an object whose repr raises, still store."""

        class Broken:
            def __repr__(self) -> str:
                raise RuntimeError("no")

        with_huge = 10 ** (4299) * 10**10
        back, _ = _round_trip(output=[with_huge, Broken()])
        assert back.output[0][UNSTORED_KEY] == "int"
        assert back.output[1][UNSTORED_KEY] == "Broken"
        assert back.output[1]["repr"].startswith("<Broken")

    def test_only_the_bad_result_of_a_batch_changes(self) -> None:
        """One unencodable result leaves its neighbours exactly as they are."""
        batch = [Result(example_id=i, score=1.0, output=i) for i in range(3)]
        batch[1] = Result(example_id=1, score=1.0, output=1j)
        data, changes = encode_results(batch)
        back = _decoder.decode_lines(data)
        assert back[0] == batch[0] and back[2] == batch[2] and len(changes) == 1


class TestDefaultsLeftOut:
    def test_the_careful_path_leaves_out_what_msgspec_does(self) -> None:
        """A result the careful path writes (a value of another class is looked into)
        spells the same line as msgspec: its default fields left out, others kept."""
        for result in (
            Result(example_id=0, score=1.0, output=decimal.Decimal("1.5")),
            Result(example_id=1, score=0.0, scores={}, output=b"x", extra={"a": (0.0,)}),
        ):
            data, changes = encode_results([result])
            assert changes == []
            assert data == msgspec.json.encode(result) + b"\n"
        data, _ = encode_results([Result(example_id=0, score=1.0, output=b"x")])
        assert msgspec.json.decode(data) == {"example_id": 0, "score": 1.0, "output": "eA=="}


class TestPrintableId:
    def test_ids(self) -> None:
        """Ints stay, strings lose lone surrogates, other ids become their repr."""
        assert printable_id(3) == 3
        assert printable_id("a\ud800") == "a\ufffd"
        assert printable_id(("x", 1)) == "('x', 1)"
