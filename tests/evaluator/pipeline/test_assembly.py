"""Result assembly as pure functions: calls from examples, results from outcomes."""

from __future__ import annotations

import gc

from evaluator._call._calls import Outcome, RunCall, ScoreCall
from evaluator._call._results import ErrorInfo, Observation, Scored
from evaluator._data._dataset import NO_OUTPUT, Example
from evaluator._models import Meter
from evaluator._pipeline import _assembly as assembly
from llm_client import TokenUsage


def _examples(n: int, **fields: object) -> list[Example]:
    return [
        Example(id=f"e{i}", input={"q": i}, expected={"label": "a"}, **fields) for i in range(n)
    ]


def _meter(calls: int, tokens: int) -> Meter:
    meter = Meter()
    meter.calls, meter.tokens, meter.cost_usd = calls, TokenUsage(input_tokens=tokens), 0.5
    return meter


class TestCalls:
    def test_run_calls_carry_the_artifact_and_fresh_tokens(self) -> None:
        """One run call per example, with tokens from ``base``, the artifact and its input."""
        calls = assembly.run_calls("v1", _examples(3), 10)
        assert calls == [
            RunCall(10, "e0", "v1", {"q": 0}),
            RunCall(11, "e1", "v1", {"q": 1}),
            RunCall(12, "e2", "v1", {"q": 2}),
        ]

    def test_score_only_calls_skip_examples_without_output(self) -> None:
        """A score-only run scores each example's own output, with the "not measured"
        observation; an example without an output gets no call."""
        examples = _examples(3, output="a")
        examples[1] = Example(id="e1", input={}, expected=None, output=NO_OUTPUT)
        calls = assembly.score_only_calls(examples, 0)
        assert [c.example_id for c in calls] == ["e0", "e2"]
        assert [c.token for c in calls] == [0, 2]
        assert all(c.observation is assembly.SCORE_ONLY for c in calls)
        assert calls[0].output == "a" and calls[0].expected == {"label": "a"}


class TestAfterProgram:
    def test_errors_are_results_and_outputs_become_score_calls(self) -> None:
        """A failed program call is that example's result (failure score, message as
        feedback, its observation); a successful one becomes a score call of its output,
        with the observation built from its time and its model usage."""
        examples = _examples(3)
        calls = assembly.run_calls("v1", examples, 0)
        error = ErrorInfo("program_error", "`run` raised KeyError")
        outcomes = [
            Outcome("out0", None, 1_000_000, 3_000_000),
            Outcome(None, error, 1_000_000, 2_000_000),
            Outcome("out2", None, 0, 0),  # its worker ended before it could report a time
        ]
        meters = {0: _meter(2, 40)}
        holes, score_calls, where = assembly.after_program(examples, calls, outcomes, meters, -1.0)
        assert holes[0] is None and holes[2] is None
        failed = holes[1]
        assert failed is not None and failed.error is error and failed.score == -1.0
        assert failed.feedback == error.message and failed.observation.duration_ms == 1.0
        assert where == [0, 2] and [c.output for c in score_calls] == ["out0", "out2"]
        first, last = score_calls[0].observation, score_calls[1].observation
        assert first is not None and (first.duration_ms, first.llm_calls) == (2.0, 2)
        assert first.input_tokens == 40 and meters == {}
        assert last is not None and last.duration_ms is None and last.notes


class TestScoredResults:
    def test_results_in_order_with_their_fields(self) -> None:
        """Each outcome becomes its result, in order: the Scored's fields, the call's
        output and observation, the judge's usage and the metric's time; an error scores
        the failure score with its message as feedback."""
        obs = Observation(duration_ms=3.0)
        calls = [
            ScoreCall(0, "e0", {}, "out0", None, obs),
            ScoreCall(1, "e1", {}, "out1", None, obs),
        ]
        error = ErrorInfo("invalid_return", "Metric return value: not a pair")
        outcomes = [
            Outcome(Scored(0.5, {"a": 1.0}, "fine", {"k": 1}), None, 1_000_000, 2_500_000),
            Outcome(None, error, 0, 0),
        ]
        meters = {0: _meter(1, 7)}
        results, errors = assembly.scored_results(calls, outcomes, meters, 0.0)
        ok, failed = results
        assert errors == 1
        assert (ok.example_id, ok.score, ok.scores, ok.feedback, ok.extra) == (
            "e0",
            0.5,
            {"a": 1.0},
            "fine",
            {"k": 1},
        )
        assert ok.output == "out0" and ok.observation is obs and ok.metric_ms == 1.5
        assert ok.judge.llm_calls == 1 and ok.judge.input_tokens == 7
        assert failed.error is error and failed.feedback == error.message and failed.score == 0.0
        assert failed.metric_ms is None and failed.output == "out1" and failed.judge.llm_calls == 0
        assert not any(gc.is_tracked(r) for r in results)


