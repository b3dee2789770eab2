"""Tests of ``reward._components``: r/(r+x), the components and their weighted sum."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reward import Components, RewardSpec, combine, components, lower_is_better, parse_spec

REWARD_SPEC = {
    "weights": {"accuracy": 0.7, "speed": 0.2, "cost": 0.1},
    "accuracy": {},
    "speed": {"reference": 2000},
    "cost": {"reference": 0.01},
}
ERROR_SPEC = {**REWARD_SPEC, "accuracy": {"reference": 4.0}}

positive = st.floats(min_value=1e-9, max_value=1e9)
measure = st.floats(min_value=0.0, max_value=1e12)
maybe_measure = st.none() | measure
unit = st.floats(min_value=0.0, max_value=1.0)


@st.composite
def specs(draw: st.DrawFn, accuracy_reference: bool | None = False) -> RewardSpec:
    """A valid parsed spec; with an accuracy reference when asked (None: either way)."""
    weight = st.just(0.0) | st.floats(min_value=1e-100, max_value=1e6)
    weights = draw(
        st.fixed_dictionaries({"accuracy": weight, "speed": weight, "cost": weight}).filter(
            lambda w: any(v > 0 for v in w.values())
        )
    )
    with_reference = draw(st.booleans()) if accuracy_reference is None else accuracy_reference
    return parse_spec(
        {
            "weights": weights,
            "accuracy": {"reference": draw(positive)} if with_reference else {},
            "speed": {"reference": draw(positive)},
            "cost": {"reference": draw(positive)},
        }
    )


class TestLowerIsBetter:
    @given(positive)
    def test_half_at_the_reference(self, r: float) -> None:
        """r/(r+x) is exactly 0.5 when x equals the reference."""
        assert lower_is_better(r, r) == 0.5

    @given(positive)
    def test_one_at_zero(self, r: float) -> None:
        """Zero time, cost or error gives 1."""
        assert lower_is_better(0.0, r) == 1.0

    @pytest.mark.parametrize(
        ("x", "r", "expected"), [(1000, 2000, 2 / 3), (6000, 2000, 0.25), (0.03, 0.01, 0.25)]
    )
    def test_hand_computed(self, x: float, r: float, expected: float) -> None:
        """r/(r+x) on values worked out by hand."""
        assert lower_is_better(x, r) == pytest.approx(expected)

    def test_infinity_gives_zero(self) -> None:
        """An infinite quantity gives 0, never NaN."""
        assert lower_is_better(math.inf, 1.0) == 0.0

    def test_huge_inputs_do_not_overflow(self) -> None:
        """Values near the float maximum still give the right ratio."""
        assert lower_is_better(1e308, 1e308) == 0.5

    @given(measure, measure, positive)
    def test_monotone(self, x: float, y: float, r: float) -> None:
        """A larger quantity never gives a larger component, and it stays in [0, 1]."""
        low, high = sorted((x, y))
        assert 0.0 <= lower_is_better(high, r) <= lower_is_better(low, r) <= 1.0

    @pytest.mark.parametrize("x", [-1.0, -1e-12, math.nan, True, "1", None])
    def test_bad_quantity(self, x: Any) -> None:
        """A negative, NaN or non-number quantity is a ValueError naming it."""
        with pytest.raises(ValueError, match="measured value"):
            lower_is_better(x, 1.0)

    @pytest.mark.parametrize("r", [0.0, -1.0, math.inf, math.nan])
    def test_bad_reference(self, r: float) -> None:
        """The reference must be positive and finite."""
        with pytest.raises(ValueError, match="reference"):
            lower_is_better(1.0, r)


class TestComponents:
    def test_page_example(self) -> None:
        """The page's spec: a right answer in 1000 ms at no cost gives 1, 2/3 and 1."""
        parts = components(parse_spec(REWARD_SPEC), 1.0, 1000.0, 0.0)
        assert (parts.accuracy, parts.cost) == (1.0, 1.0)
        assert parts.speed == pytest.approx(2 / 3)

    def test_not_measured_gives_zero(self) -> None:
        """A time or cost of None (not measured) is a component of 0."""
        parts = components(parse_spec(REWARD_SPEC), 0.5, None, None)
        assert (parts.accuracy, parts.speed, parts.cost) == (0.5, 0.0, 0.0)

    def test_accuracy_with_reference_is_an_error(self) -> None:
        """With a reference, accuracy is an error mapped by r/(r+e)."""
        spec = parse_spec(ERROR_SPEC)
        assert components(spec, 4.0, 0.0, 0.0).accuracy == 0.5
        assert components(spec, 0.0, 0.0, 0.0).accuracy == 1.0
        assert components(spec, 12.0, 0.0, 0.0).accuracy == pytest.approx(0.25)

    @pytest.mark.parametrize("accuracy", [-0.01, 1.01, 2.0, math.inf, -math.inf])
    def test_accuracy_out_of_range_is_refused(self, accuracy: float) -> None:
        """Without a reference, an accuracy outside [0, 1] is an error, not clamped."""
        with pytest.raises(ValueError, match="from 0 to 1") as caught:
            components(parse_spec(REWARD_SPEC), accuracy, 1.0, 0.0)
        assert 'REWARD_SPEC["accuracy"]["reference"]' in str(caught.value)

    def test_negative_error_is_refused(self) -> None:
        """With a reference, a negative error is refused."""
        with pytest.raises(ValueError, match="0 or more"):
            components(parse_spec(ERROR_SPEC), -1.0, 1.0, 0.0)

    @pytest.mark.parametrize("accuracy", [math.nan, True, "1.0", None])
    def test_accuracy_not_a_number(self, accuracy: Any) -> None:
        """NaN, a bool or a non-number accuracy is refused with the fix."""
        with pytest.raises(ValueError, match="accuracy must be a number"):
            components(parse_spec(REWARD_SPEC), accuracy, 1.0, 0.0)

    def test_numpy_accuracy(self) -> None:
        """A NumPy scalar accuracy is a number."""
        accuracy: Any = np.float32(0.5)
        assert components(parse_spec(REWARD_SPEC), accuracy, 1.0, 0.0).accuracy == 0.5

    @pytest.mark.parametrize(("own_ms", "cost"), [(-1.0, 0.0), (1.0, -0.01)])
    def test_negative_measurement_is_refused(self, own_ms: float, cost: float) -> None:
        """A negative time or cost is an error."""
        with pytest.raises(ValueError, match="0 or more"):
            components(parse_spec(REWARD_SPEC), 1.0, own_ms, cost)

    def test_frozen(self) -> None:
        """Components cannot be changed after the fact."""
        parts = components(parse_spec(REWARD_SPEC), 1.0, 1.0, 0.0)
        with pytest.raises(AttributeError):
            parts.speed = 1.0  # type: ignore[misc]


