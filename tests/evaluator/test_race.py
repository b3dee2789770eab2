"""The race between candidates: its statistics (the bounds hold on bounded data), its loop
(a clearly better candidate wins, equal ones end tied), and Evaluator.race inline."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from evaluator import Budget, ConfigError, Evaluator, Result
from evaluator._race import (
    Ties,
    betting_log_wealth,
    decide,
    mean_interval,
    pair_delta,
    parse_ties,
    round_ends,
    run_race,
)

# A program whose verdict is known: it passes an example when the example's difficulty
# `u` is below the artifact's rate, flipped with probability `noise` (fixed per example).
PROGRAM = """
import hashlib
EXECUTION = "inline"

def run(artifact, input):
    key = f"{artifact['name']}:{input['n']}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
    return (input["u"] < artifact["rate"]) != (draw < artifact.get("noise", 0.0))
"""
METRIC = """
EXECUTION = "inline"

def score(input, output, expected=None):
    return (1.0 if output else 0.0), {"feedback": "pass" if output else "fail"}
"""


def rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [{"id": f"e{i}", "input": {"n": i, "u": float(u)}} for i, u in enumerate(rng.random(n))]


def bernoulli_evaluate(rates: list[float], n: int, seed: int) -> Any:
    """An evaluate() of candidates i = 0..K-1 with independent pass rates, fixed draws."""
    rng = np.random.default_rng(seed)
    table = (rng.random((len(rates), n)) < np.array(rates)[:, None]).astype(float)

    async def evaluate(candidate: int, part: list[int]) -> list[Result]:
        return [Result(example_id=e, score=float(table[candidate, e])) for e in part]

    return evaluate


class TestMeanInterval:
    @settings(max_examples=25, deadline=None)
    @given(
        a=st.floats(0.2, 5.0),
        b=st.floats(0.2, 5.0),
        n=st.integers(5, 200),
        delta=st.sampled_from([0.05, 0.1, 0.2]),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_the_interval_covers_the_mean_on_bounded_data(
        self, a: float, b: float, n: int, delta: float, seed: int
    ) -> None:
        """On Beta(a, b) data in [0, 1], the interval holds the true mean at least
        1 - delta of the time (3 standard errors of slack for the 200 draws)."""
        rng = np.random.default_rng(seed)
        truth = a / (a + b)
        hits = 0
        for draw in rng.beta(a, b, size=(200, n)):
            low, high = mean_interval(draw, 0.0, 1.0, delta, grid=101)
            hits += low <= truth <= high
        assert hits / 200 >= 1 - delta - 3 * math.sqrt(delta * (1 - delta) / 200)

    def test_it_narrows_with_more_examples(self) -> None:
        """1,000 values of a coin give a tighter interval than 50, around the mean."""
        rng = np.random.default_rng(0)
        x = (rng.random(1000) < 0.7).astype(float)
        wide, narrow = mean_interval(x[:50], 0, 1, 0.05), mean_interval(x, 0, 1, 0.05)
        assert narrow[1] - narrow[0] < (wide[1] - wide[0]) / 2
        assert narrow[0] < 0.7 < narrow[1]

    def test_no_values_claim_nothing(self) -> None:
        """No values: the whole range."""
        assert mean_interval([], 0.0, 1.0, 0.05) == (0.0, 1.0)


class TestBettingLogWealth:
    @settings(max_examples=20, deadline=None)
    @given(
        p=st.floats(0.05, 0.95),
        shift=st.floats(0.0, 0.3),
        seed=st.integers(0, 2**32 - 1),
    )
    def test_under_the_null_the_bettor_rarely_wins(self, p: float, shift: float, seed: int) -> None:
        """Values in [-1, 1] of mean <= 0: the wealth ever reaches 1/delta in at most
        delta of the sequences (Ville), with 3 standard errors of slack."""
        delta = 0.1
        rng = np.random.default_rng(seed)
        ones = rng.random((400, 300)) < p
        z = np.where(ones, 1.0 - p, -p) - shift  # mean -shift <= 0, inside [-1, 1]
        z = np.clip(z, -1.0, 1.0)
        won = np.mean(betting_log_wealth(z).max(axis=1) >= math.log(1 / delta))
        assert won <= delta + 3 * math.sqrt(delta * (1 - delta) / 400)

    def test_a_real_difference_is_found(self) -> None:
        """Values of mean 0.3 reach 1/0.001 within 300 values."""
        rng = np.random.default_rng(1)
        z = np.where(rng.random(300) < 0.65, 1.0, -1.0)
        assert betting_log_wealth(z).max() >= math.log(1000)

    def test_each_bet_uses_only_the_past(self) -> None:
        """Changing a later value never changes the wealth before it."""
        z = np.array([0.5, 0.5, -1.0, 0.5, 1.0])
        other = z.copy()
        other[3] = -1.0
        assert np.allclose(betting_log_wealth(z)[:3], betting_log_wealth(other)[:3])


class TestPairDelta:
    def test_split_over_the_rivals_of_the_best(self) -> None:
        """Without an epsilon, delta is split over K-1 drop tests; with one, half goes to
        the K(K-1) tie tests."""
        assert pair_delta(0.05, 5, epsilon=False) == (0.05 / 4, 0.0)
        drop, tie = pair_delta(0.05, 5, epsilon=True)
        assert drop == pytest.approx(0.025 / 4) and tie == pytest.approx(0.025 / 20)


class TestRoundEnds:
    def test_grow_to_the_total(self) -> None:
        """Rounds grow from the first size and end exactly at the total."""
        ends = round_ends(1000, 16)
        assert ends[0] == 16 and ends[-1] == 1000 and ends == sorted(set(ends))


class TestDecide:
    def test_drops_the_clearly_worse(self) -> None:
        """A candidate that fails where another passes, every time, is dropped by it."""
        scores = np.array([[1.0] * 60, [0.0] * 60])
        decision = decide(scores, 1.0, (0.01, 0.0), Ties())
        assert decision.dropped == [1] and decision.beaten_by == {1: 0}

    def test_equal_scores_drop_nobody(self) -> None:
        """Identical rows: nobody is dropped, and with an epsilon they are tied within it."""
        scores = np.tile(np.array([1.0, 0.0] * 200), (2, 1))
        assert decide(scores, 1.0, (0.01, 0.0), Ties()).dropped == []
        assert decide(scores, 1.0, (0.01, 0.01), Ties(0.05)).tied_within


class TestParseTies:
    def test_forms(self) -> None:
        """'report' and 'epsilon=E' are read; anything else names the option."""
        assert parse_ties("report") == Ties()
        assert parse_ties("epsilon=0.01") == Ties(0.01)
        for bad in ("first", "epsilon=0", "epsilon=x", "epsilon=-1"):
            with pytest.raises(ConfigError, match="'report'") as info:
                parse_ties(bad)
            assert info.value.option == "ties"


class TestRunRace:
    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 2**32 - 1))
    async def test_a_clearly_better_candidate_is_picked(self, seed: int) -> None:
        """Rates 0.9 against 0.4 and 0.3: the first wins alone, and the others stop early."""
        race = await run_race(
            bernoulli_evaluate([0.4, 0.9, 0.3], 500, seed), [0, 1, 2], range(500), seed=seed
        )
        assert race.outcome == "winner" and race.winners == [1] and not race.tied
        assert race.winner is not None and race.winner.index == 1
        assert race.ranking[0] == 1
        assert race.spend.evaluations < race.spend.full_evaluations
        dropped = [c for c in race.candidates if c.index != 1]
        assert all(c.dropped_round is not None and c.dropped_reason for c in dropped)
        assert all("behind candidate 2" in str(c.dropped_reason) for c in dropped)

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 2**32 - 1))
    async def test_equal_candidates_end_tied(self, seed: int) -> None:
        """Two candidates of the same rate (the same verdicts): never one picked; both are
        reported as tied after every example."""

        async def evaluate(candidate: int, part: list[int]) -> list[Result]:
            return [Result(example_id=e, score=float((e * 7 + seed) % 3 == 0)) for e in part]

        race = await run_race(evaluate, [0, 1], range(300), seed=seed)
        assert race.outcome == "tied" and race.tied and sorted(race.winners) == [0, 1]
        assert race.winner is None
        assert all(c.examples == 300 and c.dropped_round is None for c in race.candidates)

    async def test_epsilon_stops_when_the_survivors_are_close(self) -> None:
        """With ties=epsilon=0.1, equal candidates are reported tied within 0.1 before
        the examples run out."""

        async def evaluate(candidate: int, part: list[int]) -> list[Result]:
            return [Result(example_id=e, score=float(e % 2)) for e in part]

        race = await run_race(evaluate, ["a", "b"], range(2000), ties="epsilon=0.1")
        assert race.outcome == "tied" and race.ties == "epsilon=0.1"
        assert "within 0.1" in race.reason
        assert race.spend.evaluations < 4000

    async def test_max_evaluations_ends_the_race_with_the_standing(self) -> None:
        """A limit of 100 evaluations: no more are made, the outcome says budget."""
        race = await run_race(
            bernoulli_evaluate([0.5, 0.5, 0.5], 1000, 0),
            [0, 1, 2],
            range(1000),
            max_evaluations=100,
        )
        assert race.outcome == "budget" and race.tied
        assert race.spend.evaluations <= 100
        assert "max_evaluations=100" in race.reason

    async def test_the_matrix_holds_each_score_until_the_drop(self) -> None:
        """scores[i] has a value for every example the candidate saw and None after."""
        race = await run_race(bernoulli_evaluate([0.1, 0.95], 400, 3), [0, 1], range(400))
        loser = race.candidates[0]
        row = race.scores[0]
        assert len(row) == len(race.example_ids)
        assert all(v is not None for v in row[: loser.examples])
        assert all(v is None for v in row[loser.examples :])

    async def test_a_score_outside_the_range_is_refused(self) -> None:
        """A score of 2 with score_range (0, 1): an error naming the example and option."""

        async def evaluate(candidate: int, part: list[int]) -> list[Result]:
            return [Result(example_id=e, score=2.0) for e in part]

        with pytest.raises(ConfigError, match="outside score_range") as info:
            await run_race(evaluate, [0, 1], range(40))
        assert info.value.option == "score_range"

    @pytest.mark.parametrize(
        ("kwargs", "option"),
        [
            ({"candidates": [0]}, "candidates"),
            ({"confidence": 1.5}, "confidence"),
            ({"score_range": (1.0, 0.0)}, "score_range"),
            ({"labels": ["a"]}, "labels"),
            ({"max_evaluations": 1}, "max_evaluations"),
        ],
    )
    async def test_bad_options_name_themselves(self, kwargs: dict[str, Any], option: str) -> None:
        """Each bad option is a ConfigError naming it."""
        args: dict[str, Any] = {"candidates": [0, 1], **kwargs}
        with pytest.raises(ConfigError) as info:
            await run_race(bernoulli_evaluate([0.5, 0.5], 40, 0), examples=range(40), **args)
        assert info.value.option == option


def write(path: Path, name: str, text: str) -> Path:
    file = path / name
    file.write_text(textwrap.dedent(text))
    return file


class TestEvaluatorRace:
    async def test_a_race_of_three_artifacts_inline(self, tmp_path: Path) -> None:
        """Three artifacts of known rates through the real Evaluator: the best wins, and
        what it spent is what the engine evaluated."""
        program, metric = write(tmp_path, "p.py", PROGRAM), write(tmp_path, "m.py", METRIC)
        artifacts = [{"name": n, "rate": r} for n, r in (("a", 0.3), ("b", 0.8), ("c", 0.5))]
        async with Evaluator(metric, program) as ev:
            race = await ev.race(artifacts, rows(600), labels=["a", "b", "c"])
            done = ev.statistics().examples
        assert race.winners == [1] and race.candidates[1].label == "b"
        assert race.spend.evaluations == done
        assert race.spend.cached == 0
        assert race.spend.cost_usd == 0.0 and race.spend.model_calls == 0
        assert set(race.example_ids) <= {f"e{i}" for i in range(600)}

    async def test_the_cache_serves_a_second_race(self, tmp_path: Path) -> None:
        """With the cache on, the same race again evaluates nothing: every result is a
        cached one, and the outcome is the same."""
        program, metric = write(tmp_path, "p.py", PROGRAM), write(tmp_path, "m.py", METRIC)
        artifacts = [{"name": n, "rate": r} for n, r in (("a", 0.3), ("b", 0.8))]
        async with Evaluator(metric, program, cache=True) as ev:
            first = await ev.race(artifacts, rows(300))
            second = await ev.race(artifacts, rows(300))
        assert first.spend.evaluations > 0 and first.spend.cached == 0
        assert second.spend.evaluations == 0
        assert second.spend.cached == first.spend.evaluations
        assert second.winners == first.winners and second.scores == first.scores

    async def test_failure_score_outside_the_range_is_refused(self, tmp_path: Path) -> None:
        """An error's score must lie in score_range too: said before anything runs."""
        metric = write(tmp_path, "m.py", METRIC)
        async with Evaluator(metric, failure_score=-1.0) as ev:
            with pytest.raises(ConfigError, match="failure_score") as info:
                await ev.race(["a", "b"], rows(10))
        assert info.value.option == "score_range"

    async def test_cancelling_a_race_leaves_nothing_in_flight(self, tmp_path: Path) -> None:
        """A race cancelled while both candidates' calls wait: it stops, nothing is left
        in flight, and the Evaluator still serves a call (hang guard: 60 s)."""
        program = write(
            tmp_path,
            "p.py",
            """
            import asyncio

            async def run(artifact, input):
                if artifact == "hang":
                    await asyncio.sleep(3600)
                return True
            """,
        )
        metric = write(tmp_path, "m.py", METRIC)
        async with Evaluator(metric, program) as ev:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ev.race, ["hang", "hang"], rows(50))
                    await anyio.wait_all_tasks_blocked()
                    assert ev.statistics().in_flight == 2 * 16  # the first round, both
                    tg.cancel_scope.cancel()
            assert ev.statistics().in_flight == 0
            results = await ev.evaluate_many("ok", rows(3))
        assert [r.score for r in results] == [1.0, 1.0, 1.0]


