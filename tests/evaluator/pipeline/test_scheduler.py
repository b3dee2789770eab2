"""Fair shares between the callers of one Evaluator, and cancellation of one caller.

The model traffic goes over real HTTP to the simulator; ordering is by counts (requests
the simulator saw), never by wall time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import psutil
import pytest
from hypothesis import HealthCheck, given, settings

from evaluator import ConfigError, Evaluator, Example, Models
from evaluator._pipeline._scheduler import FairSlots, TenantBook, caller_share
from llm_client import ModelConfig, RateGovernor, Share, Simulator, SimulatorConfig
from llm_client._governor import governor_for
from tests._helpers import until

ROOT = Path(__file__).resolve().parents[3]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"


def judged(n: int, prefix: str) -> list[Example]:
    return [
        Example(id=f"{prefix}{i}", input={"question": f"q{i}"}, expected=None, output=str(i))
        for i in range(n)
    ]


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig(latency_ms=20)) as simulator:
        yield simulator


def judge_model(sim: Simulator, **settings: Any) -> ModelConfig:
    return ModelConfig(model="judge-1", base_url=sim.base_url, api_key_env=None, **settings)


def governor(config: ModelConfig) -> RateGovernor:
    """The governor the Evaluator's judge client shares (one per URL, key, model, loop)."""
    return governor_for(
        base_url=config.base_url,
        api_key=None,
        model=config.model,
        rpm=config.rpm,
        tpm=config.tpm,
        max_concurrency=config.max_concurrency,
        margin=config.rate_margin,
    )


class TestCallerShare:
    async def test_default_tenant_is_the_calling_task(self) -> None:
        """Without ``tenant``, calls from one task share a tenant and calls from two
        tasks do not."""
        here = caller_share(None, 1.0)
        again = caller_share(None, 1.0)
        there = await asyncio.create_task(_share_in_task())
        assert here.tenant == again.tenant
        assert here.tenant != there.tenant

    def test_bad_weight_and_tenant_are_config_errors(self) -> None:
        """A bad weight or an unhashable tenant is a ConfigError naming the parameter."""
        with pytest.raises(ConfigError, match="`weight` must be a positive") as caught:
            caller_share("a", 0.0)
        assert (caught.value.option, caught.value.value) == ("weight", 0.0)
        with pytest.raises(ConfigError, match="`tenant` must be hashable") as bad:
            caller_share({"a": 1}, 1.0)  # type: ignore[arg-type]  # the wrong type is the test
        assert bad.value.option == "tenant"


async def _share_in_task() -> Share:
    return caller_share(None, 1.0)


class TestTenantBook:
    def test_tokens_map_to_their_chunk_share(self) -> None:
        """A token finds the share of the chunk whose range holds it; none after discard
        or outside every range."""
        book = TenantBook()
        a, b = Share("a"), Share("b")
        book.add(0, 8, a)
        book.add(8, 1, b)
        book.add(20, 4, None)
        assert [book.share_of(t) for t in (0, 7, 8)] == [a, a, b]
        assert book.share_of(9) is None and book.share_of(21) is None
        book.discard(0)
        assert book.share_of(3) is None and book.share_of(8) is b
        assert len(book) == 2


