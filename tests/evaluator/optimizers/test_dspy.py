"""The user's ``score`` as a DSPy metric: real dspy, DummyLM, the simulator over real HTTP."""

from __future__ import annotations

import copy
import gc
import inspect
import logging
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from evaluator import ConfigError, ContractError, InvalidReturn, Models, load_metric
from evaluator.dspy import DSPyMetric, EngineClosedError, NoModelError, to_dspy_metric
from llm_client import LLMError, ModelConfig, Simulator, SimulatorConfig
from tests._helpers import write

# The exact-match metric of the product page, verbatim.
EXACT_MATCH = """
def score(input, output, expected=None):
    want = expected["label"]
    if output == want:
        return 1.0, {"feedback": "Correct."}
    return 0.0, {"feedback": f"Expected {want!r}, got {output!r}."}
"""

# (message, expected label, what the DummyLM answers)
ROWS = [
    ("Card charged twice", "billing", "billing"),
    ("App crashes on start", "bug", "other"),
    ("How do I export data?", "howto", "howto"),
    ("Refund my last invoice", "billing", "other"),
    ("Error 500 on the dashboard", "bug", "bug"),
]


@pytest.fixture
def exact_match(tmp_path: Path) -> Path:
    return write(tmp_path, "metric.py", EXACT_MATCH)


@pytest.fixture
def devset() -> list[Any]:
    return [dspy.Example(message=m, label=want).with_inputs("message") for m, want, _ in ROWS]


@pytest.fixture
def lm() -> DummyLM:
    # Keyed by the message, so answers do not depend on thread order or demos.
    return DummyLM({m: {"label": answer} for m, _, answer in ROWS})


def _pred(**fields: Any) -> Any:
    return dspy.Prediction(**fields)


