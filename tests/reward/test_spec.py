"""Tests of ``reward._spec`` and ``reward._exceptions``: the rules of a ``REWARD_SPEC``."""

from __future__ import annotations

import copy
import math
import pickle
import types
from collections import OrderedDict
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reward import RewardSpec, RewardSpecError, parse_spec

# The page's example, verbatim.
REWARD_SPEC = {
    "weights": {"accuracy": 0.7, "speed": 0.2, "cost": 0.1},
    "accuracy": {},
    "speed": {"reference": 2000},
    "cost": {"reference": 0.01},
}


def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The page's spec with the key at ``path`` set to ``value``."""
    spec = copy.deepcopy(REWARD_SPEC)
    node: Any = spec
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return spec


def _without(path: tuple[str, ...]) -> dict[str, Any]:
    """The page's spec with the key at ``path`` removed."""
    spec = copy.deepcopy(REWARD_SPEC)
    node: Any = spec
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return spec


def _refuse(obj: Any, path: str, *fragments: str, name: str = "REWARD_SPEC") -> None:
    """Assert that ``obj`` is refused with ``path`` named first and each fragment said."""
    with pytest.raises(RewardSpecError) as caught:
        parse_spec(obj, name)
    error = caught.value
    assert error.path == path
    assert str(error) == f"{path} {error.problem}"
    for fragment in fragments:
        assert fragment in error.problem, (fragment, error.problem)


BAD_NUMBERS = [
    pytest.param(-1, id="negative"),
    pytest.param(-0.5, id="negative-float"),
    pytest.param(True, id="bool"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="minus-inf"),
    pytest.param("0.5", id="str"),
    pytest.param(None, id="none"),
    pytest.param([0.5], id="list"),
    pytest.param(10**400, id="int-beyond-float"),
    pytest.param(1 + 2j, id="complex"),
]

BAD_REFERENCES = [*BAD_NUMBERS, pytest.param(0, id="zero"), pytest.param(0.0, id="zero-float")]


