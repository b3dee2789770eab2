"""Tests of the ``skynet`` facade: ``reward``, ``observation`` and ``service_cost`` as a
metric sees them, inside the call context the engine sets around ``score``."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import skynet
from evaluator._call._context import CallContext, call_context
from evaluator._call._contract import validate_return
from evaluator._call._loader import load_metric
from evaluator._call._results import Observation
from evaluator._exceptions import OutsideCallError
from reward import RewardSpecError

# The page's reward example, verbatim from docs/contract.md ("Accuracy, speed and cost").
PAGE_METRIC = """\
from skynet import reward

REWARD_SPEC = {
    "weights": {"accuracy": 0.7, "speed": 0.2, "cost": 0.1},
    "accuracy": {},
    "speed": {"reference": 2000},
    "cost": {"reference": 0.01},
}

def score(input, output, expected=None):
    ok = output == expected["label"]
    return reward(REWARD_SPEC, 1.0 if ok else 0.0, "Correct." if ok else "Wrong label.")
"""

SPEC: dict[str, Any] = {
    "weights": {"accuracy": 0.7, "speed": 0.2, "cost": 0.1},
    "accuracy": {},
    "speed": {"reference": 2000},
    "cost": {"reference": 0.01},
}
NO_PROGRAM = "time not measured: score-only run (no program)"
NO_PRICE = "cost not measured: no price known for model acme-1"


def in_score(observation: Observation | None, fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn`` the way the engine calls ``score``: inside the example's call context."""
    with call_context(CallContext("q1", "score", observation, None)):
        return fn(*args)


@pytest.fixture
def page_score(tmp_path: Path) -> Callable[..., Any]:
    """The page's metric, written to a file and loaded like a user's metric."""
    path = tmp_path / "metric.py"
    path.write_text(PAGE_METRIC)
    return load_metric(path).fn