class TestImport:
    def test_importing_evaluator_imports_neither_dspy_nor_gepa(self) -> None:
        """`import evaluator` (and its dspy/gepa submodules) leaves dspy and gepa unimported."""
        code = (
            "import sys, evaluator, evaluator.dspy, evaluator.gepa\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dspy', 'gepa'))\n"
            "print(bad)\n"
            "sys.exit(1 if bad else 0)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


class TestToDspyMetric:
    def test_two_and_three_argument_calls_return_a_float(self, exact_match: Path) -> None:
        """Evaluate's and bootstrapping's calls get the score as a plain float."""
        metric = to_dspy_metric(exact_match, output_field="label")
        gold = dspy.Example(message="m", label="bug").with_inputs("message")
        args: tuple[Any, ...]
        for args in ((gold, _pred(label="bug")), (gold, _pred(label="bug"), [])):
            value = metric(*args)
            assert type(value) is float
            assert value == 1.0
        wrong = metric(gold, _pred(label="other"), None)
        assert type(wrong) is float
        assert wrong == 0.0
        assert not wrong  # bootstrapping keeps a demo when the value is truthy

    def test_feedback_call_returns_a_prediction(self, tmp_path: Path) -> None:
        """dspy.GEPA's five-argument call gets score, feedback and the named scores."""
        path = write(
            tmp_path,
            "m.py",
            """
            def score(input, output, expected=None):
                ok = output["label"] == expected["label"]
                return (0.5 if ok else 0.0), {
                    "feedback": f"label {output['label']!r}",
                    "scores": {"label": 1.0 if ok else 0.0, "format": 1.0},
                }
            """,
        )
        metric = to_dspy_metric(path)
        gold = dspy.Example(message="m", label="bug").with_inputs("message")
        pred = _pred(label="bug")
        out = metric(gold, pred, None, "self", [])
        assert isinstance(out, dspy.Prediction)
        assert out.score == 0.5
        assert out.feedback == "label 'bug'"
        assert out.objective_scores == {"label": 1.0, "format": 1.0}
        by_keyword = metric(gold, pred, trace=None, pred_name="self")
        assert isinstance(by_keyword, dspy.Prediction)
        assert by_keyword.score == 0.5

    def test_signature_binds_every_dspy_form(self, exact_match: Path) -> None:
        """The metric's signature binds 2, 3 and 5 positional arguments (dspy.GEPA checks 5)."""
        sig = inspect.signature(to_dspy_metric(exact_match))
        for n in (2, 3, 5):
            sig.bind(*([None] * n))
        with pytest.raises(TypeError):
            sig.bind(None)

    def test_inputs_labels_and_output_fields_are_mapped(self, tmp_path: Path) -> None:
        """input = example.inputs(), expected = example.labels(), output = prediction fields."""
        seen: list[Any] = []  # each call's (input, output, expected)

        def score(input: Any, output: Any, expected: Any = None) -> Any:
            seen.append((input, output, expected))
            return 1.0, {"feedback": "ok"}

        metric = to_dspy_metric(score)
        gold = dspy.Example(question="q?", context="c", answer="a", kind="k").with_inputs(
            "question", "context"
        )
        metric(gold, _pred(answer="a", rationale="r"))
        assert seen[-1] == (
            {"question": "q?", "context": "c"},
            {"answer": "a", "rationale": "r"},
            {"answer": "a", "kind": "k"},
        )
        to_dspy_metric(score, output_field="answer")(gold, _pred(answer="a", rationale="r"))
        assert seen[-1][1] == "a"

    def test_expected_is_none_without_labels(self) -> None:
        """An example with only input fields gives expected=None."""
        seen: list[Any] = []

        def score(input: Any, output: Any, expected: Any = None) -> Any:
            seen.append(expected)
            return 0.0, {"feedback": ""}

        to_dspy_metric(score)(dspy.Example(q="x").with_inputs("q"), _pred(a="y"))
        assert seen == [None]

    def test_two_parameter_metric_gets_two_arguments(self) -> None:
        """A `score(input, output)` is called without expected, as the contract says."""
        seen: list[tuple[Any, ...]] = []

        def score(*args: Any) -> Any:
            seen.append(args)
            return 1.0, {"feedback": "ok"}

        def score2(input: Any, output: Any) -> Any:
            return score(input, output)

        to_dspy_metric(score2)(dspy.Example(q="x", a="y").with_inputs("q"), _pred(a="y"))
        assert seen == [({"q": "x"}, {"a": "y"})]

    def test_loaded_user_function_is_accepted(self, exact_match: Path) -> None:
        """A UserFunction from load_metric works like its path."""
        metric = to_dspy_metric(load_metric(exact_match), output_field="label")
        gold = dspy.Example(message="m", label="bug").with_inputs("message")
        assert metric(gold, _pred(label="bug")) == 1.0

    def test_async_metric_runs_without_a_loop(self, tmp_path: Path) -> None:
        """An `async def score` is run to completion from DSPy's synchronous call."""
        path = write(
            tmp_path,
            "am.py",
            """
            import asyncio

            async def score(input, output, expected=None):
                await asyncio.sleep(0)
                return (1.0 if output == expected["label"] else 0.0), {"feedback": "async"}
            """,
        )
        metric = to_dspy_metric(path, output_field="label")
        gold = dspy.Example(message="m", label="bug").with_inputs("message")
        assert metric(gold, _pred(label="bug")) == 1.0
        assert metric(gold, _pred(label="bug"), None, "p", None).feedback == "async"

    async def test_async_metric_inside_a_running_loop(self, tmp_path: Path) -> None:
        """Called on a thread whose loop is running, an async metric still completes."""
        path = write(
            tmp_path,
            "am2.py",
            """
            import asyncio

            from skynet import observation

            async def score(input, output, expected=None):
                await asyncio.sleep(0)
                return 0.25, {"feedback": observation().notes[0]}
            """,
        )
        metric = to_dspy_metric(path)
        gold = dspy.Example(message="m", label="bug").with_inputs("message")
        assert metric(gold, _pred(label="x")) == 0.25
        # observation() works there too: the call's context travels with the coroutine.
        assert "not measured" in metric(gold, _pred(label="x"), None, "p", None).feedback

    def test_invalid_return_names_the_step_and_example(self, tmp_path: Path) -> None:
        """A bare number breaks the contract: InvalidReturn naming the step and the example."""
        path = write(
            tmp_path, "bad.py", "def score(input, output, expected=None):\n    return 0.8\n"
        )
        metric = to_dspy_metric(path)
        gold = dspy.Example(id="q7", message="m", label="bug").with_inputs("message")
        with pytest.raises(InvalidReturn) as info:
            metric(gold, _pred(label="bug"))
        assert info.value.step == "Metric return value"
        assert info.value.example_id == "q7"
        assert "'q7'" in str(info.value)
        assert "not a pair" in str(info.value)

    def test_missing_output_field_is_a_clear_error(self, exact_match: Path) -> None:
        """output_field naming no field of the prediction says which fields exist."""
        metric = to_dspy_metric(exact_match, output_field="answer")
        gold = dspy.Example(message="m", label="bug").with_inputs("message")
        with pytest.raises(ContractError, match=r"no field 'answer'.*'label'"):
            metric(gold, _pred(label="bug"))

    def test_example_without_inputs_is_a_clear_error(self, exact_match: Path) -> None:
        """An example never marked with with_inputs() says how to fix it."""
        metric = to_dspy_metric(exact_match)
        with pytest.raises(ContractError, match="with_inputs"):
            metric(dspy.Example(message="m", label="bug"), _pred(label="bug"))

    def test_bad_metric_argument(self) -> None:
        """Something that is neither a path nor a callable is refused up front."""
        with pytest.raises(TypeError, match="`metric` must be"):
            to_dspy_metric(42)  # type: ignore[arg-type]


class TestWithDspy:
    async def test_evaluate_gives_the_pipelines_scores(
        self, exact_match: Path, devset: list[Any], lm: DummyLM
    ) -> None:
        """dspy.Evaluate with the adapted metric scores each example as evaluate_many does."""
        from evaluator._pipeline import Evaluator

        metric = to_dspy_metric(exact_match, output_field="label")
        with dspy.context(lm=lm):
            result = dspy.Evaluate(
                devset=devset, metric=metric, num_threads=2, display_progress=False
            )(dspy.Predict("message -> label"))
        dspy_scores = [score for *_, score in result.results]
        # The same outputs scored by the engine (score-only: the rows carry the output).
        rows = [
            {"id": i, "input": {"message": m}, "expected": {"label": want}, "output": answer}
            for i, (m, want, answer) in enumerate(ROWS)
        ]
        async with Evaluator(metric=str(exact_match), program=None, execution="inline") as ev:
            ours = await ev.evaluate_many(None, rows)
        assert dspy_scores == [r.score for r in ours]
        assert sorted(set(dspy_scores)) == [0.0, 1.0]  # both outcomes are exercised
        assert result.score == pytest.approx(100 * sum(dspy_scores) / len(dspy_scores), abs=0.01)

    def test_bootstrapping_keeps_only_passing_demos(
        self, exact_match: Path, devset: list[Any], lm: DummyLM
    ) -> None:
        """BootstrapFewShot keeps a trace only when the score is nonzero (0.0 is falsy)."""
        metric = to_dspy_metric(exact_match, output_field="label")
        with dspy.context(lm=lm):
            optimizer = dspy.BootstrapFewShot(
                metric=metric, max_bootstrapped_demos=len(ROWS), max_labeled_demos=0
            )
            compiled = optimizer.compile(dspy.Predict("message -> label"), trainset=devset)
        demos = compiled.demos
        correct = {m for m, want, answer in ROWS if want == answer}
        assert {d["message"] for d in demos} == correct

    def test_gepa_calls_with_two_three_and_five_arguments(
        self, exact_match: Path, devset: list[Any], lm: DummyLM
    ) -> None:
        """dspy.GEPA's calls come with 2, 3 and 5 arguments; all succeed; feedback is reflected."""
        metric = to_dspy_metric(exact_match, output_field="label")
        ok: Counter[int] = Counter()

        def counting(*args: Any, **kwargs: Any) -> Any:
            value = metric(*args, **kwargs)
            ok[len(args) + len(kwargs)] += 1
            return value

        reflected: list[Any] = []

        def proposer(
            candidate: dict[str, str], reflective_dataset: Any, components_to_update: list[str]
        ) -> dict[str, str]:
            reflected.append(reflective_dataset)
            return {
                name: candidate[name] + " Answer with one label." for name in components_to_update
            }

        gepa = dspy.GEPA(
            metric=counting,
            max_metric_calls=16,
            instruction_proposer=proposer,
            reflection_minibatch_size=3,
            track_stats=False,
            num_threads=2,
        )
        with dspy.context(lm=lm):
            gepa.compile(dspy.Predict("message -> label"), trainset=devset)
        assert {2, 3, 5} <= set(ok), ok
        feedback = [
            record["Feedback"]
            for dataset in reflected
            for records in dataset.values()
            for record in records
        ]
        assert any(text.startswith("Expected ") for text in feedback), feedback
        assert isinstance(metric, DSPyMetric)


class TestRewardUnderDspy:
    def test_reward_scores_unmeasured_speed_and_cost_zero(self, tmp_path: Path) -> None:
        """reward() under DSPy gives speed and cost 0 and its feedback says why."""
        path = write(
            tmp_path,
            "rm.py",
            """
            from skynet import reward

            REWARD_SPEC = {
                "weights": {"accuracy": 0.5, "speed": 0.25, "cost": 0.25},
                "accuracy": {},
                "speed": {"reference": 2000},
                "cost": {"reference": 0.01},
            }

            def score(input, output, expected=None):
                return reward(REWARD_SPEC, 1.0, "Correct.")
            """,
        )
        metric = to_dspy_metric(path)
        gold = dspy.Example(message="m", label="bug").with_inputs("message")
        out = metric(gold, _pred(label="bug"), None, "self", None)
        assert out.score == pytest.approx(0.5)
        assert out.objective_scores == {"accuracy": 1.0, "speed": 0.0, "cost": 0.0}
        assert "time not measured: the program ran under DSPy" in out.feedback
        assert "cost not measured" in out.feedback


# -- the page's judge metric under DSPy: a model, one engine, real HTTP -------------------

JUDGE = Path(__file__).resolve().parents[3] / "examples" / "metrics" / "judge.py"
KEY = "sk-test-judge-0123456789"
QUESTIONS = [f"What is {i} + {i}?" for i in range(20)]


def _answer(i: int) -> str:
    # Every third answer is wrong; the simulator's verdicts are a stable hash either way.
    return str(2 * i if i % 3 else i + 1)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(SimulatorConfig(api_key=KEY)).running_in_thread() as simulator:
        yield simulator


@pytest.fixture
def questions() -> list[Any]:
    return [
        dspy.Example(id=f"q{i}", question=q, answer=str(2 * i)).with_inputs("question")
        for i, q in enumerate(QUESTIONS)
    ]


class Answer(dspy.Module):  # type: ignore[misc]
    """A program with no model: the answers are fixed, so only the judge varies."""

    def forward(self, question: str) -> Any:
        return dspy.Prediction(answer=_answer(QUESTIONS.index(question)))


def _judge_lm(sim: Simulator) -> Any:
    return dspy.LM("openai/gpt-4o-mini", api_base=sim.base_url, api_key=KEY, cache=False)


async def _engine_scores(
    sim: Simulator, outputs: list[str], monkeypatch: pytest.MonkeyPatch
) -> list[float]:
    """The same outputs scored by the engine: evaluate_many, score-only, same judge model."""
    from evaluator._pipeline import Evaluator

    monkeypatch.setenv("JUDGE_KEY", KEY)
    judge = ModelConfig(model="gpt-4o-mini", base_url=sim.base_url, api_key_env="JUDGE_KEY")
    rows = [
        {"id": f"q{i}", "input": {"question": q}, "expected": {"answer": str(2 * i)}, "output": o}
        for i, (q, o) in enumerate(zip(QUESTIONS, outputs, strict=True))
    ]
    async with Evaluator(metric=str(JUDGE), models=Models(metric=judge)) as ev:
        return [r.score for r in await ev.evaluate_many(None, rows)]


def _records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "evaluator.dspy"]


