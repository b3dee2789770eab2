"""Replay after a crash: a model reply relayed to a call is not paid again when that call
runs again because its worker died (``_relay.Replies`` and the process executor)."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._calls import Outcome, ScoreCall
from evaluator._call._loader import UserFunction, load_function
from evaluator._executors._process._executor import ProcessExecutor
from evaluator._executors._process._relay import Replies
from llm_client import ModelClient, ModelConfig, Simulator, SimulatorConfig
from tests._helpers import until

# Real worker processes are what these tests are about (the mark implies slow).
pytestmark = pytest.mark.process

# The metric asks the model once, and returns with its feedback a value that SIGKILLs its
# worker the first time it is pickled: the worker dies after the call has finished, while
# sending its outcome back, so the call runs again in another worker (deterministically:
# no race with the 20 ms at which outcomes are streamed back).
METRIC = """
import os, signal
from pathlib import Path
from skynet import llm

class KillOnSend:
    def __init__(self, marker):
        self.marker = marker

    def __deepcopy__(self, memo):
        return self  # the engine's private copy of the info: not the send

    def __reduce__(self):
        marker = Path(self.marker)
        if not marker.exists():
            marker.write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)
        return (str, ("sent",))

def score(input, output, expected=None):
    extra = f" from {os.getpid()}" if input.get("per_process") else ""
    reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}{extra}")
    info = {"feedback": reply, "sent": KillOnSend(input["marker"])}
    return (1.0 if reply.startswith("PASS") else 0.0), info
