"""The flow: chunk sizing, the source of examples, and the in-flight bound."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._loader import UserFunction, load_metric
from evaluator._data._dataset import Example
from evaluator._executors._base import ExecutorOptions
from evaluator._executors._factory import open_executor
from evaluator._models import ModelRouter
from evaluator._pipeline._flow import MAX_CHUNK, START_CHUNK, TARGET_CHUNK_S, Flow, Sizer, Source

EXACT = (Path(__file__).resolve().parents[1] / "sources" / "exact.py").read_text()


class TestSizer:
    def test_starts_small(self) -> None:
        """Before anything is measured, chunks are small, for latency."""
        assert Sizer().size == START_CHUNK

    def test_cheap_examples_grow_chunks_to_the_cap(self) -> None:
        """Examples of microseconds grow chunks up to the memory cap."""
        sizer = Sizer()
        for _ in range(5):
            sizer.observe(sizer.size, sizer.size * 2e-6, sizer.size)
        assert sizer.size == MAX_CHUNK

    def test_slow_examples_travel_alone(self) -> None:
        """Examples of a second each (a model call, say) go one per chunk."""
        sizer = Sizer()
        for _ in range(5):
            sizer.observe(4, 1.0, 16)
        assert sizer.size == 1

    def test_a_chunk_held_by_one_hang_halves_chunks_at_most(self) -> None:
        """Among chunks of cheap examples, one that waited a second for a hang of its own
        halves the chunk size at most (it used to shrink chunks to a few examples, and
        the in-flight bound with them); cheap chunks after it restore the size."""
        sizer = Sizer()
        for _ in range(5):
            sizer.observe(256, 0.02, 1024)
        before = sizer.size
        sizer.observe(256, 1.0, 1024)
        assert before // 2 - 1 <= sizer.size < before
        for _ in range(3):
            sizer.observe(256, 0.02, 1024)
        assert sizer.size == before

    def test_chunks_ending_in_a_burst_are_not_taken_for_speed(self) -> None:
        """Chunks of slow calls (300 ms model calls, 128 in flight) end in bursts, a
        microsecond apart: the completion rate never lowers the estimate, so chunks stay
        as the wall time says (they grew to tens of examples, and the stages stopped
        overlapping)."""
        steady, bursty = Sizer(), Sizer()
        for _ in range(20):
            steady.observe(1, 0.6, 128)
            bursty.observe(1, 0.6, 128, gap=1e-6)
        assert bursty.size == steady.size == int(TARGET_CHUNK_S / (0.6 / 128))

    def test_slow_work_is_followed_within_a_few_chunks(self) -> None:
        """A workload that really turns slow (cheap examples, then model calls of a second)
        reaches one example per chunk within a few dozen chunks."""
        sizer = Sizer()
        for _ in range(5):
            sizer.observe(256, 0.02, 1024)
        for _ in range(30):
            sizer.observe(sizer.size, 1.0 * sizer.size / 4, 4)
        assert sizer.size == 1

    def test_waiting_behind_other_chunks_is_not_an_examples_cost(self) -> None:
        """The same chunk latency with more examples in flight means a faster engine, so
        chunks grow: a chunk's wait behind the others is not counted as its cost (which
        used to shrink chunks to one example as more of them ran at once)."""
        alone, crowded = Sizer(), Sizer()
        for _ in range(10):
            alone.observe(8, 0.05, 8)
            crowded.observe(8, 0.05, 512)
        assert alone.size == 3  # 50 ms for 8 examples: about 20 ms is 3 of them
        assert crowded.size == int(TARGET_CHUNK_S / (0.05 / 512))


class TestSource:
    async def test_lists_generators_and_rows(self) -> None:
        """Examples or row dicts, from a list or a generator, come out in chunks with
        their positions; rows become Examples (an id defaults to the position)."""
        rows: list[Any] = [Example(id="a", input={}), {"input": {"q": 1}}, {"id": 9, "input": {}}]
        source = Source(iter(rows))
        first = await source.take(2)
        assert [ex.id for ex in first] == ["a", 1] and source.position == 2
        assert [ex.id for ex in await source.take(5)] == [9]
        assert await source.take(5) == [] and source.position == 3

    async def test_async_iterables(self) -> None:
        """An async iterable is pulled chunk by chunk."""

        async def rows() -> AsyncIterator[dict[str, Any]]:
            for i in range(5):
                yield {"id": i, "input": {}}

        source = Source(rows())
        assert [ex.id for ex in await source.take(3)] == [0, 1, 2]
        assert [ex.id for ex in await source.take(3)] == [3, 4]

    def test_not_iterable(self) -> None:
        """Something that is not iterable is refused, saying what is expected."""
        with pytest.raises(TypeError, match="iterable or async iterable"):
            Source(42)  # type: ignore[arg-type]


@pytest.fixture
def fn(tmp_path: Path) -> UserFunction:
    path = tmp_path / "exact.py"
    path.write_text(EXACT)
    return load_metric(path)


class TestBounds:
    @pytest.mark.parametrize(
        ("execution", "options", "parallelism"),
        [
            ("thread", {"workers": 5}, 5),
            ("inline", {}, 1),
            ("process", {}, os.cpu_count()),
            ("process", {"workers": 3}, 3),
        ],
    )
    async def test_the_bound_keeps_every_slot_of_the_executor_busy(
        self, fn: UserFunction, execution: str, options: dict[str, Any], parallelism: int
    ) -> None:
        """The in-flight bound is read from the executor's own parallelism (the real
        number of workers, never a guess from its kind), and grows with the chunk size."""
        executor = open_executor(fn, "score", execution, ExecutorOptions(timeout=5, **options))
        assert executor.parallelism == parallelism
        flow = Flow(0.0, None)
        flow.attach(executor, None, ModelRouter(None))
        assert flow.slots() == parallelism
        assert flow.limit(1) == max(2 * parallelism, 3)
        assert flow.limit(4096) == 3 * 4096

    def test_a_backlog_the_executor_asks_for_is_kept_in_flight(self, fn: UserFunction) -> None:
        """A Ray stage asks for seconds of queued work (``backlog_s``: its batches' round
        trips to the nodes hide behind it); the bound holds that much work at the engine's
        measured rate, and local executors ask for none (their bound is unchanged)."""
        ray = open_executor(fn, "score", "ray", ExecutorOptions(timeout=5))
        local = open_executor(fn, "score", "process", ExecutorOptions(timeout=5, workers=2))
        assert ray.backlog_s > 0 and local.backlog_s == 0
        for executor, expected in ((ray, int(ray.backlog_s / 0.001)), (local, 3 * 8)):
            flow = Flow(0.0, None)
            flow.attach(executor, None, ModelRouter(None))
            assert flow.limit(8) == max(2 * executor.parallelism, 3 * 8)  # rate unknown yet
            flow.sizer.per_example = 0.001  # a thousand examples a second
            assert flow.limit(8) == max(expected, 2 * executor.parallelism)
            # The stage's gate lets the backlog into the executor too (at three chunks it
            # held a Ray stage's batches to one or two chunks' calls).
            assert flow.capacity(executor) == max(
                executor.parallelism, 3 * flow.chunk_size(), expected if executor is ray else 0
            )

    def test_concurrency_bounds_both(self, fn: UserFunction) -> None:
        """With `concurrency`, chunks and examples in flight stay within it."""
        flow = Flow(0.0, 64)
        flow.attach(
            open_executor(fn, "score", "inline", ExecutorOptions(timeout=5)),
            None,
            ModelRouter(None),
        )
        flow.sizer.size = MAX_CHUNK
        assert flow.chunk_size() == 64 and flow.limit(64) == 64


class TestColdStart:
    async def test_chunks_that_waited_out_the_start_do_not_size_the_next(
        self, fn: UserFunction
    ) -> None:
        """A chunk started before any chunk ended waits out the executors' start (worker
        processes importing the user's file): its second is not the examples' cost, so
        the chunk size stays where it was; the chunks after it size the next."""
        ticks = iter([0, 1_000_000_000, 1_000_000_000, 1_000_010_000])  # 1 s, then 10 µs
        flow = Flow(0.0, None, clock=lambda: next(ticks))
        async with open_executor(fn, "score", "inline", ExecutorOptions(timeout=5)) as ex:
            router = ModelRouter(None)
            flow.attach(ex, None, router)
            examples = [Example(id=i, input={}, output="a") for i in range(3)]
            await flow.chunk(None, examples, 3)  # 1 s for 3: the start
            assert flow.sizer.per_example is None and flow.sizer.size == START_CHUNK
            await flow.chunk(None, examples, 3)  # 10 µs for 3: cheap calls
            assert flow.sizer.size > START_CHUNK

    @pytest.mark.process
    async def test_chunks_grow_from_the_start_rather_than_multiply(self, fn: UserFunction) -> None:
        """Cheap calls on worker processes: each chunk is at most twice the one before,
        and the start makes a few chunks of the starting size, not thousands (an idle
        stage, idle only because the chunks just let in had not reached it yet, let in
        16,384 examples beyond the bound before any chunk was measured: ~2,000 of 8)."""
        sizes: list[int] = []

        class Recording(Flow):
            async def chunk(self, artifact: Any, examples: list[Example], *a: Any, **k: Any) -> Any:
                sizes.append(len(examples))
                return await super().chunk(artifact, examples, *a, **k)

        flow = Recording(0.0, None)
        options = ExecutorOptions(timeout=5, workers=2)
        async with open_executor(fn, "score", "process", options) as ex:
            flow.attach(ex, None, ModelRouter(None))
            rows = [Example(id=i, input={}, output="a") for i in range(20_000)]
            results = await flow.collect(None, rows)
        assert [r.example_id for r in results] == list(range(20_000))
        assert all(after <= 2 * before for before, after in pairwise(sizes))
        assert sizes.count(START_CHUNK) <= 32, sizes[:40]


HANG_AT_100 = """
import time