class TestJudgeUnderDspy:
    async def test_evaluate_16_threads_scores_as_evaluate_many(
        self, sim: Simulator, questions: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """dspy.Evaluate(num_threads=16) with the judge scores each example as evaluate_many does."""
        with to_dspy_metric(JUDGE, output_field="answer", lm=_judge_lm(sim), rpm=6000) as metric:
            result = dspy.Evaluate(
                devset=questions, metric=metric, num_threads=16, display_progress=False
            )(Answer())
            stats = metric.statistics()
        dspy_scores = [score for *_, score in result.results]
        ours = await _engine_scores(sim, [_answer(i) for i in range(len(QUESTIONS))], monkeypatch)
        assert dspy_scores == ours
        assert sorted(set(dspy_scores)) == [0.0, 1.0]  # both verdicts are exercised
        assert (stats.calls, stats.scored, stats.failures) == (20, 20, {})
        assert stats.judge.llm_calls == 20
        assert stats.judge.input_tokens > 0 and stats.judge.output_tokens > 0
        assert stats.judge.cost_usd is not None and stats.judge.cost_usd > 0
        assert stats.judge.rate_limited == 0
        assert stats.model == "gpt-4o-mini"

    def test_gepa_with_reflection_lm_as_the_judge(
        self, sim: Simulator, questions: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """dspy.GEPA's calls (2, 3 and 5 arguments) go to the reflection model handed over as
        the fallback; the seed's valset scores equal evaluate_many's; feedback is the verdict."""
        reflection = _judge_lm(sim)
        lm = DummyLM({q: {"answer": _answer(i)} for i, q in enumerate(QUESTIONS)})
        forms: Counter[int] = Counter()
        reflected: list[Any] = []

        def proposer(
            candidate: dict[str, str], reflective_dataset: Any, components_to_update: list[str]
        ) -> dict[str, str]:
            reflected.append(reflective_dataset)
            return {name: candidate[name] + " Be exact." for name in components_to_update}

        with to_dspy_metric(JUDGE, output_field="answer", reflection_lm=reflection) as metric:

            def counting(*args: Any, **kwargs: Any) -> Any:
                forms[len(args) + len(kwargs)] += 1
                return metric(*args, **kwargs)

            optimizer = dspy.GEPA(
                metric=counting,
                reflection_lm=reflection,
                instruction_proposer=proposer,
                max_metric_calls=60,
                reflection_minibatch_size=3,
                track_stats=True,
                num_threads=4,
            )
            with dspy.context(lm=lm):
                compiled = optimizer.compile(
                    dspy.Predict("question -> answer"), trainset=questions[:6], valset=questions
                )
            stats = metric.statistics()
        assert {2, 3, 5} <= set(forms), forms
        seed = compiled.detailed_results.val_subscores[0]
        gepa_scores = [seed[i] for i in range(len(QUESTIONS))]
        import asyncio

        ours = asyncio.run(
            _engine_scores(sim, [_answer(i) for i in range(len(QUESTIONS))], monkeypatch)
        )
        assert gepa_scores == ours
        feedback = [
            record["Feedback"]
            for dataset in reflected
            for records in dataset.values()
            for record in records
        ]
        assert feedback and all(text.startswith(("PASS", "FAIL")) for text in feedback), feedback
        assert stats.failures == {}
        # DSPy scores the same (example, prediction) again and again: the cache pays once.
        assert stats.judge.llm_calls + stats.cached == stats.calls == sum(forms.values())
        assert stats.cached > 0

    def test_simulator_option_serves_the_judge_without_a_key(self, questions: list[Any]) -> None:
        """simulator= serves the judge from a local simulator; no key is needed."""
        with to_dspy_metric(
            JUDGE, output_field="answer", lm="openai/gpt-4o-mini", simulator={"latency_ms": 1}
        ) as metric:
            scores = [metric(ex, Answer()(question=ex.question)) for ex in questions[:4]]
            stats = metric.statistics()
        assert all(s in (0.0, 1.0) for s in scores)
        assert stats.judge.llm_calls == 4

    def test_no_model_fails_each_call_and_logs_one_line(
        self, questions: list[Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        """Without a model every call raises NoModelError naming the arguments to pass; one
        log line in all; statistics count every failure."""
        metric = to_dspy_metric(JUDGE, output_field="answer")
        with caplog.at_level(logging.WARNING):
            result = dspy.Evaluate(
                devset=questions[:6], metric=metric, num_threads=4, display_progress=False
            )(Answer())
        assert result.score == 0.0
        lines = _records(caplog)
        assert len(lines) == 1, lines
        assert "no_model" in lines[0] and "lm=" in lines[0] and "reflection_lm=" in lines[0]
        stats = metric.statistics()
        assert (stats.calls, stats.scored, stats.failures) == (6, 0, {"no_model": 6})
        with pytest.raises(NoModelError) as info:
            metric(questions[0], dspy.Prediction(answer="0"))
        message = str(info.value)
        assert "judge.py" in message and "models=evaluator.Models(metric=...)" in message
        assert "dspy.configure(lm=...) sets the program's model" in message

    def test_failures_are_logged_once_per_kind(
        self, tmp_path: Path, sim: Simulator, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A contract break and an exception are each logged once, and counted by kind."""
        path = write(
            tmp_path,
            "flaky.py",
            """
            from skynet import llm

            def score(input, output, expected=None):
                verdict = llm("Answer PASS or FAIL.", input=str(output))
                if output == "bare":
                    return 1.0
                raise KeyError("missing")
            """,
        )
        gold = dspy.Example(id="q1", question="q").with_inputs("question")
        with (
            to_dspy_metric(path, output_field="answer", lm=_judge_lm(sim)) as metric,
            caplog.at_level(logging.WARNING),
        ):
            for answer in ("bare", "bare", "other", "other", "other"):
                with pytest.raises((InvalidReturn, KeyError)):
                    metric(gold, dspy.Prediction(answer=answer))
            stats = metric.statistics()
        lines = _records(caplog)
        assert len(lines) == 2, lines
        assert "invalid_return on example 'q1'" in lines[0]
        assert "metric_error on example 'q1'" in lines[1] and "KeyError" in lines[1]
        assert "(at flaky.py:8)" in lines[1]  # where in the user's file (line 1 is blank)
        assert stats.failures == {"invalid_return": 2, "metric_error": 3}
        assert stats.judge.llm_calls == 5  # the judge's calls are metered all the same

    def test_a_model_that_cannot_answer_is_an_llm_error(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A judge whose provider refuses every call: llm_error, logged once, no cost."""
        with (
            to_dspy_metric(
                JUDGE,
                output_field="answer",
                lm="openai/gpt-4o-mini",
                simulator={"insufficient_quota_rate": 1.0},
            ) as metric,
            caplog.at_level(logging.WARNING),
        ):
            gold = dspy.Example(question="q").with_inputs("question")
            for _ in range(3):
                with pytest.raises(LLMError):
                    metric(gold, dspy.Prediction(answer="a"))
            stats = metric.statistics()
        assert stats.failures == {"llm_error": 3}
        assert stats.judge.llm_calls == 0
        lines = _records(caplog)
        assert len(lines) == 1 and "llm_error" in lines[0] and "insufficient_quota" in lines[0]

    def test_a_missing_key_is_refused_before_any_call(self) -> None:
        """A dspy.LM without a key whose variable is unset: ConfigError at construction."""
        with pytest.raises(ConfigError, match=r"OPENAI_API_KEY is not set.*\(`lm`\)"):
            to_dspy_metric(JUDGE, lm=dspy.LM("openai/gpt-4o-mini"))

    def test_async_judge_metric_uses_the_engine(self, tmp_path: Path, sim: Simulator) -> None:
        """An async metric's `await allm(...)` reaches the same engine from its own loop."""
        path = write(
            tmp_path,
            "ajudge.py",
            """
            from skynet import allm

            async def score(input, output, expected=None):
                verdict = await allm("Answer PASS or FAIL.", input=f"Answer: {output}")
                return (1.0 if verdict.startswith("PASS") else 0.0), {"feedback": verdict}
            """,
        )
        with to_dspy_metric(path, output_field="answer", lm=_judge_lm(sim)) as metric:
            gold = dspy.Example(question="q").with_inputs("question")
            out = metric(gold, dspy.Prediction(answer="a"), None, "p", None)
            stats = metric.statistics()
        assert out.feedback.startswith(("PASS", "FAIL"))
        assert stats.judge.llm_calls == 1


class TestJudgeLifetime:
    def test_nothing_is_left_after_close(self, sim: Simulator) -> None:
        """After the with block: the engine's thread has ended and its loop is closed; the
        metric refuses further judge calls with a clear error."""
        with to_dspy_metric(JUDGE, output_field="answer", lm=_judge_lm(sim)) as metric:
            gold = dspy.Example(question="q").with_inputs("question")
            metric(gold, dspy.Prediction(answer="a"))
            engine = metric.engine
            assert engine is not None and engine.thread is not None
            assert engine.thread.is_alive()
        assert not engine.thread.is_alive()
        assert engine.loop is not None and engine.loop.is_closed()
        assert not any(t.name == engine.name for t in threading.enumerate())
        with pytest.raises(EngineClosedError, match="is closed"):
            metric(gold, dspy.Prediction(answer="a"))
        assert metric.statistics().failures == {"closed": 1}

    def test_a_collected_metric_closes_its_engine(self, sim: Simulator) -> None:
        """A metric dropped without close() stops its engine when it is garbage collected."""
        metric = to_dspy_metric(JUDGE, output_field="answer", lm=_judge_lm(sim))
        gold = dspy.Example(question="q").with_inputs("question")
        metric(gold, dspy.Prediction(answer="a"))
        engine = metric.engine
        assert engine is not None and engine.thread is not None
        del metric
        gc.collect()
        assert not engine.thread.is_alive()

    def test_copies_share_the_engine(self, sim: Simulator) -> None:
        """copy and deepcopy of the metric give the metric itself (an engine is not copied)."""
        with to_dspy_metric(JUDGE, lm=_judge_lm(sim)) as metric:
            assert copy.copy(metric) is metric
            assert copy.deepcopy({"m": metric})["m"] is metric

    def test_interpreter_exit_with_a_call_in_flight_is_prompt(self, tmp_path: Path) -> None:
        """A script that exits while a judge call waits on a slow model ends at once, cleanly:
        the engine is closed at exit and the waiting call fails with a clear error."""
        script = write(
            tmp_path,
            "exit.py",
            f"""
            import atexit, threading, time
            import dspy
            from evaluator.dspy import to_dspy_metric

            errors = []
            caller = None

            @atexit.register  # registered first, so it runs after the metric's own close
            def report():
                caller.join(30)
                print("call ended with", *[type(e).__name__ for e in errors], flush=True)

            metric = to_dspy_metric(
                {str(JUDGE)!r}, output_field="answer", lm="openai/gpt-4o-mini",
                simulator={{"latency_ms": 600_000}},
            )

            def call():
                gold = dspy.Example(question="q").with_inputs("question")
                try:
                    metric(gold, dspy.Prediction(answer="a"))
                except Exception as exc:
                    errors.append(exc)

            caller = threading.Thread(target=call, daemon=True)
            caller.start()
            deadline = time.monotonic() + 60
            while metric.engine.in_flight == 0:
                assert time.monotonic() < deadline, "the call never started"
                time.sleep(0.01)
            print("in flight", flush=True)
            """,
        )
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["in flight", "call ended with EngineClosedError"]
        assert "Traceback" not in done.stderr, done.stderr


class TestExample:
    def test_shipped_judge_example_prints_score_and_cost(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """examples/gepa/dspy_judge.py runs offline and prints the score and the judge's cost."""
        import importlib.util

        path = Path(__file__).resolve().parents[3] / "examples" / "gepa" / "dspy_judge.py"
        spec = importlib.util.spec_from_file_location("_skynet_dspy_judge_example", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.main([]) == 0
        printed = capsys.readouterr().out.splitlines()
        assert printed[0] == "score: 62.5% of 8 examples"
        assert printed[1].startswith("judge gpt-4o-mini: 8 calls, ")
        assert "cost $0.0001" in printed[1] and "0 rate limited" in printed[1]
        assert printed[2] == "metric failures: none"