class TestReward:
    def test_page_example_right_answer(self, page_score: Callable[..., Any]) -> None:
        """The page's metric: speed is r/(r+own_ms), cost 0 gives 1, the sum is weighted."""
        obs = Observation(duration_ms=1500.0, queued_ms=500.0, cost_usd=0.0)
        value = in_score(obs, page_score, {"q": "x"}, "cat", {"label": "cat"})
        score, info = value
        speed = 2000 / (2000 + 1000)  # own time: 1500 ms minus 500 ms queued
        assert info["scores"] == {"accuracy": 1.0, "speed": pytest.approx(speed), "cost": 1.0}
        assert score == pytest.approx(0.7 * 1.0 + 0.2 * speed + 0.1 * 1.0)
        first, line = info["feedback"].split("\n")
        assert first == "Correct."
        for fragment in ("1,000 ms", "500 ms queued", "2,000 ms", "$0 ", "$0.01"):
            assert fragment in line, (fragment, line)
        scored = validate_return(value, "q1")
        assert scored.score == score
        assert scored.scores == info["scores"]

    def test_page_example_wrong_answer(self, page_score: Callable[..., Any]) -> None:
        """A wrong label keeps speed and cost but loses the accuracy weight."""
        obs = Observation(duration_ms=2000.0, queued_ms=0.0, cost_usd=0.01)
        score, info = in_score(obs, page_score, {"q": "x"}, "dog", {"label": "cat"})
        assert info["scores"] == {"accuracy": 0.0, "speed": 0.5, "cost": 0.5}
        assert score == pytest.approx(0.2 * 0.5 + 0.1 * 0.5)
        assert info["feedback"].startswith("Wrong label.\n")
        assert "queued" not in info["feedback"]

    def test_queued_time_does_not_count(self) -> None:
        """Time spent waiting on the engine's rate limiter does not change the score."""
        calm = Observation(duration_ms=800.0, queued_ms=0.0, cost_usd=0.0)
        busy = Observation(duration_ms=5800.0, queued_ms=5000.0, cost_usd=0.0)
        assert (
            in_score(calm, skynet.reward, SPEC, 1.0)[0]
            == in_score(busy, skynet.reward, SPEC, 1.0)[0]
        )

    def test_time_not_measured(self) -> None:
        """Without a measured time the speed component is 0 and the feedback says why."""
        obs = Observation(duration_ms=None, cost_usd=0.0, notes=(NO_PROGRAM,))
        value = in_score(obs, skynet.reward, SPEC, 1.0, "Correct.")
        score, info = value
        assert info["scores"]["speed"] == 0.0
        assert score == pytest.approx(0.7 + 0.1)
        assert NO_PROGRAM in info["feedback"]
        validate_return(value, "q1")

    def test_time_not_measured_without_a_note(self) -> None:
        """An unmeasured time with no recorded reason still says it was not measured."""
        obs = Observation(duration_ms=None, cost_usd=0.0)
        _, info = in_score(obs, skynet.reward, SPEC, 1.0)
        assert "time not measured" in info["feedback"]

    def test_cost_not_measured(self) -> None:
        """Without a measured cost the cost component is 0 and the feedback says why."""
        obs = Observation(duration_ms=0.0, cost_usd=None, notes=(NO_PRICE,))
        value = in_score(obs, skynet.reward, SPEC, 1.0, "Correct.")
        score, info = value
        assert info["scores"] == {"accuracy": 1.0, "speed": 1.0, "cost": 0.0}
        assert score == pytest.approx(0.7 + 0.2)
        assert NO_PRICE in info["feedback"]
        validate_return(value, "q1")

    def test_both_not_measured(self) -> None:
        """With neither time nor cost, only accuracy counts and both reasons are given."""
        obs = Observation(duration_ms=None, cost_usd=None, notes=(NO_PROGRAM, NO_PRICE))
        score, info = in_score(obs, skynet.reward, SPEC, 0.5, "Half right.")
        assert score == pytest.approx(0.7 * 0.5)
        first, line = info["feedback"].split("\n")
        assert first == "Half right."
        assert NO_PROGRAM in line
        assert NO_PRICE in line

    def test_empty_feedback_is_just_the_line(self) -> None:
        """Without caller feedback, the feedback is the one speed-and-cost line."""
        obs = Observation(duration_ms=10.0, cost_usd=0.002)
        _, info = in_score(obs, skynet.reward, SPEC, 1.0)
        assert "\n" not in info["feedback"]
        assert "10 ms" in info["feedback"]
        assert "$0.002" in info["feedback"]

    def test_accuracy_as_an_error(self) -> None:
        """With an accuracy reference the accuracy is an error, lower is better."""
        spec = {**SPEC, "accuracy": {"reference": 3.0}}
        obs = Observation(duration_ms=0.0, cost_usd=0.0)
        _, info = in_score(obs, skynet.reward, spec, 3.0)
        assert info["scores"]["accuracy"] == 0.5

    def test_bad_spec_names_the_key(self) -> None:
        """A malformed spec raises RewardSpecError naming the key path and the fix."""
        obs = Observation(duration_ms=1.0)
        bad = {**SPEC, "speed": {"reference": 0}}
        with pytest.raises(RewardSpecError) as caught:
            in_score(obs, skynet.reward, bad, 1.0)
        assert str(caught.value) == (
            'REWARD_SPEC["speed"]["reference"] must be a positive number of milliseconds, got 0'
        )

    @pytest.mark.parametrize("accuracy", [1.5, -0.1, math.nan])
    def test_accuracy_out_of_range(self, accuracy: float) -> None:
        """An accuracy outside [0, 1] (or NaN) is refused, naming reward(), not clamped."""
        obs = Observation(duration_ms=1.0)
        with pytest.raises(ValueError, match=r"^skynet\.reward\(\): the accuracy"):
            in_score(obs, skynet.reward, SPEC, accuracy)

    def test_feedback_must_be_text(self) -> None:
        """A feedback that is not a str is refused with the fix."""
        obs = Observation(duration_ms=1.0)
        with pytest.raises(TypeError, match="`feedback` must be a str"):
            in_score(obs, skynet.reward, SPEC, 1.0, None)

    async def test_async_metric(self) -> None:
        """An ``async def`` metric reads the same context across an await."""

        async def score() -> Any:
            await _checkpoint()
            return skynet.reward(SPEC, 1.0, "ok")

        obs = Observation(duration_ms=2000.0, cost_usd=0.0)
        with call_context(CallContext("q1", "score", obs, None)):
            _, info = await score()
        assert info["scores"]["speed"] == 0.5

    @given(
        accuracy=st.floats(0.0, 1.0),
        duration=st.none() | st.floats(0.0, 1e9),
        queued=st.floats(0.0, 1e9),
        cost=st.none() | st.floats(0.0, 1e6),
        feedback=st.text(max_size=20),
    )
    def test_always_a_valid_return(
        self,
        accuracy: float,
        duration: float | None,
        queued: float,
        cost: float | None,
        feedback: str,
    ) -> None:
        """For any measurements, reward() returns a pair the contract accepts, score in [0, 1]."""
        obs = Observation(duration_ms=duration, queued_ms=queued, cost_usd=cost)
        value = in_score(obs, skynet.reward, SPEC, accuracy, feedback)
        scored = validate_return(value, "q1")
        assert 0.0 <= scored.score <= 1.0
        assert set(scored.scores) == {"accuracy", "speed", "cost"}
        assert scored.feedback.startswith(feedback)


