"""``expected`` never reaches an optimizer's reflection, whatever its value and whatever
user code does with its arguments.

Real parts: the engine (thread and inline executors, where user code shares the engine's
memory), the GEPA adapter, dspy's own Example and Prediction.

The strongest form of the promise is tested: *non-interference*. Scoring the same
failing metric with two different expected values must hand GEPA exactly the same
batch and records, so no value (one letter, a digit, anything) can be read from them,
however the metric's error quotes it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator._data._dataset import Example
from evaluator._pipeline import Evaluator
from evaluator.gepa import EvaluatorAdapter

# Every mode fails whatever the label is (labels never contain "a" and never equal
# "never"), and each failure is one where Python or the engine quotes the label.
LEAKY = """
import sys

def score(input, output, expected=None):
    label = expected["label"]
    mode = input["mode"]
    if mode == "convert":
        return float(label + "?"), {"feedback": "converted"}
    if mode == "return":
        return label, {"feedback": "returned a str"}
    if mode == "key":
        return {"a": 1}[label], {"feedback": "looked up"}
    if mode == "named":
        return 1.0, {"feedback": "named", "scores": {"x": label}}
    if mode == "feedback":
        return 1.0, {"feedback": [label]}
    if mode == "raise":
        raise ValueError(f"the label was {label}")
    if mode == "assert":
        assert label == "never", label
    if mode == "exit":
        sys.exit(label)
    return 0.0, {"feedback": "Wrong label."}
"""
MODES = ["convert", "return", "key", "named", "feedback", "raise", "assert", "exit", "ok"]
KINDS: list[str | None] = [
    "metric_error",
    "invalid_return",
    "metric_error",
    "invalid_return",
    "invalid_return",
]
KINDS += ["metric_error", "metric_error", "metric_error", None]

GUESS = """
def run(artifact, input):
    return "guess"
"""

# Reports in its feedback what it received; writes into its arguments when asked.
MUTATING_METRIC = """
def score(input, output, expected=None):
    received = f"keys={sorted(input)} label={expected['label']} output={output!r}"
    good = expected["label"] == "B"
    mode = input["mode"]
    if mode == "input":
        input["leak"] = expected["label"]
    elif mode == "expected":
        expected["label"] = "corrupted"
    elif mode == "output":
        output.append(expected["label"])
    return (1.0 if good else 0.0), {"feedback": received}
"""

# Returns the input keys it saw (so a later call shows what an earlier one left behind).
MUTATING_PROGRAM = """
def run(artifact, input):
    seen = sorted(input)
    if input["mode"] == "program":
        input["tampered"] = True
    return ["out", seen]
