"""What the reflection is told about a result: the metric's words, or the engine's."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import cast

import anyio
import pytest

from evaluator._call._results import ERROR_KINDS, ErrorInfo, ErrorKind, Result
from evaluator._optimizers._reflection import METRIC_FAILURE_TEXT, from_program, reflection_feedback
from evaluator._pipeline import Evaluator
from evaluator.gepa import EvaluatorAdapter


def _result(kind: str | None, message: str = "", feedback: str = "") -> Result:
    # cast: an unknown kind is one of the cases (the engine may grow kinds)
    error = ErrorInfo(cast(ErrorKind, kind), message) if kind is not None else None
    return Result(example_id="e", score=0.0, feedback=feedback or message, error=error)


class TestReflectionFeedback:
    def test_ok_result_is_the_metrics_feedback(self) -> None:
        """The metric's own feedback goes through: its author wrote it for the reflection."""
        assert reflection_feedback(_result(None, feedback="Say the date.")) == "Say the date."

    @pytest.mark.parametrize("kind", ["program_error", "program_timeout"])
    def test_program_errors_keep_their_message(self, kind: str) -> None:
        """A program failure's message is the reflection's to act on."""
        text = reflection_feedback(_result(kind, "`run` raised ValueError: bad JSON"))
        assert kind in text and "bad JSON" in text

    @pytest.mark.parametrize("kind", [k for k in ERROR_KINDS if not k.startswith("program")])
    def test_other_errors_are_a_fixed_sentence(self, kind: str) -> None:
        """A failure while scoring is told by kind only: the message never goes through."""
        message = "`score` raised KeyError: 'B' (at metric.py:3)"
        text = reflection_feedback(_result(kind, message))
        assert text == METRIC_FAILURE_TEXT[kind] and "'B'" not in text

    @pytest.mark.parametrize(
        ("message", "program"),
        [
            ("`run` raised LLMError: context length exceeded", True),
            ("the worker process running `run` on this example died (signal 9)", True),
            ("`score` raised LLMError: 400 ... expected answer: B", False),
            ("the worker process running `score` on this example died (signal 9)", False),
            ("run raised something", False),
        ],
    )
    def test_shared_kinds_go_by_the_engines_opening(self, message: str, program: bool) -> None:
        """llm_error and worker_crash happen in either stage: the engine's own opening says
        which, and only the program's are passed on."""
        for kind in ("llm_error", "worker_crash"):
            assert from_program(ErrorInfo(kind, message)) is program
            assert (message in reflection_feedback(_result(kind, message))) is program

    def test_unknown_kind_is_still_a_fixed_sentence(self) -> None:
        """An error kind this module does not know says nothing of its message."""
        assert "secret" not in reflection_feedback(_result("new_kind", "secret"))


class TestAdapterLogsWhatItHides:
    async def test_metric_error_is_logged_for_people(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The reflection gets the fixed sentence; the log gets the real message, once."""
        metric = tmp_path / "metric.py"
        metric.write_text(
            "def score(input, output, expected=None):\n    return {}[expected['l']]\n"
        )
        rows = [
            {"id": f"r{i}", "input": {}, "output": "o", "expected": {"l": "B"}} for i in range(3)
        ]
        caplog.set_level(logging.WARNING, logger="evaluator.gepa")
        async with Evaluator(metric, execution="thread", timeout=10) as ev:
            adapter = EvaluatorAdapter(ev)
            batch = await anyio.to_thread.run_sync(adapter.evaluate, rows, {"p": "x"}, True)
        assert batch.trajectories is not None
        assert {t["feedback"] for t in batch.trajectories} == {METRIC_FAILURE_TEXT["metric_error"]}
        logged = [r.getMessage() for r in caplog.records]
        assert len(logged) == 1 and "KeyError: 'B'" in logged[0]