async def _checkpoint() -> None:
    import asyncio

    await asyncio.sleep(0)


class TestObservation:
    def test_returns_the_measurements(self) -> None:
        """observation() gives the current example's measurements."""
        obs = Observation(duration_ms=12.5, queued_ms=2.5, cost_usd=0.25, llm_calls=3)
        seen = in_score(obs, skynet.observation)
        assert (seen.duration_ms, seen.queued_ms, seen.own_ms, seen.cost_usd, seen.llm_calls) == (
            12.5,
            2.5,
            10.0,
            0.25,
            3,
        )

    @pytest.mark.parametrize("field", ["duration_ms", "queued_ms", "cost_usd", "notes"])
    def test_read_only(self, field: str) -> None:
        """A metric cannot change the measurements: assigning to the view raises."""
        obs = Observation(duration_ms=12.5, cost_usd=0.25)
        seen = in_score(obs, skynet.observation)
        with pytest.raises(AttributeError):
            setattr(seen, field, 0.0)
        assert in_score(obs, skynet.observation) == obs

    def test_unmeasured_figure_and_its_reason(self) -> None:
        """A figure the engine could not measure is None, and the notes say why."""
        obs = Observation(duration_ms=None, cost_usd=None, notes=(NO_PROGRAM, NO_PRICE))
        seen = in_score(obs, skynet.observation)
        assert seen.own_ms is None
        assert seen.notes == (NO_PROGRAM, NO_PRICE)


class TestServiceCost:
    def test_measured(self) -> None:
        """service_cost() is the program's cost in US dollars."""
        assert in_score(Observation(cost_usd=0.0123), skynet.service_cost) == 0.0123

    def test_not_measured(self) -> None:
        """service_cost() is None where the cost could not be measured."""
        assert in_score(Observation(cost_usd=None, notes=(NO_PRICE,)), skynet.service_cost) is None


class TestOutsideCall:
    @pytest.mark.parametrize(
        ("name", "call"),
        [
            ("observation", lambda: skynet.observation()),
            ("service_cost", lambda: skynet.service_cost()),
            ("reward", lambda: skynet.reward(SPEC, 1.0)),
        ],
    )
    def test_outside_any_call(self, name: str, call: Callable[[], Any]) -> None:
        """Outside a metric call each raises OutsideCallError saying where it can be used."""
        with pytest.raises(OutsideCallError) as caught:
            call()
        assert caught.value.name == name
        assert f"skynet.{name}()" in str(caught.value)
        assert "`score`" in str(caught.value)

    @pytest.mark.parametrize("name", ["observation", "service_cost"])
    def test_inside_run(self, name: str) -> None:
        """Measurements are not readable from the program's ``run``: they are not final."""
        with (
            call_context(CallContext("q1", "run", Observation(), None)),
            pytest.raises(OutsideCallError),
        ):
            getattr(skynet, name)()


class TestSkynetPackage:
    def test_import_is_light(self) -> None:
        """Importing skynet pulls in none of dspy, aiohttp or rich (a fresh interpreter)."""
        code = textwrap.dedent(
            """
            import sys
            import skynet
            heavy = sorted(
                m for m in ("dspy", "aiohttp", "rich", "litellm", "gepa", "matplotlib")
                if m in sys.modules
            )
            print(",".join(heavy))
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
        assert done.stdout.strip() == ""