class TestMissingOutputs:
    def test_each_example_without_output_gets_its_own_error_in_place(self) -> None:
        """The results of examples with an output keep their order, with a
        missing_output result in the place of each example without one."""
        examples = _examples(3, output="a")
        examples[1] = Example(id="e1", input={}, expected=None, output=NO_OUTPUT)
        scored = [object(), object()]
        merged = assembly.with_missing_outputs(examples, scored, 0.0)  # type: ignore[arg-type]
        assert merged[0] is scored[0] and merged[2] is scored[1]
        missing = merged[1]
        assert missing.error is not None and missing.error.kind == "missing_output"
        assert missing.feedback == missing.error.message
        assert missing.observation is assembly.SCORE_ONLY

    def test_fill_holes(self) -> None:
        """Scored results go into the places the run stage left for them."""
        a, b = object(), object()
        assert assembly.fill_holes([None, a, None], [0, 2], [b, b]) == [b, a, b]  # type: ignore[list-item]


class TestOneResultPerExample:
    def test_a_missing_outcome_is_an_error_result_not_a_loss(self) -> None:
        """A score call without an outcome (None, or a short list) still gets a result:
        a 'cancelled' error naming the engine as the cause, counted as an error."""
        calls = [ScoreCall(i, f"e{i}", {}, "a", None, Observation()) for i in range(3)]
        ok = Outcome(Scored(1.0, {}, "fine", {}), None, 1, 2)
        results, errors = assembly.scored_results(calls, [ok, None], {}, 0.0)  # type: ignore[list-item]
        assert [r.example_id for r in results] == ["e0", "e1", "e2"]
        assert errors == 2 and results[0].error is None
        assert all(r.error is not None and r.error.kind == "cancelled" for r in results[1:])
        assert "received no outcome" in results[1].feedback

    def test_a_missing_program_outcome_is_an_error_result(self) -> None:
        """A run call without an outcome gives its example an error result, not a score
        call on nothing."""
        examples = _examples(2)
        calls = assembly.run_calls("v", examples, 0)
        ok = Outcome("out", None, 1, 2)
        holes, score_calls, where = assembly.after_program(examples, calls, [ok], {}, 0.0)
        assert [c.example_id for c in score_calls] == ["e0"] and where == [0]
        assert holes[1] is not None and holes[1].error is not None
        assert holes[1].error.kind == "cancelled"

    def test_complete_fills_every_gap_in_place(self) -> None:
        """complete() keeps the results there are and puts an error result in the place
        of each missing one (a None, or past the end), counting them."""
        examples = _examples(4)
        kept = assembly.lost(examples[:1], 0.0, "x")[0]
        results, missing = assembly.complete(examples, [kept, None], 0.5)
        assert [r.example_id for r in results] == ["e0", "e1", "e2", "e3"]
        assert results[0] is kept and missing == 3
        assert all(r.score == 0.5 and r.error is not None for r in results[1:])
        assert results[1].observation.duration_ms is None

    def test_lost_results_say_why(self) -> None:
        """Each example of a lost chunk gets its own error result with the reason."""
        results = assembly.lost(_examples(2), 0.0, "a cancellation raised inside")
        assert [r.example_id for r in results] == ["e0", "e1"]
        assert "a cancellation raised inside" in results[0].feedback

    def test_check_result_count(self) -> None:
        """A complete run passes the count check; a short one gets a message with the
        counts and what to do."""
        assert assembly.check_result_count(200, 200) is None
        assert assembly.check_result_count(200, 201) is None
        message = assembly.check_result_count(200, 195)
        assert message is not None
        assert message.startswith("5 of 200 examples have no result (195 results)")
        assert "--resume" in message
