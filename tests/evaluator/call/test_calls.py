"""The call layer: one user call, run the same way by every executor."""

from __future__ import annotations

import asyncio
import gc
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator._call._calls import RunCall, ScoreCall, SyncInvoker, invoke_async, invoke_sync
from evaluator._call._context import current
from evaluator._call._loader import UserFunction, load_function
from evaluator._call._results import Observation, Scored
from evaluator._executors._bridge import LoopBridge

METRIC = """
import sys
from skynet import observation

def score(input, output, expected=None):
    kind = input["kind"]
    if kind == "observe":
        return 1.0, {"feedback": "seen", "ms": observation().duration_ms}
    if kind == "raise":
        raise ValueError("bad input " + str(input.get("n")))
    if kind == "exit":
        sys.exit(4)
    if kind == "invalid":
        return "0.5", {"feedback": "a string"}
    if kind == "two":
        return 0.5, {"feedback": "two"}
    if kind == "badstr":
        class Bad(Exception):
            def __str__(self):
                raise RuntimeError("no text")
        raise Bad()
    if kind == "long":
        raise ValueError("x" * 2000)
    return float(output == expected["label"]), {"feedback": "checked"}
"""

TWO_ARGS = """
def score(input, output):
    return 1.0, {"feedback": f"{input['q']}:{output}"}
"""

PROGRAM = """
def run(artifact, input):
    if input == "raise":
        raise KeyError("missing")
    return f"{artifact}:{input}"
"""

ASYNC_METRIC = """
import asyncio
from skynet import observation

async def score(input, output, expected=None):
    if input["kind"] == "raise":
        raise ValueError("async bad")
    if input["kind"] == "sleep":
        await asyncio.sleep(30)
    return 0.25, {"feedback": str(observation().duration_ms)}
"""


def _load(folder: Path, name: str, source: str, function: str = "score") -> UserFunction:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return load_function(path, function)


def _score(kind: str, output: Any = "a", **extra: Any) -> ScoreCall:
    return ScoreCall(
        1, "e1", {"kind": kind, **extra}, output, {"label": "a"}, Observation(duration_ms=12.0)
    )


@pytest.fixture
def metric(tmp_path: Path) -> UserFunction:
    return _load(tmp_path, "metric.py", METRIC)


class TestCallStructs:
    def test_named_fields_and_arguments(self) -> None:
        """A run call carries artifact and input, a score call input, output, expected and
        the observation; each gives its function's positional arguments."""
        run = RunCall(3, "q", "prompt", {"x": 1})
        assert run.arguments(2) == ("prompt", {"x": 1}) and run.observation is None
        score = ScoreCall(4, "q", {"x": 1}, "out", {"label": "a"})
        assert score.arguments(3) == ({"x": 1}, "out", {"label": "a"})
        assert score.arguments(2) == ({"x": 1}, "out")

    def test_calls_cross_as_plain_rows_and_are_not_tracked(self) -> None:
        """Calls encode as arrays (positional) and are invisible to the cyclic collector."""
        call = ScoreCall(4, "q", {"x": [1]}, "out", None)
        assert msgspec.json.encode(call) == b'[4,"q",{"x":[1]},"out",null,null]'
        assert not gc.is_tracked(call) and not gc.is_tracked(RunCall(1, 1, {}, {}))


