"""The engine on a background loop: one router for every thread, real HTTP, clean close."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from evaluator._exceptions import EngineClosedError
from evaluator._models import Models
from evaluator._optimizers._background import BackgroundEngine
from llm_client import ModelConfig, Simulator, SimulatorConfig
from tests._helpers import until_sync


@pytest.fixture
def sim() -> Iterator[Simulator]:
    # 24 requests in any 1 s window; the client is told 20 a second, plus its burst of 2.
    # A governor per thread (16 bursts of 2 at once) would go past it.
    config = SimulatorConfig(rpm=1440, window_s=1.0, latency_ms=20)
    with Simulator(config).running_in_thread() as s:
        yield s


def _judge(sim: Simulator, **fields: Any) -> Models:
    return Models(
        metric=ModelConfig(
            model="gpt-4o-mini", base_url=sim.base_url, api_key_env=None, rpm=1200, **fields
        )
    )


class TestBackgroundEngine:
    @pytest.mark.slow
    def test_threads_share_one_rate_budget(self, sim: Simulator) -> None:
        """48 calls from 16 threads pass one governor: no 429, no window over the limit."""
        engine = BackgroundEngine(_judge(sim))
        try:
            with ThreadPoolExecutor(16) as pool:
                replies = list(
                    pool.map(
                        lambda i: engine.call(i, "Answer PASS or FAIL.", f"Answer: {i}", {}),
                        range(48),
                    )
                )
            assert all(r.startswith(("PASS", "FAIL")) for r in replies)
            stats = sim.statistics()
            assert stats.served == 48
            assert stats.rate_limited == 0
            assert sim.peak_requests(1.0) <= 24
        finally:
            engine.close()

    def test_usage_is_settled_per_token(self, sim: Simulator) -> None:
        """settle(token) gives that call's usage and adds it to the total; cost is priced."""
        engine = BackgroundEngine(_judge(sim))
        try:
            engine.call(1, "Say hi.", None, {})
            engine.call(1, "Say hi again.", None, {})
            engine.call(2, "Say bye.", None, {})
            one, two = engine.settle(1), engine.settle(2)
            assert one is not None and two is not None
            assert (one.llm_calls, two.llm_calls) == (2, 1)
            assert engine.settle(1) is None  # settled once
            total = engine.usage()
            assert total.llm_calls == 3
            assert total.input_tokens == one.input_tokens + two.input_tokens
            assert total.cost_usd is not None and one.cost_usd is not None
            assert total.cost_usd == pytest.approx(one.cost_usd + (two.cost_usd or 0))
        finally:
            engine.close()

    def test_unpriced_model_reports_cost_none_with_the_reason(self, sim: Simulator) -> None:
        """A model with no known price gives cost None and a note, never 0."""
        models = Models(
            metric=ModelConfig(model="judge-x", base_url=sim.base_url, api_key_env=None)
        )
        engine = BackgroundEngine(models)
        try:
            engine.call(1, "hi", None, {})
            engine.settle(1)
            usage = engine.usage()
            assert usage.llm_calls == 1
            assert usage.cost_usd is None
            assert any("judge-x" in note for note in usage.notes)
        finally:
            engine.close()

    def test_close_fails_calls_in_flight_and_leaves_nothing(self) -> None:
        """close() during a slow call: the caller gets EngineClosedError; thread and loop end."""
        config = SimulatorConfig(latency_ms=60_000)
        with Simulator(config).running_in_thread() as slow:
            engine = BackgroundEngine(_judge(slow))
            errors: list[BaseException] = []

            def caller() -> None:
                try:
                    engine.call(1, "hi", None, {})
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=caller)
            thread.start()
            until_sync(lambda: slow.statistics().in_flight == 1)
            engine.close()
            thread.join(30)
            assert not thread.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], EngineClosedError)
        assert "is closed" in str(errors[0])
        assert engine.thread is not None and not engine.thread.is_alive()
        assert engine.loop is not None and engine.loop.is_closed()
        assert not any(t.name == engine.name for t in threading.enumerate())

    def test_a_closed_engine_refuses_calls(self, sim: Simulator) -> None:
        """After close(), call() and start() raise EngineClosedError at once; close() again is a no-op."""
        engine = BackgroundEngine(_judge(sim))
        engine.start()
        engine.close()
        engine.close()
        with pytest.raises(EngineClosedError, match="build a new metric"):
            engine.call(1, "hi", None, {})
        with pytest.raises(EngineClosedError):
            engine.start()

    def test_never_started_engine_closes_without_a_thread(self) -> None:
        """An engine that never served a call starts no thread and closes at once."""
        engine = BackgroundEngine(Models(metric=ModelConfig(model="m", api_key_env=None)))
        engine.close()
        assert engine.thread is None

    def test_acall_from_another_loop(self, sim: Simulator) -> None:
        """An async caller on its own loop awaits the engine's reply without blocking it."""
        engine = BackgroundEngine(_judge(sim))

        async def main() -> list[str]:
            return list(await asyncio.gather(*(engine.acall(i, "hi", None, {}) for i in range(5))))

        try:
            assert len(asyncio.run(main())) == 5
        finally:
            engine.close()

    def test_start_failure_is_a_clear_error(self) -> None:
        """A simulator that cannot listen makes start() raise, naming the cause; no thread left."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            engine = BackgroundEngine(
                Models(metric=ModelConfig(model="m", api_key_env=None)),
                simulator=SimulatorConfig(port=port),
            )
            with pytest.raises(EngineClosedError, match="could not start") as info:
                engine.call(1, "hi", None, {})
            assert info.value.__cause__ is not None
            assert engine.thread is not None
            engine.thread.join(30)
            assert not engine.thread.is_alive()
            engine.close()