class TestParseSpec:
    def test_page_example(self) -> None:
        """The page's own spec parses to its weights (already summing to 1) and references."""
        spec = parse_spec(REWARD_SPEC)
        assert spec.accuracy_weight == pytest.approx(0.7)
        assert spec.speed_weight == pytest.approx(0.2)
        assert spec.cost_weight == pytest.approx(0.1)
        assert spec.speed_reference_ms == 2000.0
        assert spec.cost_reference_usd == 0.01
        assert spec.accuracy_reference is None

    def test_weights_are_scaled_to_sum_to_one(self) -> None:
        """Weights 7, 2, 1 become 0.7, 0.2, 0.1."""
        spec = parse_spec(_with(("weights",), {"accuracy": 7, "speed": 2, "cost": 1}))
        assert (spec.accuracy_weight, spec.speed_weight, spec.cost_weight) == pytest.approx(
            (0.7, 0.2, 0.1)
        )

    def test_zero_weights_allowed_when_one_is_positive(self) -> None:
        """A single positive weight gets all of it; zero weights are allowed."""
        spec = parse_spec(_with(("weights",), {"accuracy": 0, "speed": 3.5, "cost": 0}))
        assert (spec.accuracy_weight, spec.speed_weight, spec.cost_weight) == (0.0, 1.0, 0.0)

    def test_huge_weights_do_not_overflow(self) -> None:
        """Weights near the float maximum still scale to finite weights summing to 1."""
        spec = parse_spec(_with(("weights",), {"accuracy": 1e308, "speed": 1e308, "cost": 1e308}))
        assert spec.accuracy_weight == pytest.approx(1 / 3)
        assert spec.accuracy_weight + spec.speed_weight + spec.cost_weight == pytest.approx(1.0)

    def test_accuracy_reference(self) -> None:
        """An accuracy reference is kept: accuracy then is an error."""
        spec = parse_spec(_with(("accuracy",), {"reference": 2.5}))
        assert spec.accuracy_reference == 2.5

    def test_reward_spec_passes_through(self) -> None:
        """A RewardSpec is returned as it is."""
        spec = parse_spec(REWARD_SPEC)
        assert parse_spec(spec) is spec

    def test_result_is_frozen(self) -> None:
        """The parsed spec cannot be changed."""
        spec = parse_spec(REWARD_SPEC)
        with pytest.raises(AttributeError):
            spec.speed_reference_ms = 1.0  # type: ignore[misc]

    def test_input_is_not_modified(self) -> None:
        """Parsing leaves the user's dict unchanged."""
        spec = copy.deepcopy(REWARD_SPEC)
        parse_spec(spec)
        assert spec == REWARD_SPEC

    @pytest.mark.parametrize(
        "wrap",
        [
            pytest.param(types.MappingProxyType, id="mappingproxy"),
            pytest.param(OrderedDict, id="ordereddict"),
        ],
    )
    def test_other_mappings_accepted(self, wrap: Any) -> None:
        """Any Mapping works, nested too, and gives the same spec as plain dicts."""
        nested = wrap({key: wrap(value) for key, value in REWARD_SPEC.items()})
        assert parse_spec(nested) == parse_spec(REWARD_SPEC)

    def test_numpy_numbers_accepted(self) -> None:
        """NumPy scalars count as numbers, like in the return-value contract."""
        spec = _with(("weights",), {"accuracy": np.float32(1), "speed": np.int64(1), "cost": 0})
        spec["speed"]["reference"] = np.float64(500.0)
        parsed = parse_spec(spec)
        assert parsed.accuracy_weight == 0.5
        assert parsed.speed_reference_ms == 500.0

    @pytest.mark.parametrize("obj", [None, [], "REWARD_SPEC", 0, (("weights", {}),)])
    def test_not_a_dict(self, obj: Any) -> None:
        """A spec that is not a dict is refused, with the page's example as the fix."""
        _refuse(obj, "REWARD_SPEC", "must be a dict", '"weights"')

    @pytest.mark.parametrize("section", ["weights", "accuracy", "speed", "cost"])
    def test_missing_section(self, section: str) -> None:
        """Each of the four sections is required and its absence is named."""
        _refuse(_without((section,)), "REWARD_SPEC", f'has no "{section}" section')

    def test_unknown_top_level_key(self) -> None:
        """An unknown section is refused, naming it and the allowed keys."""
        _refuse(_with(("latency",), {}), "REWARD_SPEC", '"latency"', '"weights"', '"cost"')

    def test_unknown_key_suggests_the_close_one(self) -> None:
        """A misspelt section is answered with the likely intended name."""
        spec = _without(("weights",))
        spec["wieghts"] = REWARD_SPEC["weights"]
        _refuse(spec, "REWARD_SPEC", '"wieghts"', 'did you mean "weights"?')

    def test_non_string_key(self) -> None:
        """A key that is not a string is refused as unknown."""
        _refuse(_with((3,), 1), "REWARD_SPEC", "unknown key 3")

    @pytest.mark.parametrize("section", ["weights", "accuracy", "speed", "cost"])
    @pytest.mark.parametrize("value", [None, 2000, [], "x"])
    def test_section_not_a_dict(self, section: str, value: Any) -> None:
        """Every section must be a dict; the message names the section."""
        _refuse(_with((section,), value), f'REWARD_SPEC["{section}"]', "must be a dict")

    @pytest.mark.parametrize("section", ["weights", "accuracy", "speed", "cost"])
    def test_unknown_key_in_section(self, section: str) -> None:
        """A key a section does not know is refused, naming the section and the key."""
        _refuse(_with((section, "extra"), 1), f'REWARD_SPEC["{section}"]', '"extra"', "unknown")

    def test_misspelt_reference(self) -> None:
        """A misspelt reference is refused with the right spelling suggested."""
        spec = _with(("speed",), {"refrence": 2000})
        _refuse(spec, 'REWARD_SPEC["speed"]', '"refrence"', 'did you mean "reference"?')

    @pytest.mark.parametrize("weight", ["accuracy", "speed", "cost"])
    def test_missing_weight(self, weight: str) -> None:
        """Each of the three weights is required."""
        _refuse(_without(("weights", weight)), 'REWARD_SPEC["weights"]', f'no "{weight}" weight')

    @pytest.mark.parametrize("weight", ["accuracy", "speed", "cost"])
    @pytest.mark.parametrize("value", BAD_NUMBERS)
    def test_bad_weight(self, weight: str, value: Any) -> None:
        """A weight that is not a finite number of 0 or more is refused by its key path."""
        _refuse(
            _with(("weights", weight), value),
            f'REWARD_SPEC["weights"]["{weight}"]',
            "must be a number of 0 or more",
        )

    @pytest.mark.parametrize("zero", [0, 0.0, -0.0])
    def test_all_weights_zero(self, zero: float) -> None:
        """Weights that are all 0 are refused."""
        spec = _with(("weights",), {"accuracy": zero, "speed": zero, "cost": zero})
        _refuse(spec, 'REWARD_SPEC["weights"]', "all 0")

    @pytest.mark.parametrize(
        ("section", "unit"), [("speed", "milliseconds"), ("cost", "US dollars")]
    )
    def test_missing_reference(self, section: str, unit: str) -> None:
        """Speed and cost need a reference, and the message says its unit."""
        _refuse(_with((section,), {}), f'REWARD_SPEC["{section}"]', 'no "reference"', unit)

    @pytest.mark.parametrize(
        ("section", "unit"), [("speed", "milliseconds"), ("cost", "US dollars")]
    )
    @pytest.mark.parametrize("value", BAD_REFERENCES)
    def test_bad_reference(self, section: str, unit: str, value: Any) -> None:
        """A speed or cost reference that is not a positive finite number is refused."""
        _refuse(
            _with((section, "reference"), value),
            f'REWARD_SPEC["{section}"]["reference"]',
            f"must be a positive number of {unit}",
        )

    @pytest.mark.parametrize("value", BAD_REFERENCES)
    def test_bad_accuracy_reference(self, value: Any) -> None:
        """An accuracy reference, when given, must be a positive finite number."""
        _refuse(
            _with(("accuracy", "reference"), value),
            'REWARD_SPEC["accuracy"]["reference"]',
            "must be a positive number",
            "remove it",
        )

    def test_page_style_message(self) -> None:
        """The message reads as the contract words it: path, rule, offending value."""
        with pytest.raises(RewardSpecError) as caught:
            parse_spec(_with(("speed", "reference"), 0))
        assert str(caught.value) == (
            'REWARD_SPEC["speed"]["reference"] must be a positive number of milliseconds, got 0'
        )

    def test_offending_non_number_named_with_type(self) -> None:
        """A string where a number belongs is shown with its type."""
        with pytest.raises(RewardSpecError, match=r"got a str \('2000'\)"):
            parse_spec(_with(("speed", "reference"), "2000"))

    def test_custom_name(self) -> None:
        """The spec's name in messages is the caller's."""
        _refuse(_with(("cost", "reference"), -1), 'SPEC["cost"]["reference"]', name="SPEC")

    def test_quote_in_key_is_escaped(self) -> None:
        """A key holding a quote still gives a readable, unambiguous path."""
        _refuse(_with(('we"ights',), 1), "REWARD_SPEC", '"we\\"ights"')


