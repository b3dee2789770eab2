"""The return-value rules of docs/contract.md, row by row and Decision by Decision."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaluator import InvalidReturn, Scored, validate_return
from evaluator._exceptions import STEP_RETURN


def rejected(value: Any, example_id: Any = "q17") -> InvalidReturn:
    with pytest.raises(InvalidReturn) as info:
        validate_return(value, example_id)
    assert info.value.step == STEP_RETURN
    assert info.value.example_id == example_id
    assert str(info.value).startswith(f"Metric return value: example {example_id!r}: ")
    return info.value


class TestContractTable:
    """The seven rows of the table in docs/contract.md."""

    def test_tuple_with_feedback(self) -> None:
        """A (score, {"feedback"}) tuple is valid."""
        assert validate_return((0.8, {"feedback": "Close. Missing the date."})) == Scored(
            0.8, {}, "Close. Missing the date.", {}
        )

    def test_list_with_named_scores(self) -> None:
        """A two-item list with named scores is valid."""
        scored = validate_return([1.0, {"feedback": "OK", "scores": {"format": 1.0}}])
        assert scored.score == 1.0
        assert scored.scores == {"format": 1.0}

    def test_bare_number(self) -> None:
        """A bare number has no info and is rejected."""
        err = rejected(0.8)
        assert "not a pair" in err.message and "feedback" in err.message

    def test_info_not_a_dict(self) -> None:
        """An info that is a string is rejected."""
        err = rejected((0.8, "Close."))
        assert "the info is a str" in err.message

    def test_no_feedback(self) -> None:
        """An info dict without feedback is rejected."""
        err = rejected((0.8, {}))
        assert "no 'feedback' key" in err.message

    def test_score_is_a_string(self) -> None:
        """A score given as text is rejected with the contract's own wording."""
        err = rejected(("0.8", {"feedback": "OK"}))
        assert str(err) == (
            "Metric return value: example 'q17': the score is a str ('0.8'); return a number"
        )

    def test_named_score_not_a_number(self) -> None:
        """A named score that is text is rejected, naming the score."""
        err = rejected((0.8, {"feedback": "OK", "scores": {"a": "high"}}))
        assert "'a'" in err.message and "str" in err.message


class TestDecisions:
    """The Decisions docs/contract.md takes where the page is silent."""

    def test_bool_score(self) -> None:
        """A bool is not a number here; the message says to return 1.0 or 0.0."""
        assert "1.0 or 0.0" in rejected((True, {"feedback": "OK"})).message

    def test_bool_named_score(self) -> None:
        """A bool named score is rejected too."""
        assert "bool" in rejected((1.0, {"feedback": "", "scores": {"x": False}})).message

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_non_finite(self, bad: float) -> None:
        """NaN and infinities are refused: an optimizer cannot climb them."""
        assert "finite" in rejected((bad, {"feedback": "OK"})).message

    def test_numpy_scalar(self) -> None:
        """A NumPy scalar is a number and comes back as a float."""
        scored = validate_return((np.float32(0.5), {"feedback": "", "scores": {"n": np.int64(2)}}))
        assert type(scored.score) is float and scored.score == 0.5
        assert scored.scores == {"n": 2.0} and type(scored.scores["n"]) is float

    def test_numpy_nan(self) -> None:
        """A NumPy NaN is refused like a float NaN."""
        rejected((np.float64("nan"), {"feedback": ""}))

    def test_int_score(self) -> None:
        """An int score is accepted as a float."""
        assert validate_return((1, {"feedback": "x"})).score == 1.0

    def test_empty_feedback(self) -> None:
        """Empty feedback is still a string, so it is valid."""
        assert validate_return((0.0, {"feedback": ""})).feedback == ""

    def test_extra_keys_kept(self) -> None:
        """Other info keys are kept with the result."""
        scored = validate_return((0.5, {"feedback": "f", "trace": ["a", 1], "note": "n"}))
        assert scored.extra == {"trace": ["a", 1], "note": "n"}

    def test_extra_json_cannot_hold_is_kept_for_the_results_file(self) -> None:
        """Extra info JSON cannot hold (NaN, a complex number, a lone surrogate, deep
        nesting) is kept as returned, never an error and never NaN turned into null;
        JSON-able forms are normalised as they will read back (tuples, int keys)."""
        deep: list[Any] = [0]
        for _ in range(5000):
            deep = [deep]
        for value in (math.nan, 1j, "\ud800", deep):
            scored = validate_return((0.5, {"feedback": "f", "note": value}))
            assert scored.extra["note"] is value or (
                isinstance(value, float) and math.isnan(scored.extra["note"])
            )
        scored = validate_return((0.5, {"feedback": "f", "pair": (1, 2), "by": {1: "a"}}))
        assert scored.extra == {"by": {"1": "a"}, "pair": [1, 2]}

    def test_three_items(self) -> None:
        """A tuple of three items is not a pair."""
        assert "3 items" in rejected((1.0, {"feedback": ""}, "x")).message

    def test_feedback_not_a_string(self) -> None:
        """A feedback that is not text is rejected."""
        assert "feedback is a int" in rejected((1.0, {"feedback": 3})).message

    def test_scores_not_a_dict(self) -> None:
        """'scores' must be a dict."""
        assert "'scores' is a list" in rejected((1.0, {"feedback": "", "scores": [1.0]})).message

    def test_long_value_shortened(self) -> None:
        """What came back is shortened in the message."""
        err = rejected("x" * 10_000)
        assert len(str(err)) < 400