"""


class TestReplies:
    def test_kept_reply_is_found_by_token_order_and_request(self) -> None:
        """A kept reply (a failed call's too) answers the same request of the same call at
        the same place, and each answer is counted as replayed."""
        replies = Replies()
        replies.keep(7, 0, ("llm", "ask"), (True, "PASS"))
        replies.keep(7, 1, ("llm", "again"), (False, (None, "LLMError: HTTP 500")))
        assert replies.lookup(7, 0, ("llm", "ask")) == (True, "PASS")
        assert replies.lookup(7, 0, ("llm", "ask")) == (True, "PASS")
        assert replies.lookup(7, 1, ("llm", "again")) == (False, (None, "LLMError: HTTP 500"))
        assert replies.replayed == 3

    def test_other_request_place_or_call_is_not_replayed(self) -> None:
        """A request that differs, comes at another place, or belongs to another call is
        not answered from the kept reply (it is relayed and paid for)."""
        replies = Replies()
        replies.keep(7, 0, ("llm", "ask"), (True, "PASS"))
        assert replies.lookup(7, 0, ("llm", "other")) is None
        assert replies.lookup(7, 1, ("llm", "ask")) is None
        assert replies.lookup(8, 0, ("llm", "ask")) is None
        assert replies.replayed == 0

    def test_forget_drops_final_calls_only(self) -> None:
        """Forgetting a call's token drops its replies and keeps the others'."""
        replies = Replies()
        replies.keep(1, 0, ("llm", "a"), (True, "x"))
        replies.keep(2, 0, ("llm", "b"), (True, "y"))
        replies.forget([1, 99])
        assert len(replies) == 1
        assert replies.lookup(1, 0, ("llm", "a")) is None
        assert replies.lookup(2, 0, ("llm", "b")) == (True, "y")


@pytest.fixture
def metric(tmp_path: Path) -> UserFunction:
    path = tmp_path / "metric.py"
    path.write_text(textwrap.dedent(METRIC))
    return load_function(path, "score")


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig(seed=1, latency_ms=0)) as simulator:
        yield simulator


def _handler(client: ModelClient) -> Any:
    async def handler(
        token: int, stage: Any, instruction: str, input: str | None, options: dict[str, Any]
    ) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": instruction},
            {"role": "user", "content": input},
        ]
        return (await client.complete(messages)).text

    return handler


async def _killed_once(
    metric: UserFunction, sim: Simulator, marker: Path, **extra: Any
) -> tuple[Outcome, Any]:
    """One judged call whose worker is SIGKILLed as it sends the outcome back; the
    call's outcome (from its second run) and the executor's statistics."""
    config = ModelConfig(model="judge-sim", base_url=sim.base_url, api_key_env=None)
    async with (
        ModelClient(config) as client,
        ProcessExecutor(metric, "score", timeout=30, workers=1, llm_handler=_handler(client)) as ex,
    ):
        call = ScoreCall(0, "ex0", {"marker": str(marker), **extra}, "a", {"answer": "a"})
        (outcome,) = await ex.submit([call])
        return outcome, ex.statistics()


class TestReplayAfterCrash:
    async def test_sigkilled_worker_pays_each_judge_call_once(
        self, metric: UserFunction, sim: Simulator, tmp_path: Path
    ) -> None:
        """A judged call whose worker is SIGKILLed after it finished runs again in a new
        worker; its model request is answered from the kept reply: the simulator sees one
        request, the executor counts one requeued call and one replay, and the outcome
        carries the reply the model gave."""
        marker = tmp_path / "killed"
        outcome, stats = await _killed_once(metric, sim, marker)
        assert marker.exists() and stats.crashes == 1
        assert outcome.error is None and outcome.value is not None
        assert (stats.calls_requeued, stats.model_calls_replayed) == (1, 1)
        assert sim.statistics().requests == 1
        assert outcome.value.feedback.startswith(("PASS", "FAIL"))

    async def test_request_that_differs_on_rerun_is_paid_again(
        self, metric: UserFunction, sim: Simulator, tmp_path: Path
    ) -> None:
        """A call whose request is not the same when it runs again (it names its worker's
        pid) is not given the first run's reply: that request is relayed and paid for."""
        outcome, stats = await _killed_once(metric, sim, tmp_path / "killed", per_process=True)
        assert outcome.error is None
        assert (stats.calls_requeued, stats.model_calls_replayed) == (1, 0)
        assert sim.statistics().requests == 2


# The same crash after the call, with the judge asked through the openai SDK, which the
# engine routes (evaluator/_sdk/): the routed call is replayed as skynet.llm is.
SDK_METRIC = """
import os, signal
from pathlib import Path
import openai

class KillOnSend:
    def __init__(self, marker):
        self.marker = marker

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        marker = Path(self.marker)
        if not marker.exists():
            marker.write_text("killed")
            os.kill(os.getpid(), signal.SIGKILL)
        return (str, ("sent",))

def score(input, output, expected=None):
    client = openai.OpenAI(base_url=input["url"], api_key="sk-metric", max_retries=0)
    verdict = client.chat.completions.create(
        model="judge-x",
        messages=[{"role": "user", "content": f"Answer PASS or FAIL.\\nAnswer: {output}"}],
    ).choices[0].message.content
    info = {"feedback": verdict, "sent": KillOnSend(input["marker"])}
    return (1.0 if verdict.startswith("PASS") else 0.0), info
"""


class TestReplayOfRoutedSDKCalls:
    async def test_routed_sdk_call_is_paid_once(self, sim: Simulator, tmp_path: Path) -> None:
        """An openai SDK call of a metric whose worker is SIGKILLed after the call is
        answered again from the kept reply, twice over (the second rerun in a worker
        forked by the fork server, the SDK routed there too): the simulator serves each
        call once, the judge's usage counts it once, the result is the model's verdict."""
        from evaluator import Evaluator

        metric = tmp_path / "metric.py"
        metric.write_text(textwrap.dedent(SDK_METRIC))

        def row(name: str) -> dict[str, Any]:
            marker = str(tmp_path / f"killed-{name}")
            return {"id": name, "input": {"url": sim.base_url, "marker": marker}, "output": "a"}

        async def ready(holds: Callable[[Any], bool]) -> Any:
            return await until(
                lambda: stats if holds(stats := ev.statistics().metric) else None,
                lambda: f"ready: {ev.statistics().metric}",
            )

        results = []
        async with Evaluator(metric, execution="process", workers=1, timeout=60) as ev:
            (tmp_path / "killed-warm").write_text("not this one")
            (warm,) = await ev.evaluate_many(None, [row("warm")])
            await ready(lambda s: s.spare_ready and s.fork_server not in (None, "starting"))
            results += await ev.evaluate_many(None, [row("e0")])
            # The spawned spare took the dead worker's place; the new spare is forked.
            before = await ready(lambda s: s.spare_ready)
            assert (before.spares_started, before.workers_forked) == (2, 1)
            results += await ev.evaluate_many(None, [row("e1")])  # rerun in the forked one
            stats = ev.statistics().metric
        assert warm.error is None
        assert [r.error for r in results] == [None, None]
        assert getattr(stats, "model_calls_replayed", None) == 2
        assert sim.statistics().served == 3  # the warm-up's call, and one for each
        assert [r.judge.llm_calls if r.judge else None for r in results] == [1, 1]