#: A judge on the simulator: one priced model call per evaluation; the score is the
#: program's verdict, so equal candidates stay equal.
JUDGED = """
from skynet import allm

async def score(input, output, expected=None):
    text = await allm("Judge this answer.", input=str(output), max_tokens=50)
    return (1.0 if output else 0.0), {"feedback": text}
"""
#: USD per million tokens: a judge call costs about $0.00006, its worst case $0.0007.
PRICE = 3.0
#: Two candidates with the same verdicts (the same name in the program's draw): never
#: told apart, so only the budget ends their race.
TWINS = [{"name": "a", "rate": 0.5}, {"name": "a", "rate": 0.5, "copy": 1}]


@pytest.fixture
async def sim() -> Any:
    from llm_client import Simulator, SimulatorConfig

    async with Simulator(SimulatorConfig(latency_ms=2, jitter_ms=3)) as simulator:
        yield simulator


def judged(sim: Any) -> Any:
    from evaluator import Models
    from llm_client import ModelConfig

    config = ModelConfig(
        model="sim-judge",
        base_url=sim.base_url,
        api_key_env=None,
        price_input=PRICE,
        price_output=PRICE,
    )
    return Models(metric=config)


def billed(sim: Any) -> float:
    """What the simulator served at the model's price (the independent side)."""
    stats = sim.statistics()
    return float((stats.prompt_tokens + stats.completion_tokens) * PRICE / 1e6)


