"""The thread and inline executors: sync functions on threads of the engine's process."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._calls import ScoreCall
from evaluator._call._loader import UserFunction, load_metric
from evaluator._call._results import Observation
from evaluator._executors._threads import (
    MAX_MODEL_THREADS,
    InlineExecutor,
    ThreadExecutor,
    pool_size,
)
from tests._helpers import write

# User files shared by these tests, kept as real files in sources/ (see its README).
SOURCES = Path(__file__).resolve().parents[1] / "sources"
BEHAVIOURS = (SOURCES / "behaviours.py").read_text()  # behaviour chosen by input["kind"]
EXACT = (SOURCES / "exact.py").read_text()
PROGRAM = (SOURCES / "program.py").read_text()


def _calls(kinds: list[str], **extra: Any) -> list[ScoreCall]:
    return [
        ScoreCall(i, f"e{i}", {"kind": kind, "n": i, **extra}, "a", {"label": "a"}, Observation())
        for i, kind in enumerate(kinds)
    ]


def _release(fn: UserFunction) -> None:
    sys.modules[fn.module_name].RELEASE.set()


@pytest.fixture
def metric(tmp_path: Path) -> UserFunction:
    return load_metric(write(tmp_path, "metric.py", BEHAVIOURS))


class TestThreadExecutor:
    async def test_calls_run_off_the_loop_thread(self, tmp_path: Path) -> None:
        """Sync calls run on the pool's threads, never on the event loop's thread."""
        fn = load_metric(
            write(
                tmp_path,
                "where.py",
                "import threading\n"
                "def score(i, o, e=None):\n"
                "    return 1.0, {'feedback': threading.current_thread().name}\n",
            )
        )
        async with ThreadExecutor(fn, "score", timeout=5, workers=3) as ex:
            outcomes = await ex.submit(_calls(["ok"] * 20))
        names = {o.value.feedback for o in outcomes}
        assert threading.current_thread().name not in names
        assert all(name.startswith("skynet-thread-score") for name in names)

    async def test_hung_call_is_abandoned_and_replaced(self, metric: UserFunction) -> None:
        """A hung call gets metric_timeout at the timeout, its thread is retired and counted,
        the other calls finish, and the pool goes on with a fresh thread (tolerance 1 s)."""
        kinds = ["hang", "ok", "slow", "ok", "ok", "ok"]
        try:
            async with ThreadExecutor(metric, "score", timeout=0.3, workers=2) as ex:
                started = time.perf_counter()
                outcomes = await ex.submit(_calls(kinds))
                elapsed = time.perf_counter() - started
                stats = ex.statistics()
                again = await ex.submit(_calls(["ok", "ok"]))
                hung = [t for t in ex.threads() if t.name in {w.name for w in ex._abandoned}]
            assert [o.error.kind if o.error else "ok" for o in outcomes] == [
                "metric_timeout",
                "ok",
                "ok",
                "ok",
                "ok",
                "ok",
            ]
            assert "its thread was abandoned" in outcomes[0].error.message  # type: ignore[union-attr]
            assert 0.3 <= elapsed < 1.3
            assert stats.abandoned_threads == 1 and stats.abandoned_alive == 1
            assert all(o.error is None for o in again)
            # Only the abandoned thread is left, and it is a daemon that cannot hold up exit.
            assert len(hung) == 1 and hung[0].daemon
            assert [t for t in ex.threads() if t not in hung] == []
        finally:
            _release(metric)
        hung[0].join(5)
        assert not hung[0].is_alive()

    async def test_llm_calls_hop_to_the_loop(self, tmp_path: Path) -> None:
        """skynet.llm in a pool thread is answered by the handler on the loop, per token."""
        fn = load_metric(
            write(
                tmp_path,
                "judge.py",
                "from skynet import llm\n"
                "def score(i, o, e=None):\n"
                "    return 1.0, {'feedback': llm('judge', input=str(i['n']))}\n",
            )
        )
        assert fn.uses_llm
        seen: list[tuple[int, str, str | None]] = []

        async def handler(
            token: int, stage: str, instruction: str, input: str | None, options: dict[str, Any]
        ) -> str:
            seen.append((token, stage, input))
            return f"reply {input}"

        async with ThreadExecutor(fn, "score", timeout=5, workers=2, llm_handler=handler) as ex:
            outcomes = await ex.submit(_calls(["ok"] * 4))
        assert [o.value.feedback for o in outcomes] == [f"reply {i}" for i in range(4)]
        assert sorted(seen) == [(i, "score", str(i)) for i in range(4)]

    async def test_cancelled_submit_stops_claiming(self, metric: UserFunction) -> None:
        """Cancelling a submit returns at once and the rest of its batch never starts."""
        import anyio

        calls = _calls(["hang"] + ["slow"] * 200, hang_s=0.5)
        try:
            async with ThreadExecutor(metric, "score", timeout=5, workers=1) as ex:
                with anyio.move_on_after(0.1):
                    await ex.submit(calls)
                _release(metric)
            assert ex.statistics().calls < 50
        finally:
            _release(metric)

    async def test_small_submits_at_once_get_a_thread_each(self, tmp_path: Path) -> None:
        """Eight one-call submits at once run on eight threads at once (each call waits
        for all eight at a barrier): threads start for every submit not returned yet,
        not for the calls of one submit (a slow judge's one-example chunks used to share
        the threads the first submit started)."""
        fn = load_metric(
            write(
                tmp_path,
                "barrier.py",
                "import threading\n"
                "BARRIER = threading.Barrier(8, timeout=10)\n"
                "def score(i, o, e=None):\n"
                "    BARRIER.wait()\n"
                "    return 1.0, {'feedback': ''}\n",
            )
        )
        async with ThreadExecutor(fn, "score", timeout=20, workers=8) as ex:
            results = await asyncio.gather(*(ex.submit(_calls(["ok"])) for _ in range(8)))
            assert len(ex.threads()) == 8
        assert [o.error for (o,) in results] == [None] * 8

    def test_pool_size(self) -> None:
        """`workers` sets the size; else a model budget does (capped); else eight per
        core, at most 64; `concurrency` caps all of them."""
        default = min(64, (os.cpu_count() or 1) * 8)
        assert pool_size(None, None, None) == default
        assert pool_size(5, 64, None) == 5
        assert pool_size(None, 64, None) == 64
        assert pool_size(None, 10_000, None) == MAX_MODEL_THREADS
        assert pool_size(None, 64, 10) == pool_size(32, None, 10) == 10
        assert pool_size(None, None, 1) == 1

    async def test_cancelled_submit_stops_the_model_calls_it_waits_on(self, tmp_path: Path) -> None:
        """Cancelling a submit whose calls wait on skynet.llm cancels those model calls:
        the threads are free at once, not after the model's reply."""
        fn = load_metric(
            write(
                tmp_path,
                "judge.py",
                "from skynet import llm\n"
                "def score(i, o, e=None):\n"
                "    return 1.0, {'feedback': llm('judge', input='x')}\n",
            )
        )
        all_waiting = asyncio.Event()
        waiting: list[int] = []
        cancelled: list[int] = []

        async def handler(
            token: int, stage: str, instruction: str, input: str | None, options: dict[str, Any]
        ) -> str:
            waiting.append(token)
            if len(waiting) == 4:
                all_waiting.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(token)
                raise
            return "PASS"

        async with ThreadExecutor(fn, "score", timeout=60, workers=4, llm_handler=handler) as ex:
            task = asyncio.create_task(ex.submit(_calls(["ok"] * 4)))
            await all_waiting.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            started = time.perf_counter()
            while ex.statistics().busy:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            assert time.perf_counter() - started < 5
        assert sorted(cancelled) == [0, 1, 2, 3]
        assert ex.statistics().abandoned_threads == 0

    async def test_a_call_that_reaches_for_a_model_after_its_submit_was_cancelled_is_refused(
        self, tmp_path: Path
    ) -> None:
        """A call's model bridge is made when the call first asks for it: one made after
        its submit was cancelled is refused like one cancelled while it waited."""
        fn = load_metric(
            write(
                tmp_path,
                "late_judge.py",
                "import threading\n"
                "from skynet import llm\n"
                "STARTED, RELEASE, SEEN = threading.Event(), threading.Event(), []\n"
                "def score(i, o, e=None):\n"
                "    STARTED.set()\n"
                "    RELEASE.wait(10)\n"
                "    try:\n"
                "        SEEN.append(llm('judge', input='x'))\n"
                "    except BaseException as exc:\n"
                "        SEEN.append(type(exc).__name__)\n"
                "        raise\n"
                "    return 1.0, {'feedback': 'ok'}\n",
            )
        )
        module: Any = sys.modules[fn.module_name]
        asked: list[int] = []

        async def handler(
            token: int, stage: str, instruction: str, input: str | None, options: dict[str, Any]
        ) -> str:
            asked.append(token)
            return "PASS"

        async with ThreadExecutor(fn, "score", timeout=60, workers=1, llm_handler=handler) as ex:
            task = asyncio.create_task(ex.submit(_calls(["ok"])))
            assert await asyncio.to_thread(module.STARTED.wait, 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            module.RELEASE.set()
            while ex.statistics().busy:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        assert asked == [] and module.SEEN == ["CancelledError"]


class TestInlineExecutor:
    async def test_batch_runs_on_one_dedicated_thread(self, metric: UserFunction) -> None:
        """A batch runs on one thread that is not the loop's; errors stay per call."""
        async with InlineExecutor(metric, "score", timeout=5) as ex:
            outcomes = await ex.submit(_calls(["ok", "raise", "invalid", "ok"] * 50))
            assert len(ex.threads()) == 1 and ex.threads()[0] is not threading.current_thread()
        kinds = [o.error.kind if o.error else "ok" for o in outcomes]
        assert kinds == ["ok", "metric_error", "invalid_return", "ok"] * 50
        assert ex.threads() == []

    async def test_hung_call_abandons_the_thread_and_the_batch_goes_on(
        self, metric: UserFunction
    ) -> None:
        """A hung call in the inline thread times out; a fresh thread finishes the batch
        (tolerance 1 s)."""
        try:
            async with InlineExecutor(metric, "score", timeout=0.3) as ex:
                started = time.perf_counter()
                outcomes = await ex.submit(_calls(["ok", "hang", "ok", "ok"]))
                elapsed = time.perf_counter() - started
                assert ex.statistics().abandoned_threads == 1
            assert [o.error.kind if o.error else "ok" for o in outcomes] == [
                "ok",
                "metric_timeout",
                "ok",
                "ok",
            ]
            assert 0.3 <= elapsed < 1.3
        finally:
            _release(metric)