def _reward(spec: RewardSpec, accuracy: float, own_ms: float | None, cost: float | None) -> float:
    return combine(spec, components(spec, accuracy, own_ms, cost))


class TestCombine:
    def test_page_example(self) -> None:
        """0.7 * 1 + 0.2 * 2/3 + 0.1 * 1 for the page's spec at 1000 ms and no cost."""
        spec = parse_spec(REWARD_SPEC)
        assert _reward(spec, 1.0, 1000.0, 0.0) == pytest.approx(0.7 + 0.2 * 2 / 3 + 0.1)

    def test_weights_apply(self) -> None:
        """Each component counts by its weight."""
        spec = parse_spec(REWARD_SPEC)
        assert combine(spec, Components(1.0, 0.0, 0.0)) == pytest.approx(0.7)
        assert combine(spec, Components(0.0, 1.0, 0.0)) == pytest.approx(0.2)
        assert combine(spec, Components(0.0, 0.0, 1.0)) == pytest.approx(0.1)

    @given(specs(), unit, maybe_measure, maybe_measure)
    def test_in_unit_interval(
        self, spec: RewardSpec, accuracy: float, own_ms: float | None, cost: float | None
    ) -> None:
        """For any valid spec and inputs (accuracy without reference), the reward is in [0, 1]."""
        assert 0.0 <= _reward(spec, accuracy, own_ms, cost) <= 1.0

    @given(specs(accuracy_reference=True), measure, maybe_measure, maybe_measure)
    def test_in_unit_interval_with_error(
        self, spec: RewardSpec, error: float, own_ms: float | None, cost: float | None
    ) -> None:
        """With an accuracy reference, any error of 0 or more gives a reward in [0, 1]."""
        assert 0.0 <= _reward(spec, error, own_ms, cost) <= 1.0

    @given(specs(), unit, unit, maybe_measure, maybe_measure)
    def test_monotone_in_accuracy(
        self, spec: RewardSpec, a: float, b: float, own_ms: float | None, cost: float | None
    ) -> None:
        """A higher accuracy never lowers the reward."""
        low, high = sorted((a, b))
        assert _reward(spec, low, own_ms, cost) <= _reward(spec, high, own_ms, cost)

    @given(specs(accuracy_reference=True), measure, measure, maybe_measure, maybe_measure)
    def test_monotone_in_error(
        self, spec: RewardSpec, a: float, b: float, own_ms: float | None, cost: float | None
    ) -> None:
        """With an accuracy reference, a lower error never lowers the reward."""
        low, high = sorted((a, b))
        assert _reward(spec, high, own_ms, cost) <= _reward(spec, low, own_ms, cost)

    @given(specs(accuracy_reference=None), unit, measure, measure, maybe_measure)
    def test_monotone_in_time(
        self, spec: RewardSpec, accuracy: float, a: float, b: float, cost: float | None
    ) -> None:
        """Less time never lowers the reward, and unmeasured time is never better."""
        if spec.accuracy_reference is not None:
            accuracy *= 10
        fast, slow = sorted((a, b))
        r_fast = _reward(spec, accuracy, fast, cost)
        r_slow = _reward(spec, accuracy, slow, cost)
        assert _reward(spec, accuracy, None, cost) <= r_slow <= r_fast

    @given(specs(accuracy_reference=None), unit, maybe_measure, measure, measure)
    def test_monotone_in_cost(
        self, spec: RewardSpec, accuracy: float, own_ms: float | None, a: float, b: float
    ) -> None:
        """Lower cost never lowers the reward, and unmeasured cost is never better."""
        if spec.accuracy_reference is not None:
            accuracy *= 10
        cheap, dear = sorted((a, b))
        r_cheap = _reward(spec, accuracy, own_ms, cheap)
        r_dear = _reward(spec, accuracy, own_ms, dear)
        assert _reward(spec, accuracy, own_ms, None) <= r_dear <= r_cheap

    @given(
        specs(accuracy_reference=None),
        st.floats(min_value=1e-3, max_value=1e3),
        unit,
        maybe_measure,
        maybe_measure,
    )
    def test_scaling_weights_changes_nothing(
        self,
        spec: RewardSpec,
        k: float,
        accuracy: float,
        own_ms: float | None,
        cost: float | None,
    ) -> None:
        """Scaling every weight of a spec by a positive constant leaves every reward alone."""
        if spec.accuracy_reference is not None:
            accuracy *= 10
        obj = {
            "weights": {
                "accuracy": spec.accuracy_weight * k,
                "speed": spec.speed_weight * k,
                "cost": spec.cost_weight * k,
            },
            "accuracy": {}
            if spec.accuracy_reference is None
            else {"reference": spec.accuracy_reference},
            "speed": {"reference": spec.speed_reference_ms},
            "cost": {"reference": spec.cost_reference_usd},
        }
        scaled = parse_spec(obj)
        assert _reward(scaled, accuracy, own_ms, cost) == pytest.approx(
            _reward(spec, accuracy, own_ms, cost), rel=1e-12, abs=1e-15
        )