def score(input, output, expected=None):
    if input["i"] == 100:
        time.sleep(60)
    return 1.0, {"feedback": "ok"}
"""


class TestSlowCalls:
    @pytest.mark.process
    async def test_a_hang_holds_up_only_its_own_chunk(self, tmp_path: Path) -> None:
        """With one worker process and example 100 asleep past its 4 s timeout, the other
        2,000 examples do not wait for it: at least 1,900 of their results stream out
        before its own (its worker is stalled, so a stand-in takes the work, and the
        flow does not count the finished examples of its chunk as work in progress).
        It gets its metric_timeout; every example one result."""
        from evaluator._executors._process._forkserver import fork_supported
        from evaluator._pipeline import Evaluator

        if not fork_supported():
            pytest.skip("stand-ins are forked by the fork server (Linux)")
        path = tmp_path / "metric.py"
        path.write_text(HANG_AT_100)
        rows = [Example(id=i, input={"i": i}, output="x") for i in range(2001)]
        order: list[Any] = []
        async with (
            Evaluator(path, execution="process", workers=1, timeout=4) as ev,
            ev.stream(None, rows) as stream,
        ):
            async for result in stream:
                order.append(result)
        assert sorted(r.example_id for r in order) == list(range(2001))
        hung = next(i for i, r in enumerate(order) if r.example_id == 100)
        assert order[hung].error is not None and order[hung].error.kind == "metric_timeout"
        assert hung >= 1900
        assert all(r.ok for r in order if r.example_id != 100)