class TestFairSlots:
    async def test_waiting_tenants_alternate_and_cancel_leaves_nothing(self) -> None:
        """With the executor's slots full, a tenant that arrives later is admitted in
        turn with the one that queued first; a cancelled waiter takes no unit."""
        slots = FairSlots(lambda: 2)
        held = [await slots.acquire(None, 1), await slots.acquire(None, 1)]
        order: list[str] = []

        async def one(tenant: str) -> None:
            units = await slots.acquire(Share(tenant), 1)
            order.append(tenant)
            await release.wait()
            slots.release(units)

        release = asyncio.Event()
        early = [asyncio.create_task(one("early")) for _ in range(4)]
        await until(lambda: slots.waiting == 4)
        late = [asyncio.create_task(one("late")) for _ in range(2)]
        doomed = asyncio.create_task(one("doomed"))
        await until(lambda: slots.waiting == 7)
        doomed.cancel()
        await asyncio.gather(doomed, return_exceptions=True)
        assert slots.waiting == 6
        for units in held:
            slots.release(units)
        await until(lambda: len(order) == 2)
        release.set()
        await asyncio.gather(*early, *late)
        assert order[:4] == ["early", "late", "early", "late"]
        assert (slots.used, slots.waiting) == (0, 0)

    async def test_a_chunk_larger_than_the_capacity_is_admitted_alone(self) -> None:
        """A chunk of more calls than the gate holds takes the whole gate, never waits
        for ever."""
        slots = FairSlots(lambda: 4)
        units = await slots.acquire(Share("a"), 100)
        assert units == 4 and slots.used == 4
        slots.release(units)
        assert slots.used == 0

    async def test_a_chunk_is_admitted_into_the_room_left(self) -> None:
        """With 3 of 4 units held (calls held up behind a slow one), the next chunk of 4
        is admitted at once into the one unit left rather than waiting for the whole
        gate; a full gate makes the next one wait until units come back."""
        slots = FairSlots(lambda: 4)
        held = await slots.acquire(None, 3)
        assert await slots.acquire(None, 4) == 1 and slots.used == 4
        waiter = asyncio.create_task(slots.acquire(None, 4))
        await until(lambda: slots.waiting == 1)
        slots.release(2)
        assert await waiter == 2 and slots.used == 4
        slots.release(held - 2)

    async def test_an_idle_executor_admits_past_a_full_gate(self) -> None:
        """While the executor says it is idle (a worker free, nothing queued: the units
        in use are calls stuck behind a slow one), a waiting chunk is admitted though
        the gate is full; when it is not, the chunk waits."""
        idle = False
        slots = FairSlots(lambda: 2, lambda: idle)
        await slots.acquire(None, 2)
        waiter = asyncio.create_task(slots.acquire(None, 5))
        await until(lambda: slots.waiting == 1)
        slots.poke()
        assert not waiter.done()
        idle = True
        slots.poke()
        assert await waiter == 1 and slots.waiting == 0


class TestSubmissionProgress:
    def test_units_and_busy_calls_come_back_as_calls_finish(self) -> None:
        """A submit of 10 calls holding 4 units: as the executor reports calls done, the
        units go back in proportion (rounded up: the last unit with the last call) and
        the chunk's busy count goes down call for call; closing returns the rest."""
        from evaluator._pipeline._flow import _Busy, _Flight, _Submission

        slots = FairSlots(lambda: 4)
        flight = _Flight()
        busy = _Busy(flight, 10)
        slots.used = 4
        submission = _Submission(slots, 4, 10, busy)
        submission(3)  # 7 left: ceil(4 * 7 / 10) = 3 units kept
        assert (slots.used, flight.busy) == (3, 7)
        submission(6)  # 1 left: 1 unit kept
        assert (slots.used, flight.busy) == (1, 1)
        submission.close()
        busy.expect(0)
        assert (slots.used, flight.busy) == (0, 0)


class TestTenantsOnOneEvaluator:
    async def test_a_small_job_is_not_queued_behind_a_large_one(self, sim: Simulator) -> None:
        """A 10-example job started while a 400-example job saturates the model budget
        finishes within a few dozen requests, not behind the large job's backlog: one
        tenant for both (FIFO) measured 139 requests sent meanwhile, fair shares 29 (two
        per small example, plus the large job's calls that held the small chunk's slots)."""
        config = judge_model(sim, rpm=3000)
        async with Evaluator(JUDGE, models=Models(metric=config)) as ev:
            large = asyncio.create_task(ev.evaluate_many(None, judged(400, "L"), tenant="large"))
            await until(lambda: governor(config).statistics().waiting >= 32)
            start = sim.statistics().requests
            small = await ev.evaluate_many(None, judged(10, "S"), tenant="small")
            sent_meanwhile = sim.statistics().requests - start
            assert not large.done()
            large.cancel()
            await asyncio.gather(large, return_exceptions=True)
        assert [r.example_id for r in small] == [f"S{i}" for i in range(10)]
        assert all(r.error is None for r in small)
        assert sent_meanwhile <= 60, sent_meanwhile