"""

_settings = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# Short values are the hard case for masking: letters A-D, digits, 1-3 characters.
_labels = st.text(alphabet="ABCD0123456789XYZbc", min_size=1, max_size=3)


def _files(folder: Path, metric: str, program: str) -> tuple[str, str]:
    (folder / "metric.py").write_text(textwrap.dedent(metric))
    (folder / "program.py").write_text(textwrap.dedent(program))
    return str(folder / "metric.py"), str(folder / "program.py")


def _rows(label: str, modes: list[str] = MODES) -> list[dict[str, Any]]:
    return [
        {"id": f"e{i}", "input": {"mode": mode, "i": i}, "expected": {"label": label}}
        for i, mode in enumerate(modes)
    ]


def _everything(adapter: EvaluatorAdapter, rows: list[dict[str, Any]]) -> Any:
    """All GEPA gets from one evaluation with traces, and one reflective dataset."""
    batch = adapter.evaluate(rows, {"prompt": "p"}, capture_traces=True)
    records = adapter.make_reflective_dataset({"prompt": "p"}, batch, ["prompt"])
    return batch.outputs, batch.scores, batch.objective_scores, batch.trajectories, records


class TestNonInterference:
    @pytest.mark.parametrize("execution", ["thread", "inline"])
    def test_two_expected_values_give_identical_reflection(
        self, tmp_path: Path, execution: str
    ) -> None:
        """For any two short expected values, everything GEPA receives is identical: the
        errors quote the value (the engine's own messages differ), the reflection does not."""
        metric, program = _files(tmp_path, LEAKY, GUESS)
        with EvaluatorAdapter.open(
            metric=metric,
            program=program,
            execution=execution,
            program_execution="thread",
            timeout=10,
        ) as adapter:

            @_settings
            @given(first=_labels, second=_labels)
            def check(first: str, second: str) -> None:
                one = _everything(adapter, _rows(first))
                two = _everything(adapter, _rows(second))
                assert one == two
                trajectories = one[3]
                assert [t["error"] for t in trajectories] == KINDS  # the failures happened
                calls.append(first)

            calls: list[str] = []
            check()
            assert len(calls) >= 20

    async def test_the_engine_messages_do_quote_the_value(self, tmp_path: Path) -> None:
        """The check above is not vacuous: the results themselves quote the label."""
        metric, program = _files(tmp_path, LEAKY, GUESS)
        async with Evaluator(
            metric, program, execution="thread", program_execution="inline", timeout=10
        ) as ev:
            results = await ev.evaluate_many("p", _rows("B7"))
        quoted = [r for r in results if r.error is not None and "B7" in r.error.message]
        assert len(quoted) >= 6


def _labels_of(rows: list[dict[str, Any]]) -> list[Any]:
    return [r["expected"]["label"] for r in rows]


class TestArgumentsAreCopies:
    @pytest.fixture
    def adapter_files(self, tmp_path: Path) -> tuple[str, str]:
        return _files(tmp_path, MUTATING_METRIC, MUTATING_PROGRAM)

    @pytest.mark.parametrize("execution", ["thread", "inline"])
    async def test_metric_writing_input_or_expected_changes_nothing_gepa_holds(
        self, adapter_files: tuple[str, str], execution: str
    ) -> None:
        """A metric that writes into input and expected changes neither GEPA's rows, nor
        the inputs the reflection is shown, nor what the next candidate's program and
        metric receive, nor a second draw of the same row in one minibatch."""
        metric, program = adapter_files
        rows = _rows("B", ["input", "expected"])
        rows.append(rows[1])  # GEPA may draw one row twice into a minibatch
        async with Evaluator(
            metric, program, execution=execution, program_execution="thread", timeout=10
        ) as ev:
            adapter = EvaluatorAdapter(ev)
            first = await anyio.to_thread.run_sync(lambda: _everything(adapter, rows))
            second = await anyio.to_thread.run_sync(lambda: _everything(adapter, rows))
        assert rows[0]["input"] == {"mode": "input", "i": 0} and _labels_of(rows) == ["B"] * 3
        for outputs, scores, _, trajectories, records in (first, second):
            assert scores == [1.0, 1.0, 1.0]  # every call saw the label "B"
            assert [o[1] for o in outputs] == [["i", "mode"]] * 3  # no "leak" from before
            assert [t["input"] for t in trajectories] == [r["input"] for r in rows]
            assert all("leak" not in r["Inputs"] for r in records["prompt"])

    @pytest.mark.parametrize("execution", ["thread", "inline"])
    async def test_metric_writing_its_output_does_not_change_generated_outputs(
        self, adapter_files: tuple[str, str], execution: str
    ) -> None:
        """A metric that appends the label to its output list does not put it into the
        output GEPA records and shows the reflection."""
        metric, program = adapter_files
        async with Evaluator(
            metric, program, execution=execution, program_execution="thread", timeout=10
        ) as ev:
            adapter = EvaluatorAdapter(ev)
            outputs, _, _, trajectories, records = await anyio.to_thread.run_sync(
                lambda: _everything(adapter, _rows("B", ["output"]))
            )
        assert outputs == [["out", ["i", "mode"]]]
        assert trajectories[0]["output"] == ["out", ["i", "mode"]]
        assert records["prompt"][0]["Generated Outputs"] == ["out", ["i", "mode"]]

    @pytest.mark.parametrize("execution", ["thread", "inline"])
    async def test_program_writing_its_input_is_not_seen_by_the_metric(
        self, adapter_files: tuple[str, str], execution: str
    ) -> None:
        """What the program writes into its input never reaches the metric's input."""
        metric, program = adapter_files
        async with Evaluator(
            metric, program, execution=execution, program_execution=execution, timeout=10
        ) as ev:
            (result,) = await ev.evaluate_many("p", _rows("B", ["program"]))
        assert result.feedback.startswith("keys=['i', 'mode'] ")

    @pytest.mark.parametrize("execution", ["thread", "inline"])
    async def test_evaluate_many_leaves_the_callers_examples_alone(
        self, adapter_files: tuple[str, str], execution: str
    ) -> None:
        """Scoring the same Example objects twice (an optimizer's loop): a metric that
        writes into input and expected changes neither the caller's examples nor the
        second evaluation."""
        metric, program = adapter_files
        examples = [
            Example(id=m, input={"mode": m}, expected={"label": "B"}) for m in ("input", "expected")
        ]
        async with Evaluator(
            metric, program, execution=execution, program_execution="thread", timeout=10
        ) as ev:
            first = await ev.evaluate_many("p", examples)
            second = await ev.evaluate_many("p", examples)
        assert [e.input for e in examples] == [{"mode": "input"}, {"mode": "expected"}]
        assert [e.expected for e in examples] == [{"label": "B"}, {"label": "B"}]
        assert [r.score for r in first + second] == [1.0] * 4

    async def test_process_mode_already_isolates(self, adapter_files: tuple[str, str]) -> None:
        """In worker processes arguments are pickled: the caller's examples stay whole."""
        metric, program = adapter_files
        examples = [Example(id="x", input={"mode": "expected"}, expected={"label": "B"})]
        async with Evaluator(
            metric, program, execution="process", program_execution="process", timeout=30
        ) as ev:
            results = await ev.evaluate_many("p", examples)
            results += await ev.evaluate_many("p", examples)
        assert examples[0].expected == {"label": "B"}
        assert [r.score for r in results] == [1.0, 1.0]


class TestDSPy:
    @pytest.fixture
    def metric(self, tmp_path: Path) -> Any:
        from evaluator.dspy import to_dspy_metric

        path = tmp_path / "metric.py"
        path.write_text(
            textwrap.dedent(
                """
                def score(input, output, expected=None):
                    input["q"].append(expected["label"][0])
                    expected["label"].append("corrupted")
                    output["answer"].append(expected["label"][0])
                    return (1.0 if len(expected["label"]) == 2 else 0.0), {"feedback": "ok"}
                """
            )
        )
        return to_dspy_metric(path)

    @pytest.mark.parametrize("form", [2, 3, 5])
    def test_metric_writing_its_arguments_changes_no_example_or_prediction(
        self, metric: Any, form: int
    ) -> None:
        """Through every DSPy calling form, a metric that writes into its arguments leaves
        dspy's Example (reused for every candidate, and the trace's inputs) and Prediction
        (the trace's outputs, shown to dspy.GEPA's reflection) as they were."""
        import dspy

        gold = dspy.Example(q=["question"], label=["A"]).with_inputs("q")
        pred = dspy.Prediction(answer=["x"])
        args: tuple[Any, ...] = (gold, pred, None, "p", [])[:form]
        scores = [metric(*args), metric(*args)]
        assert gold.q == ["question"] and gold.label == ["A"] and pred.answer == ["x"]
        values = [s.score if form == 5 else s for s in scores]
        assert values == [1.0, 1.0]
