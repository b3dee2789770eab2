"""The async executor: async def functions awaited on the loop, bounded and timed out."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._calls import ScoreCall
from evaluator._call._loader import UserFunction, load_metric
from evaluator._call._results import Observation
from evaluator._executors._async import AsyncExecutor
from tests._helpers import write

# User files shared by these tests, kept as real files in sources/ (see its README).
SOURCES = Path(__file__).resolve().parents[1] / "sources"
ASYNC_BEHAVIOURS = (SOURCES / "async_behaviours.py").read_text()  # by input["kind"]


def _calls(kinds: list[str], **extra: Any) -> list[ScoreCall]:
    return [
        ScoreCall(i, f"e{i}", {"kind": kind, "n": i, **extra}, "a", {"label": "a"}, Observation())
        for i, kind in enumerate(kinds)
    ]


@pytest.fixture
def async_metric(tmp_path: Path) -> UserFunction:
    return load_metric(write(tmp_path, "ametric.py", ASYNC_BEHAVIOURS))


class TestAsyncExecutor:
    async def test_one_outcome_per_call_in_order(self, async_metric: UserFunction) -> None:
        """Every call gets its own outcome, in order: ok, raised, invalid, slow."""
        kinds = ["ok", "raise", "invalid", "slow", "ok"]
        async with AsyncExecutor(async_metric, "score", timeout=5) as ex:
            outcomes = await ex.submit(_calls(kinds))
        assert [o.error.kind if o.error else "ok" for o in outcomes] == [
            "ok",
            "metric_error",
            "invalid_return",
            "ok",
            "ok",
        ]
        assert "boom 1" in outcomes[1].error.message  # type: ignore[union-attr]
        assert outcomes[3].value.scores == {"part": 0.25}

    async def test_timeout_cancels_the_call(self, async_metric: UserFunction) -> None:
        """A hung coroutine gets metric_timeout at the timeout (tolerance 0.2-1.5 s)."""
        async with AsyncExecutor(async_metric, "score", timeout=0.2) as ex:
            started = time.perf_counter()
            outcomes = await ex.submit(_calls(["hang", "ok"]))
            elapsed = time.perf_counter() - started
            assert ex.statistics().timeouts == 1
        assert outcomes[0].error is not None and outcomes[0].error.kind == "metric_timeout"
        assert "0.2 s timeout" in outcomes[0].error.message
        assert outcomes[1].error is None
        assert 0.2 <= elapsed < 1.5

    async def test_timeout_holds_against_a_call_that_swallows_cancellation(
        self, tmp_path: Path
    ) -> None:
        """A coroutine that catches the cancellation and waits on is cancelled again until
        it ends, and one that catches it and returns late still gets metric_timeout
        (tolerance 0.2-1.5 s); the caller's task is not left cancelled."""
        import asyncio

        fn = load_metric(
            write(
                tmp_path,
                "stubborn.py",
                "import asyncio\n"
                "async def score(i, o, e=None):\n"
                "    if i['kind'] == 'ok':\n"
                "        return 1.0, {'feedback': 'ok'}\n"
                "    for _ in range(5):\n"
                "        try:\n"
                "            await asyncio.sleep(30)\n"
                "        except asyncio.CancelledError:\n"
                "            if i['kind'] == 'late':\n"
                "                return 1.0, {'feedback': 'late'}\n"
                "    return 1.0, {'feedback': 'never'}\n",
            )
        )
        async with AsyncExecutor(fn, "score", timeout=0.2) as ex:
            started = time.perf_counter()
            outcomes = await ex.submit(_calls(["stubborn", "late", "ok"]))
            elapsed = time.perf_counter() - started
            single = await ex.submit(_calls(["late"]))
            task = asyncio.current_task()
            assert task is not None and task.cancelling() == 0
            await asyncio.sleep(0)  # no cancellation of ours is left pending
        kinds = [o.error.kind if o.error else "ok" for o in [*outcomes, *single]]
        assert kinds == ["metric_timeout", "metric_timeout", "ok", "metric_timeout"]
        assert 0.2 <= elapsed < 1.5