SLOW_METRIC = """
import os, time
from pathlib import Path

def score(input, output, expected=None):
    if input.get("slow"):
        (Path(input["folder"]) / f"running-{os.getpid()}").write_text("")
        time.sleep(30)
    return 1.0, {"feedback": "ok"}
"""


def running_pids(folder: Path) -> list[int]:
    """The worker processes the slow metric says are running a call."""
    return [int(p.name.split("-")[1]) for p in folder.glob("running-*")]


@pytest.mark.slow
class TestWeightsOnOneEvaluator:
    async def test_backlogged_tenants_share_results_by_weight(self, sim: Simulator) -> None:
        """Two callers that both keep the budget saturated, of weights 3 and 1, get about
        three results for every one (counted over 120 results once both are running;
        tolerance: a share of 0.65 to 0.85 for the weight-3 tenant, 0.75 expected)."""
        config = judge_model(sim, rpm=3000)
        async with Evaluator(JUDGE, models=Models(metric=config)) as ev:
            arrivals: list[str] = []

            async def consume(tenant: str, weight: float) -> None:
                rows = judged(2000, tenant)
                async for _ in ev.stream(None, rows, tenant=tenant, weight=weight):
                    arrivals.append(tenant)

            light = asyncio.create_task(consume("light", 1.0))
            await until(lambda: governor(config).statistics().waiting >= 32)
            heavy = asyncio.create_task(consume("heavy", 3.0))
            await until(lambda: arrivals.count("heavy") >= 30)
            start = len(arrivals)
            await until(lambda: len(arrivals) >= start + 120)
            window = arrivals[start : start + 120]
            for task in (light, heavy):
                task.cancel()
            await asyncio.gather(light, heavy, return_exceptions=True)
        share = window.count("heavy") / len(window)
        assert 0.65 <= share <= 0.85, share


class TestCancellingOneCaller:
    @pytest.mark.process
    async def test_cancelled_callers_process_calls_are_killed(self, tmp_path: Path) -> None:
        """A cancelled caller's running process calls are killed with their workers
        (counted, not as timeouts), so another caller's calls, queued behind them, run
        at once instead of after the 30 s calls; each of its examples gets one result."""
        path = tmp_path / "slow.py"
        path.write_text(SLOW_METRIC)
        slow = [
            Example(id=f"slow{i}", input={"slow": True, "folder": str(tmp_path)}, output=i)
            for i in range(2)
        ]
        quick = [Example(id=f"q{i}", input={}, output=i) for i in range(5)]
        async with Evaluator(path, workers=2, timeout=60) as ev:
            doomed = asyncio.create_task(ev.evaluate_many(None, slow))
            await until(lambda: len(running_pids(tmp_path)) == 2)
            pids = running_pids(tmp_path)
            kept = asyncio.create_task(ev.evaluate_many(None, quick))
            doomed.cancel()
            await asyncio.gather(doomed, return_exceptions=True)
            results = await asyncio.wait_for(kept, 20)  # the slow calls sleep 30 s
            stats = ev.statistics().metric
            await until(lambda: not any(psutil.pid_exists(pid) for pid in pids))
        assert [r.example_id for r in results] == [f"q{i}" for i in range(5)]
        assert all(r.error is None for r in results)
        assert (stats.killed_for_cancel, stats.timeouts) == (2, 0)

    async def test_cancelled_caller_stops_and_the_other_finishes_whole(
        self, sim: Simulator
    ) -> None:
        """Cancelling one caller's task stops its queued work (never sent), stops and
        counts its running thread calls and returns its governor reservations; the other
        caller gets exactly one ok result per example, and nothing stays in flight or
        queued."""
        config = judge_model(sim, rpm=3000)
        async with Evaluator(JUDGE, models=Models(metric=config)) as ev:
            doomed = asyncio.create_task(ev.evaluate_many(None, judged(500, "D")))
            await until(lambda: governor(config).statistics().waiting >= 32)
            kept = asyncio.create_task(ev.evaluate_many(None, judged(30, "K")))
            await until(lambda: sim.statistics().requests >= 20)
            doomed.cancel()
            with pytest.raises(asyncio.CancelledError):
                await doomed
            cancelled_calls = ev.statistics().metric.cancelled_calls
            results = await kept
            stats = governor(config).statistics()
            assert (stats.in_flight, stats.waiting, stats.tokens_reserved) == (0, 0, 0)
            assert ev.statistics().in_flight == 0
            sent = sim.statistics().requests
        assert sorted(r.example_id for r in results) == sorted(f"K{i}" for i in range(30))
        assert all(r.error is None for r in results)
        assert sent < 30 + 500 // 2  # most of the cancelled caller's calls were never sent
        assert cancelled_calls > 0  # its running thread calls were stopped and counted

    async def test_cancelled_stream_consumer_stops_its_producer(self, sim: Simulator) -> None:
        """A task consuming ``stream`` that is cancelled (a client that disconnected)
        stops the stream's work at once, without ``aclose``; another stream goes on."""
        config = judge_model(sim, rpm=3000)
        async with Evaluator(JUDGE, models=Models(metric=config)) as ev:
            first_seen = asyncio.Event()

            async def consume(prefix: str, n: int) -> list[Any]:
                got = []
                async for result in ev.stream(None, judged(n, prefix)):
                    got.append(result)
                    first_seen.set()
                return got

            gone = asyncio.create_task(consume("G", 400))
            await first_seen.wait()
            kept = asyncio.create_task(consume("K", 20))
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)
            # Its producer has unwound by the time the consumer's cancellation returns.
            assert len(ev._flow.streams) <= 1
            results = await kept
            await until(lambda: not ev._flow.streams)
            stats = governor(config).statistics()
            assert (stats.in_flight, stats.waiting) == (0, 0)
        assert sorted(r.example_id for r in results) == sorted(f"K{i}" for i in range(20))