@st.composite
def _valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    # Positive float weights stay far from the subnormals, where scaling them would
    # underflow and no normalisation could be exact.
    weight = st.one_of(
        st.just(0.0), st.floats(min_value=1e-100, max_value=1e12), st.integers(0, 10**6)
    )
    weights = draw(
        st.fixed_dictionaries({"accuracy": weight, "speed": weight, "cost": weight}).filter(
            lambda w: any(v > 0 for v in w.values())
        )
    )
    positive = st.floats(min_value=1e-9, max_value=1e9) | st.integers(1, 10**6)
    accuracy: dict[str, Any] = draw(st.just({}) | st.fixed_dictionaries({"reference": positive}))
    return {
        "weights": weights,
        "accuracy": accuracy,
        "speed": {"reference": draw(positive)},
        "cost": {"reference": draw(positive)},
    }


class TestParseSpecProperties:
    @given(_valid_specs())
    def test_weights_sum_to_one(self, obj: dict[str, Any]) -> None:
        """For any valid spec, the weights are in [0, 1] and sum to 1 (up to rounding)."""
        spec = parse_spec(obj)
        weights = (spec.accuracy_weight, spec.speed_weight, spec.cost_weight)
        assert all(0.0 <= w <= 1.0 for w in weights)
        assert math.fsum(weights) == pytest.approx(1.0, abs=1e-12)

    @given(_valid_specs(), st.floats(min_value=1e-6, max_value=1e6))
    def test_scaling_the_weights_changes_nothing(self, obj: dict[str, Any], k: float) -> None:
        """Multiplying every weight by a positive constant gives the same spec."""
        scaled = copy.deepcopy(obj)
        scaled["weights"] = {key: value * k for key, value in obj["weights"].items()}
        a, b = parse_spec(obj), parse_spec(scaled)
        assert a.speed_reference_ms == b.speed_reference_ms
        for x, y in [
            (a.accuracy_weight, b.accuracy_weight),
            (a.speed_weight, b.speed_weight),
            (a.cost_weight, b.cost_weight),
        ]:
            assert x == pytest.approx(y, rel=1e-12, abs=1e-300)

    @given(_valid_specs(), st.integers(-20, 20))
    def test_scaling_by_a_power_of_two_is_exact(self, obj: dict[str, Any], e: int) -> None:
        """Scaling every weight by 2**e gives exactly the same spec (no rounding involved)."""
        scaled = copy.deepcopy(obj)
        scaled["weights"] = {key: float(value) * 2.0**e for key, value in obj["weights"].items()}
        assert parse_spec(scaled) == parse_spec(obj)

    @given(_valid_specs())
    def test_fast_and_full_paths_agree(self, obj: dict[str, Any]) -> None:
        """Plain dicts (the fast path) and other mappings (the full path) give equal specs."""
        proxied = types.MappingProxyType(
            {key: types.MappingProxyType(value) for key, value in obj.items()}
        )
        assert parse_spec(proxied) == parse_spec(obj)


