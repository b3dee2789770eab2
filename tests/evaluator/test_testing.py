"""``skynet.testing``: a metric's ``score`` run as the engine runs it, outside a run, with
scripted model replies or the simulator, and a given observation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evaluator import Models, Observation
from llm_client import ModelConfig, ModelSettings, Simulator, SimulatorConfig
from skynet.testing import ScriptError, ascore_example, score_example

ROOT = Path(__file__).resolve().parents[2]
JUDGE = ROOT / "examples" / "judges" / "metric.py"
QUESTION = {"question": "What is the capital of France?"}


def write(tmp_path: Path, source: str, name: str = "metric.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


class TestScoreExample:
    def test_a_scripted_pass_and_fail(self) -> None:
        """The shipped judge metric scores 1 on a scripted PASS and 0 on a FAIL, with the
        reply as its feedback, as a run would record them."""
        passed = score_example(JUDGE, "Paris", input=QUESTION, replies=["PASS. It is Paris."])
        failed = score_example(JUDGE, "Lyon", input=QUESTION, replies=["FAIL. It is Paris."])
        assert (passed.score, passed.feedback, passed.ok) == (1.0, "PASS. It is Paris.", True)
        assert (failed.score, failed.feedback) == (0.0, "FAIL. It is Paris.")

    def test_scripted_replies_are_counted_and_unpriced(self) -> None:
        """The judge usage counts the scripted calls; their cost is unmeasured with a
        reason, never 0."""
        result = score_example(JUDGE, "Paris", input=QUESTION, replies="PASS.")
        assert result.judge.llm_calls == 1
        assert result.judge.cost_usd is None
        assert any("scripted" in note for note in result.judge.notes)

    def test_replies_by_prompt_and_by_function(self, tmp_path: Path) -> None:
        """A dict answers by a piece of the prompt; a function gets (instruction, input)."""
        metric = write(
            tmp_path,
            """
            from skynet import llm

            def score(input, output, expected=None):
                a = llm("Is it polite?", input=output)
                b = llm("Is it short?", input=output)
                return float(a == "yes") + float(b == "yes") / 2, {"feedback": a + b}
            """,
        )
        by_prompt = score_example(metric, "hi", replies={"polite": "yes", "short": "no"})
        assert by_prompt.score == 1.0
        seen: list[tuple[str, str | None]] = []

        def answer(instruction: str, input: str | None) -> str:
            seen.append((instruction, input))
            return "yes"

        assert score_example(metric, "hi", replies=answer).score == 1.5
        assert seen == [("Is it polite?", "hi"), ("Is it short?", "hi")]

    def test_too_few_replies_is_the_tests_mistake(self) -> None:
        """A call with no scripted reply raises ScriptError after the call: it is never
        recorded as the metric's own error."""
        with pytest.raises(ScriptError, match="model call 1 but `replies` has 0"):
            score_example(JUDGE, "Paris", input=QUESTION, replies=[])

    def test_no_reply_for_a_prompt(self) -> None:
        """A dict with no piece of the prompt names the pieces it has."""
        with pytest.raises(ScriptError, match="none of \\['nothing'\\]"):
            score_example(JUDGE, "Paris", input=QUESTION, replies={"nothing": "PASS"})

    def test_reward_reads_the_given_observation(self, tmp_path: Path) -> None:
        """``skynet.reward`` blends the observation given: its time and cost are measured;
        without one, as in a score-only run, speed and cost score 0 and say why."""
        metric = write(
            tmp_path,
            """
            from skynet import reward

            REWARD_SPEC = {"weights": {"accuracy": 0.5, "speed": 0.25, "cost": 0.25},
                           "accuracy": {}, "speed": {"reference": 1000}, "cost": {"reference": 0.01}}

            def score(input, output, expected=None):
                return reward(REWARD_SPEC, float(output == expected), "checked")
            """,
        )
        fast = score_example(
            metric, "a", expected="a", observation={"duration_ms": 10.0, "cost_usd": 0.0001}
        )
        assert fast.scores["accuracy"] == 1.0
        assert fast.scores["speed"] > 0.9 and fast.scores["cost"] > 0.9
        unmeasured = score_example(metric, "a", expected="a")
        assert unmeasured.scores["speed"] == 0.0 and unmeasured.scores["cost"] == 0.0
        assert "score-only run" in unmeasured.feedback
        obs = Observation(duration_ms=1000.0, cost_usd=0.01)  # both at the reference: 0.5
        assert score_example(metric, "a", expected="a", observation=obs).score == 0.75

    def test_a_broken_contract_is_the_results_error(self, tmp_path: Path) -> None:
        """A metric that breaks the contract gets the error kind a run records, and scores
        ``failure_score``."""
        metric = write(tmp_path, "def score(input, output, expected=None):\n    return 'good'\n")
        result = score_example(metric, "x", failure_score=-1.0)
        assert result.error is not None and result.error.kind == "invalid_return"
        assert result.score == -1.0
        raising = write(tmp_path, "def score(input, output):\n    raise KeyError('a')\n", "b.py")
        error = score_example(raising, "x").error
        assert error is not None and error.kind == "metric_error"

    def test_a_bad_observation(self) -> None:
        """An observation that is not one names the parameter and its fields."""
        with pytest.raises(TypeError, match="`observation` must be"):
            score_example(JUDGE, "Paris", replies="PASS", observation={"duration_ms": "fast"})

    async def test_in_a_running_loop(self) -> None:
        """From async code the sync form says to await the async one, which works."""
        with pytest.raises(RuntimeError, match="ascore_example"):
            score_example(JUDGE, "Paris", input=QUESTION, replies="PASS")
        result = await ascore_example(JUDGE, "Paris", input=QUESTION, replies="PASS")
        assert result.score == 1.0

    async def test_an_async_metric(self, tmp_path: Path) -> None:
        """An ``async def`` metric's ``allm`` calls get the scripted replies too."""
        metric = write(
            tmp_path,
            """
            from skynet import allm

            async def score(input, output, expected=None):
                return float(await allm("PASS or FAIL?", input=output) == "PASS"), {"feedback": "ok"}
            """,
        )
        assert (await ascore_example(metric, "x", replies=["PASS"])).score == 1.0

    async def test_on_the_simulator(self) -> None:
        """With ``models`` the calls go to the model over HTTP, metered as in a run: the
        judge usage has the tokens and the price-given cost."""
        sim = SimulatorConfig(seed=1, models={"judge": ModelSettings(noise=0.0)})
        async with Simulator(sim) as server:
            config = ModelConfig(
                model="judge",
                base_url=server.base_url,
                api_key_env=None,
                price_input=1.0,
                price_output=1.0,
            )
            result = await ascore_example(
                JUDGE, "Paris", input=QUESTION, models=Models(metric=config)
            )
        assert result.ok and result.feedback.startswith(("PASS", "FAIL"))
        assert result.judge.llm_calls == 1
        assert result.judge.input_tokens > 0
        assert result.judge.cost_usd is not None and result.judge.cost_usd > 0

    def test_a_judge_without_replies_or_models(self) -> None:
        """A metric that calls skynet.llm() with neither replies nor models is refused
        before it runs, naming both parameters."""
        with pytest.raises(TypeError, match=r"calls skynet\.llm\(\): give `replies`"):
            score_example(JUDGE, "Paris", input=QUESTION)

    def test_replies_and_models_together(self) -> None:
        """Scripted replies and real models at once is refused, naming both."""
        with pytest.raises(TypeError, match=r"`replies`.*`models`"):
            score_example(JUDGE, "Paris", replies="PASS", models=Models())


class TestTheGuide:
    def test_the_guides_tests_pass(self) -> None:
        """The pytest tests docs/guide/testing.md shows run and pass, as written, from the
        repository's root (its metric path is relative to it)."""
        import re

        text = (ROOT / "docs" / "guide" / "testing.md").read_text(encoding="utf-8")
        (block,) = re.findall(r"^```python\n(.*?)^```$", text, flags=re.M | re.S)
        namespace: dict[str, object] = {}
        exec(compile(block, "docs/guide/testing.md", "exec"), namespace)
        tests = [f for name, f in namespace.items() if name.startswith("test_")]
        assert len(tests) == 3
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(ROOT)
            for test in tests:
                test()  # type: ignore[operator]