ASYNC_METRIC = """
import asyncio

async def score(input, output, expected=None):
    for _ in range(input["steps"]):
        await asyncio.sleep(0)
    return 1.0, {"feedback": "ok"}
"""

job_specs = st.lists(
    st.tuples(
        st.integers(0, 80),  # examples
        st.sampled_from(["a", "b", None]),  # tenant (None: the calling task)
        st.sampled_from([0.5, 1.0, 3.0]),  # weight
        st.sampled_from(["many", "stream", "report"]),  # which call
    ),
    min_size=1,
    max_size=4,
)


class TestEveryCallerWhole:
    def test_concurrent_callers_each_get_one_result_per_example(self, tmp_path: Path) -> None:
        """Property: any mix of concurrent callers (sizes, shared or own tenants, weights,
        evaluate_many / stream / evaluate) each gets exactly one result per example (in
        input order for evaluate_many), and the gates end empty."""
        path = tmp_path / "m.py"
        path.write_text(ASYNC_METRIC)

        async def one(ev: Evaluator, spec: tuple[int, Any, float, str], k: int) -> list[Any]:
            n, tenant, weight, call = spec
            rows = [Example(id=f"{k}-{i}", input={"steps": i % 3}, output=i) for i in range(n)]
            if call == "many":
                results = await ev.evaluate_many(None, rows, tenant=tenant, weight=weight)
                return [r.example_id for r in results]
            if call == "stream":
                got = [r.example_id async for r in ev.stream(None, rows, tenant=tenant)]
                return sorted(got, key=lambda x: int(x.split("-")[1]))
            report = await ev.evaluate(None, rows, tenant=tenant, weight=weight)
            assert report.ok == report.n
            return [f"{k}-{i}" for i in range(report.n)]

        async def once(specs: list[tuple[int, Any, float, str]]) -> None:
            async with Evaluator(path, concurrency=8) as ev:
                got = await asyncio.gather(*(one(ev, spec, k) for k, spec in enumerate(specs)))
                slots = ev._flow.metric_slots
                assert (slots.used, slots.waiting, len(ev._flow.tenants)) == (0, 0, 0)
            for k, (spec, ids) in enumerate(zip(specs, got, strict=True)):
                assert ids == [f"{k}-{i}" for i in range(spec[0])]

        @settings(
            max_examples=15,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(job_specs)
        def prop(specs: list[tuple[int, Any, float, str]]) -> None:
            asyncio.run(once(specs))

        prop()
