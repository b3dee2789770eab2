"""The user's ``score`` as a DSPy metric: real dspy, DummyLM, no network."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from evaluator import ContractError, InvalidReturn, load_metric
from evaluator.dspy import DSPyMetric, to_dspy_metric

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


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def exact_match(tmp_path: Path) -> Path:
    return _write(tmp_path, "metric.py", EXACT_MATCH)


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
        path = _write(
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
        seen: list[tuple[Any, ...]] = []

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
        path = _write(
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
        path = _write(
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
        path = _write(
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
        path = _write(
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