_json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
_json = st.recursive(
    _json_leaf | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_number = st.integers(-(10**6), 10**6) | st.floats(allow_nan=False, allow_infinity=False)


class TestProperties:
    @given(
        score=_number,
        feedback=st.text(max_size=20),
        scores=st.dictionaries(st.text(max_size=6), _number, max_size=4),
        extra=st.dictionaries(
            st.text(max_size=6).filter(lambda k: k not in ("feedback", "scores")), _json, max_size=3
        ),
        as_list=st.booleans(),
    )
    def test_accepted_round_trips_json(
        self,
        score: float,
        feedback: str,
        scores: dict[str, float],
        extra: dict[str, Any],
        as_list: bool,
    ) -> None:
        """Whatever the validator accepts encodes to JSON and decodes back unchanged."""
        info = {"feedback": feedback, "scores": scores, **extra}
        value: Any = [score, info] if as_list else (score, info)
        scored = validate_return(value)
        again = msgspec.json.decode(msgspec.json.encode(scored), type=Scored)
        assert again == scored

    @given(value=st.one_of(_json, st.tuples(_json), st.tuples(_json, _json, _json)))
    def test_non_pairs_rejected(self, value: Any) -> None:
        """Whatever is not a (number, {"feedback": str}) pair is rejected with the step named."""
        is_pair = (
            isinstance(value, (tuple, list))
            and len(value) == 2
            and isinstance(value[1], dict)
            and isinstance(value[1].get("feedback"), str)
            and not isinstance(value[0], bool)
            and isinstance(value[0], (int, float))
            and "scores" not in value[1]
        )
        if is_pair:
            validate_return(value)
            return
        with pytest.raises(InvalidReturn) as info:
            validate_return(value, "e1")
        assert str(info.value).startswith("Metric return value: example 'e1': ")


_scores = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)
_feedbacks = st.one_of(st.text(max_size=5), st.integers(), st.none())


class TestFastPath:
    @given(
        score=_scores,
        feedback=_feedbacks,
        as_list=st.booleans(),
        extra_key=st.sampled_from([None, "scores", "note", 3]),
    )
    def test_fast_path_agrees_with_the_full_rules(
        self, score: Any, feedback: Any, as_list: bool, extra_key: Any
    ) -> None:
        """The fast path for (number, {"feedback": str}) gives exactly what the full
        validator gives, for valid and invalid values alike (same struct or same error)."""
        from evaluator._call._contract import _validate_slow

        info: dict[Any, Any] = {"feedback": feedback}
        if extra_key is not None:
            info[extra_key] = {"a": 1.0} if extra_key == "scores" else "x"
        value: Any = [score, info] if as_list else (score, info)
        try:
            expected: Any = _validate_slow(value, "q1")
        except InvalidReturn as exc:
            expected = str(exc)
        try:
            got: Any = validate_return(value, "q1")
        except InvalidReturn as exc:
            got = str(exc)
        assert got == expected
        if isinstance(got, Scored):
            assert type(got.score) is float