class TestRewardSpec:
    def test_round_trips_through_json(self) -> None:
        """A parsed spec encodes and decodes unchanged (it crosses process boundaries)."""
        spec = parse_spec(_with(("accuracy",), {"reference": 3}))
        data = msgspec.json.encode(spec)
        assert msgspec.json.decode(data, type=RewardSpec) == spec

    def test_pickles(self) -> None:
        """A parsed spec pickles, for process workers."""
        spec = parse_spec(REWARD_SPEC)
        assert pickle.loads(pickle.dumps(spec)) == spec


class TestRewardSpecError:
    def test_is_a_value_error_with_data(self) -> None:
        """The error is a ValueError carrying the path and the problem."""
        error = RewardSpecError('REWARD_SPEC["cost"]', "must be a dict, got 1")
        assert isinstance(error, ValueError)
        assert error.path == 'REWARD_SPEC["cost"]'
        assert error.problem == "must be a dict, got 1"
        assert str(error) == 'REWARD_SPEC["cost"] must be a dict, got 1'

    def test_pickles_with_its_data(self) -> None:
        """The error survives pickling (from a worker process) with its attributes."""
        error = RewardSpecError('REWARD_SPEC["speed"]["reference"]', "must be positive")
        copy_ = pickle.loads(pickle.dumps(error))
        assert (copy_.path, copy_.problem, str(copy_)) == (error.path, error.problem, str(error))