class TestRaceUnderABudget:
    async def test_a_calls_budget_stops_the_race_with_the_standing(
        self, tmp_path: Path, sim: Any
    ) -> None:
        """Budget(calls=40) over two candidates that cannot be told apart: rounds of 16,
        +2, +2 examples use the 40 calls; the next round's 4 cells are budget_exhausted,
        in no mean; the outcome is "budget" with the reason and what was spent."""
        program, metric = write(tmp_path, "p.py", PROGRAM), write(tmp_path, "m.py", JUDGED)
        async with Evaluator(metric, program, models=judged(sim), concurrency=64) as ev:
            race = await ev.race(TWINS, rows(300), budget=Budget(calls=40))
        assert sim.statistics().requests == 40
        assert race.outcome == "budget" and race.tied and sorted(race.winners) == [0, 1]
        assert "budget ran out after 22 examples" in race.reason
        assert "40 calls are spent" in race.reason
        assert race.budget is not None and race.budget.calls == 40
        assert race.budget.calls_made == 40 and race.budget.exhausted is not None
        assert race.spend.evaluations == 40 and race.spend.model_calls == 40
        assert race.spend.exhausted == 4
        assert race.spend.full_model_calls == 600  # one call per evaluation, everything
        for c in race.candidates:
            assert c.examples == 20 and c.exhausted == 2 and c.errors == 0
            row = race.scores[c.index]
            assert [row[col] for col in race.exhausted[c.index]] == [None, None]
            assert c.mean == np.mean([v for v in row if v is not None])
        assert len(race.example_ids) == 22
        assert race.exhausted == [[20, 21], [20, 21]]

    async def test_a_dollar_budget_is_never_overrun(self, tmp_path: Path, sim: Any) -> None:
        """Budget(usd=0.003) with 64 calls in flight: what the simulator billed, what the
        ledger spent and what the race says it spent agree, all at most the budget."""
        program, metric = write(tmp_path, "p.py", PROGRAM), write(tmp_path, "m.py", JUDGED)
        async with Evaluator(metric, program, models=judged(sim), concurrency=64) as ev:
            race = await ev.race(TWINS, rows(300), budget=Budget(usd=0.003))
        assert race.outcome == "budget" and race.budget is not None
        assert race.spend.cost_usd is not None
        assert billed(sim) <= 0.003 and race.budget.spent_usd <= 0.003
        assert race.spend.cost_usd == pytest.approx(race.budget.spent_usd)
        assert race.spend.cost_usd == pytest.approx(billed(sim))
        assert race.spend.model_calls == sim.statistics().requests
        assert race.spend.full_cost_usd is not None
        assert race.spend.full_cost_usd > race.spend.cost_usd
        assert "of $0.003" in race.reason

    async def test_cached_results_cost_nothing_under_a_budget(
        self, tmp_path: Path, sim: Any
    ) -> None:
        """A race filled the cache; the same race under a budget of no calls at all is
        served from it as far as the first went, sends nothing, then stops on the budget."""
        program, metric = write(tmp_path, "p.py", PROGRAM), write(tmp_path, "m.py", JUDGED)
        async with Evaluator(metric, program, models=judged(sim), cache=True) as ev:
            first = await ev.race(TWINS, rows(300), budget=Budget(calls=40))
            sent = sim.statistics().requests
            second = await ev.race(TWINS, rows(300), budget=Budget(calls=0))
        assert sim.statistics().requests == sent == 40
        assert second.outcome == "budget"
        assert second.spend.cached == first.spend.evaluations == 40
        assert second.spend.evaluations == 0 and second.spend.model_calls == 0
        assert second.spend.cost_usd == 0.0
        assert [c.examples for c in second.candidates] == [20, 20]

    async def test_the_evaluators_budget_stops_a_race_too(self, tmp_path: Path, sim: Any) -> None:
        """No race budget, but the Evaluator's: the race stops on it all the same, its
        cut cells budget_exhausted, and reports against the Evaluator's ledger."""
        program, metric = write(tmp_path, "p.py", PROGRAM), write(tmp_path, "m.py", JUDGED)
        async with Evaluator(metric, program, models=judged(sim), budget=Budget(calls=36)) as ev:
            race = await ev.race(TWINS, rows(300))
        assert race.outcome == "budget" and race.spend.evaluations == 36
        assert race.budget is not None and race.budget.calls == 36
        assert race.spend.exhausted == 4


def test_the_command_line_imports_numpy_only_for_a_race() -> None:
    """numpy (0.1 s of every command's start) is imported where a race computes: loading
    the command line and the Evaluator leaves it out."""
    code = "import sys, evaluator._cli, evaluator._pipeline; print('numpy' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert done.stdout.strip() == "False", done.stdout + done.stderr