class TestSyncInvoker:
    def test_ok_score_is_checked_and_scored(self, metric: UserFunction) -> None:
        """A valid return value becomes a Scored; the call is timed."""
        outcome = invoke_sync(metric, "score", _score("ok"))
        assert outcome.error is None and outcome.value == Scored(1.0, {}, "checked", {})
        assert outcome.ended_ns >= outcome.started_ns > 0

    def test_the_call_sees_its_observation(self, metric: UserFunction) -> None:
        """skynet.observation() inside score reads the call's observation; outside a call
        there is no context left behind."""
        outcome = invoke_sync(metric, "score", _score("observe"))
        assert outcome.value.extra == {"ms": 12.0}
        assert current() is None

    def test_failures_are_outcomes_with_the_stage_kind(self, metric: UserFunction) -> None:
        """A raise is metric_error naming the exception and the user's line; exit() says
        so; a bad return value is invalid_return naming the example."""
        raised = invoke_sync(metric, "score", _score("raise", n=7)).error
        assert raised is not None and raised.kind == "metric_error"
        assert raised.message.startswith("`score` raised ValueError: bad input 7 (at metric.py:")
        exited = invoke_sync(metric, "score", _score("exit")).error
        assert exited is not None and exited.message == "`score` called exit(4)"
        invalid = invoke_sync(metric, "score", _score("invalid")).error
        assert invalid is not None and invalid.kind == "invalid_return"
        assert "example 'e1'" in invalid.message and "score is a str" in invalid.message

    def test_unprintable_and_long_exceptions(self, metric: UserFunction) -> None:
        """An exception whose text cannot be read is still named; a long one is cut."""
        bad = invoke_sync(metric, "score", _score("badstr")).error
        assert bad is not None and bad.message == "`score` raised Bad"
        long = invoke_sync(metric, "score", _score("long")).error
        assert long is not None and len(long.message) < 600 and "..." in long.message

    def test_two_argument_score(self, tmp_path: Path) -> None:
        """score(input, output) is called with two arguments."""
        fn = _load(tmp_path, "two.py", TWO_ARGS)
        outcome = invoke_sync(fn, "score", ScoreCall(0, 0, {"q": "x"}, "y", {"label": "z"}))
        assert outcome.value.feedback == "x:y"

    def test_run_returns_the_output_whatever_it_is(self, tmp_path: Path) -> None:
        """run's return value is the output, unchecked; its failure is program_error."""
        fn = _load(tmp_path, "program.py", PROGRAM, "run")
        assert invoke_sync(fn, "run", RunCall(0, 0, "v1", "q")).value == "v1:q"
        error = invoke_sync(fn, "run", RunCall(0, 0, "v1", "raise")).error
        assert error is not None and error.kind == "program_error" and "KeyError" in error.message

    def test_one_invoker_per_thread_updates_its_context(self, metric: UserFunction) -> None:
        """An invoker entered once serves call after call with each call's own example."""
        invoker = SyncInvoker(metric, "score")
        token = invoker.enter()
        try:
            seen = []
            for i in range(3):
                call = ScoreCall(i, f"e{i}", {"kind": "ok"}, "a", {"label": "a"})
                invoker.invoke(call, None, 1)
                ctx = current()
                assert ctx is not None
                seen.append(ctx.example_id)
        finally:
            from evaluator._call._context import _current

            _current.reset(token)
        assert seen == ["e0", "e1", "e2"]


class TestInvokeAsync:
    async def test_async_call_outcomes(self, tmp_path: Path) -> None:
        """An async score is awaited with its context; a raise is metric_error."""
        fn = _load(tmp_path, "ametric.py", ASYNC_METRIC)
        ok = await invoke_async(fn, "score", _score("ok"))
        assert ok.value.feedback == "12.0"
        failed = await invoke_async(fn, "score", _score("raise"))
        assert failed.error is not None and failed.error.kind == "metric_error"
        assert current() is None

    async def test_cancellation_propagates(self, tmp_path: Path) -> None:
        """The cancellation that enforces a timeout is not taken for the user's failure."""
        fn = _load(tmp_path, "ametric.py", ASYNC_METRIC)
        task = asyncio.create_task(invoke_async(fn, "score", _score("sleep")))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


class TestLoopBridge:
    async def test_sync_llm_on_the_loop_thread_is_refused(self) -> None:
        """A blocking llm() from the loop's own thread is refused (it would deadlock),
        naming the awaitable form; from a thread it hops to the loop."""
        loop = asyncio.get_running_loop()

        async def handler(
            token: int, stage: Any, instruction: str, input: Any, options: Any
        ) -> str:
            return f"{token}:{stage}:{instruction}"

        bridge = LoopBridge(loop, handler, 5, "score")
        with pytest.raises(RuntimeError, match="allm"):
            bridge.call("judge", None, {})
        assert await asyncio.to_thread(bridge.call, "judge", None, {}) == "5:score:judge"
        assert await bridge.acall("judge", None, {}) == "5:score:judge"
