"""The streaming pipeline: Evaluator, its executors' choice, results, cancellation."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import hypothesis.strategies as st
import psutil
import pytest
from hypothesis import HealthCheck, given, settings

from evaluator._call._loader import load_metric
from evaluator._data._dataset import Example
from evaluator._exceptions import ConfigError, DatasetError
from evaluator._pipeline import Evaluator, choose_execution
from tests._helpers import PROCESS, write

# User files shared by these tests, kept as real files in sources/ (see its README).
SOURCES = Path(__file__).resolve().parents[1] / "sources"
BEHAVIOURS = (SOURCES / "behaviours.py").read_text()  # behaviour chosen by input["kind"]
ASYNC_BEHAVIOURS = (SOURCES / "async_behaviours.py").read_text()
EXACT = (SOURCES / "exact.py").read_text()
PROGRAM = (SOURCES / "program.py").read_text()

EXPECTED_KIND = {
    "ok": None,
    "raise": "metric_error",
    "slow": None,
    "invalid": "invalid_return",
    "crash": "worker_crash",
    "hang": "metric_timeout",
}


def examples(kinds: list[str], **extra: Any) -> list[Example]:
    return [
        Example(
            id=f"e{i}",
            input={"kind": kind, "n": i, **extra},
            expected={"label": "a"},
            output="a" if i % 2 else "b",
        )
        for i, kind in enumerate(kinds)
    ]


def check_one_each(kinds: list[str], results: list[Any], failure: float = 0.0) -> None:
    assert [r.example_id for r in results] == [f"e{i}" for i in range(len(kinds))]
    for i, (kind, result) in enumerate(zip(kinds, results, strict=True)):
        want = EXPECTED_KIND[kind]
        assert (result.error.kind if result.error else None) == want, (i, kind, result)
        if want is not None:
            assert result.score == failure and result.feedback == result.error.message
        elif kind == "ok":
            assert result.score == (1.0 if i % 2 else 0.0)


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("skynet-")]


def release(path: Path) -> None:
    from evaluator._call._loader import _module_name

    module = sys.modules.get(_module_name(path.resolve()))
    event = getattr(module, "RELEASE", None)
    if event is not None:
        event.set()


@pytest.fixture
def metric(tmp_path: Path) -> Iterator[Path]:
    path = write(tmp_path, "metric.py", BEHAVIOURS)
    yield path
    release(path)


class TestConfiguration:
    def test_timeout_out_of_range_is_refused(self, tmp_path: Path) -> None:
        """A timeout above 600 s names the option and the value."""
        path = write(tmp_path, "m.py", EXACT)
        with pytest.raises(ConfigError) as info:
            Evaluator(path, timeout=900)
        assert (
            str(info.value) == "`timeout` must be greater than 0 and at most 600 seconds, got 900"
        )
        with pytest.raises(ConfigError, match="greater than 0 and at most 600"):
            Evaluator(path, timeout=0)

    def test_automatic_choice_never_uses_the_loop_thread_for_sync(self, tmp_path: Path) -> None:
        """async def -> async; sync with skynet.llm -> thread; other sync -> process."""
        sync = load_metric(write(tmp_path, "s.py", EXACT))
        judge = load_metric(
            write(tmp_path, "j.py", "from skynet import llm\ndef score(i, o):\n    return llm(o)\n")
        )
        asynchronous = load_metric(write(tmp_path, "a.py", ASYNC_BEHAVIOURS))
        assert choose_execution(sync, None, option="execution").kind == "process"
        assert choose_execution(judge, None, option="execution").kind == "thread"
        assert choose_execution(asynchronous, None, option="execution").kind == "async"
        assert choose_execution(sync, "inline", option="execution").kind == "inline"
        with pytest.raises(ConfigError, match="plain `def`"):
            choose_execution(sync, "async", option="execution")
        with pytest.raises(ConfigError, match="async def"):
            choose_execution(asynchronous, "thread", option="execution")

    def test_module_execution_overrides_the_automatic_choice(self, tmp_path: Path) -> None:
        """A module-level EXECUTION wins over the automatic choice; the option over both."""
        fn = load_metric(write(tmp_path, "m.py", 'EXECUTION = "thread"\n' + EXACT))
        assert Evaluator(fn).metric_execution == "thread"
        assert Evaluator(fn, execution="inline").metric_execution == "inline"

    async def test_closed_evaluator_refuses_reuse(self, tmp_path: Path) -> None:
        """An Evaluator opens once; after close every call and reopening is refused."""
        ev = Evaluator(write(tmp_path, "m.py", EXACT), execution="inline")
        async with ev:
            pass
        with pytest.raises(RuntimeError, match="closed"):
            await ev.evaluate_many(None, examples(["ok"]))
        with pytest.raises(RuntimeError, match="cannot be reused"):
            async with ev:
                pass


class TestEvaluateMany:
    @pytest.mark.parametrize("execution", ["inline", "thread", PROCESS])
    async def test_one_result_per_example_in_order(self, metric: Path, execution: str) -> None:
        """Many chunks through each executor: one result per example, in input order."""
        kinds = (["ok", "raise", "slow", "invalid"] * 300)[:1000]
        async with Evaluator(metric, execution=execution, workers=2, failure_score=-1) as ev:
            results = await ev.evaluate_many(None, examples(kinds))
            stats = ev.statistics()
        check_one_each(kinds, results, failure=-1.0)
        assert stats.examples == 1000 and stats.errors == 500
        assert results[2].scores == {"part": 0.25}

    async def test_results_are_not_tracked_by_the_cyclic_collector(self, metric: Path) -> None:
        """Results, with their dict fields, are invisible to the cyclic garbage collector
        (a run holds many), and an evaluation leaves no per-example tracked objects."""
        import gc

        kinds = (["ok", "raise", "invalid"] * 400)[:1200]
        rows = examples(kinds)
        async with Evaluator(metric, execution="inline") as ev:
            await ev.evaluate_many(None, rows[:10])
            gc.collect()
            before = len(gc.get_objects())
            results = await ev.evaluate_many(None, rows)
            gc.collect()
            grown = len(gc.get_objects()) - before
        check_one_each(kinds, results)
        assert not any(gc.is_tracked(r) for r in results)
        assert not any(gc.is_tracked(ex) for ex in rows)
        assert grown < 100  # the results list and a few per-run objects, not per example

    async def test_async_metric(self, tmp_path: Path) -> None:
        """An async def metric is awaited on the loop, one result per example in order."""
        kinds = ["ok", "raise", "slow", "invalid"] * 25
        async with Evaluator(write(tmp_path, "a.py", ASYNC_BEHAVIOURS)) as ev:
            assert ev.metric_execution == "async"
            results = await ev.evaluate_many(None, examples(kinds))
        check_one_each(kinds, results)

    async def test_rows_and_async_iterables(self, tmp_path: Path) -> None:
        """Canonical row dicts and async iterables are accepted like Example lists."""
        rows = [
            {"id": i, "input": {"q": i}, "expected": {"label": "x"}, "output": "x"}
            for i in range(50)
        ]

        async def agen() -> AsyncIterator[dict[str, Any]]:
            for row in rows:
                yield row

        async with Evaluator(write(tmp_path, "m.py", EXACT), execution="inline") as ev:
            from_rows = await ev.evaluate_many(None, rows)
            from_async = await ev.evaluate_many(None, agen())
        assert [r.example_id for r in from_rows] == list(range(50))
        assert [r.score for r in from_async] == [1.0] * 50

    async def test_bad_row_raises_dataset_error(self, tmp_path: Path) -> None:
        """A malformed row raises DatasetError itself, not wrapped in an exception group."""
        rows: list[Any] = [{"input": {"q": 1}}] * 20 + [{"question": "no input"}]
        async with Evaluator(write(tmp_path, "m.py", EXACT), execution="inline") as ev:
            with pytest.raises(DatasetError, match="no 'input' object"):
                await ev.evaluate_many(None, iter(rows))

    async def test_missing_output_is_that_examples_error(self, tmp_path: Path) -> None:
        """Score-only: an example without an output gets missing_output; the rest score."""
        rows = [
            {"id": "a", "input": {}, "expected": {"label": "x"}, "output": "x"},
            {"id": "b", "input": {}, "expected": {"label": "x"}},
        ]
        async with Evaluator(write(tmp_path, "m.py", EXACT), execution="inline") as ev:
            first, second = await ev.evaluate_many(None, rows)
        assert first.ok and first.score == 1.0
        assert second.error is not None and second.error.kind == "missing_output"
        assert "'b'" in second.error.message and "--program" in second.error.message
        assert first.observation.duration_ms is None and first.observation.cost_usd is None
        assert "score-only" in " ".join(first.observation.notes)

    async def test_program_stage(self, tmp_path: Path) -> None:
        """run(artifact, input) feeds score; program errors and timeouts are per example,
        and the engine measures the program's time (tolerance: >= 20 ms for a 20 ms sleep)."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(
            tmp_path,
            "m.py",
            "from skynet import observation\n"
            "def score(i, o, e=None):\n"
            "    obs = observation()\n"
            "    return 1.0, {'feedback': o, 'ms': obs.duration_ms, 'cost': obs.cost_usd}\n",
        )
        rows = [
            {"id": 0, "input": {"n": 0}},
            {"id": 1, "input": {"n": 1, "program": "raise"}},
            {"id": 2, "input": {"n": 2, "program": "hang", "hang_s": 3}},
            {"id": 3, "input": {"n": 3, "program": "slow"}},
        ]
        async with Evaluator(
            metric, program, program_timeout=0.5, execution="inline", program_execution="thread"
        ) as ev:
            results = await ev.evaluate_many("v1", rows)
        ok, raised, hung, slow = results
        assert ok.feedback == "v1:0" and ok.output == "v1:0"
        assert ok.extra["cost"] == 0.0 and ok.extra["ms"] == ok.observation.duration_ms
        assert raised.error is not None and raised.error.kind == "program_error"
        assert "program failed" in raised.feedback
        assert hung.error is not None and hung.error.kind == "program_timeout"
        assert slow.observation.duration_ms is not None and slow.observation.duration_ms >= 20

    async def test_two_evaluators_and_concurrent_calls(self, tmp_path: Path) -> None:
        """Two Evaluators and concurrent evaluate_many calls on each share one loop."""
        exact = write(tmp_path, "m.py", EXACT)
        got: dict[tuple[int, int], list[Any]] = {}
        async with (
            Evaluator(exact, execution="inline") as one,
            Evaluator(exact, execution="thread", workers=2) as two,
        ):

            async def call(k: int, ev: Evaluator, n: int) -> None:
                rows = [
                    Example(id=i, input={}, expected={"label": "a"}, output="a" if i % 3 else "b")
                    for i in range(n)
                ]
                got[(k, n)] = await ev.evaluate_many(None, rows)

            async with anyio.create_task_group() as tg:
                for k, ev in enumerate((one, two)):
                    for n in (3, 50, 2000):
                        tg.start_soon(call, k, ev, n)
        for (_, n), results in got.items():
            assert [r.example_id for r in results] == list(range(n))
            assert [r.score for r in results] == [0.0 if i % 3 == 0 else 1.0 for i in range(n)]


class TestProperty:
    @pytest.mark.parametrize("execution", ["inline", "thread", "async", PROCESS])
    def test_every_example_yields_exactly_one_result(self, tmp_path: Path, execution: str) -> None:
        """Whatever the mix of ok, raising, slow, invalid (and, in processes, crashing)
        calls, every example yields exactly one result, with the right kind."""
        source = ASYNC_BEHAVIOURS if execution == "async" else BEHAVIOURS
        path = write(tmp_path, f"m_{execution}.py", source)
        pool = ["ok", "raise", "slow", "invalid"] + (["crash"] if execution == "process" else [])

        async def once(ev: Evaluator, kinds: list[str]) -> None:
            results = await ev.evaluate_many(None, examples(kinds))
            streamed = [r async for r in ev.stream(None, examples(kinds))]
            check_one_each(kinds, results)
            assert sorted(r.example_id for r in streamed) == sorted(
                f"e{i}" for i in range(len(kinds))
            )

        async def main() -> None:
            # One Evaluator for every example (its pools outlive crashes and timeouts);
            # hypothesis drives it from a thread, each example a call on its loop.
            loop = asyncio.get_running_loop()
            async with Evaluator(path, execution=execution, workers=2) as ev:

                @settings(
                    max_examples=8 if execution == "process" else 25,
                    deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture],
                )
                @given(st.lists(st.sampled_from(pool), max_size=30))
                def prop(kinds: list[str]) -> None:
                    asyncio.run_coroutine_threadsafe(once(ev, kinds), loop).result(timeout=120)

                await asyncio.to_thread(prop)

        asyncio.run(main())


class TestTimeoutsAndCleanup:
    @pytest.mark.parametrize("execution", ["inline", "thread", "async", PROCESS])
    async def test_hung_metric_times_out_and_nothing_outlives(
        self, tmp_path: Path, execution: str
    ) -> None:
        """A hung metric gets metric_timeout at the timeout, the run goes on, and after the
        Evaluator closes no process or working thread of ours is left (an abandoned thread
        is a daemon and ends when its call does). Tolerance: timeout 0.5 s, done < 6 s
        (worker start-ups included on a loaded machine) where waiting out the hang takes
        10 s."""
        source = ASYNC_BEHAVIOURS if execution == "async" else BEHAVIOURS
        path = write(tmp_path, "m.py", source)
        kinds = ["ok", "hang", "ok", "slow"] * 2
        me = psutil.Process()
        earlier = set(our_threads())  # an earlier test's abandoned call may still be running
        try:
            started = time.perf_counter()
            async with Evaluator(path, timeout=0.5, execution=execution, workers=2) as ev:
                results = await ev.evaluate_many(None, examples(kinds, hang_s=10))
                abandoned = ev.statistics().abandoned_threads
            elapsed = time.perf_counter() - started
            check_one_each(kinds, results)
            assert "0.5 s" in results[1].error.message  # type: ignore[union-attr]
            assert elapsed < 6
            assert me.children(recursive=True) == []
            left = [t for t in our_threads() if t not in earlier]
            assert all(t.daemon for t in left)
            assert len(left) <= abandoned
            if execution in ("inline", "thread"):
                assert abandoned >= 1
        finally:
            release(path)
        for thread in our_threads():
            thread.join(5)
        assert our_threads() == []

    @pytest.mark.parametrize("execution", ["inline", PROCESS, "async"])
    async def test_cancel_mid_flight(self, tmp_path: Path, execution: str) -> None:
        """Cancelling evaluate_many returns promptly (< 1 s), re-raises the cancellation,
        leaves no task of ours and, once closed, no child process."""
        source = ASYNC_BEHAVIOURS if execution == "async" else BEHAVIOURS
        path = write(tmp_path, "m.py", source)
        # Enough 2 ms calls to outlast 0.3 s: the async executor runs 256 at once, so it
        # gets through 5000 of them in well under 0.3 s.
        kinds = ["slow"] * (50_000 if execution == "async" else 5000)
        before = asyncio.all_tasks()
        try:
            async with Evaluator(path, execution=execution, workers=2) as ev:
                started = time.perf_counter()
                with anyio.move_on_after(0.3) as scope:
                    await ev.evaluate_many(None, examples(kinds))
                assert scope.cancelled_caught
                assert time.perf_counter() - started < 1.3
                # The executors' own helpers may live as long as the Evaluator; nothing
                # of the cancelled evaluation may.
                left = {t.get_coro().__qualname__ for t in asyncio.all_tasks() - before}  # type: ignore[union-attr]
                assert not {q for q in left if "Evaluator" in q or "evaluate" in q}, left
                assert ev.statistics().in_flight == 0
            assert asyncio.all_tasks() == before
            assert psutil.Process().children(recursive=True) == []
        finally:
            release(path)

    async def test_cancellation_is_re_raised(self, tmp_path: Path) -> None:
        """A cancelled evaluate_many raises CancelledError to its caller (not swallowed)."""
        path = write(tmp_path, "m.py", BEHAVIOURS)
        try:
            async with Evaluator(path, execution="thread", workers=2) as ev:
                task = asyncio.create_task(ev.evaluate_many(None, examples(["slow"] * 2000)))
                await asyncio.sleep(0)
                # Poll: the state changes in worker threads, which offer nothing to await.
                while ev.statistics().in_flight == 0:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
        finally:
            release(path)


async def _pull_slowly(ev: Evaluator, *, stop: int, every: int, pause: float) -> tuple[int, int]:
    """Stream endless examples, pausing ``pause`` s every ``every`` results, until ``stop``
    results: how many examples the engine pulled, and how many results were seen."""
    pulled = 0

    def rows() -> Any:
        nonlocal pulled
        for i in range(10**9):
            pulled += 1
            yield Example(id=i, input={}, expected={"label": "a"}, output="a")

    seen = 0
    async with ev.stream(None, rows()) as stream:
        async for _ in stream:
            seen += 1
            if seen % every == 0:
                await asyncio.sleep(pause)
            if seen == stop:
                break
    return pulled, seen


class TestStream:
    async def test_stream_yields_every_result_once(self, tmp_path: Path) -> None:
        """stream() yields each example's result once, from a lazy generator."""
        path = write(tmp_path, "m.py", EXACT)
        rows = (Example(id=i, input={}, expected={"label": "a"}, output="a") for i in range(5000))
        async with Evaluator(path, execution="inline") as ev:
            ids = [r.example_id async for r in ev.stream(None, rows)]
        assert sorted(ids) == list(range(5000))

    async def test_early_exit_releases_the_producer(self, tmp_path: Path) -> None:
        """Leaving `async with ev.stream(...)` early stops its producer at once."""
        path = write(tmp_path, "m.py", EXACT)
        rows = (Example(id=i, input={}, expected={"label": "a"}, output="a") for i in range(10**9))
        async with Evaluator(path, execution="inline") as ev:
            before = asyncio.all_tasks()
            async with ev.stream(None, rows) as stream:
                async for result in stream:
                    if result.example_id >= 100:
                        break
            assert asyncio.all_tasks() <= before
            assert ev._flow.streams == set()

    async def test_memory_is_bounded(self, tmp_path: Path) -> None:
        """A slow consumer holds up the producer: examples in flight stay bounded."""
        path = write(tmp_path, "m.py", EXACT)
        async with Evaluator(path, execution="inline", concurrency=64) as ev:
            pulled, seen = await _pull_slowly(ev, stop=2000, every=50, pause=0.001)
        # 64 in flight (queued results included) plus the chunk being consumed.
        assert pulled - seen <= 64 * 6

    async def test_a_slow_consumer_holds_up_the_producer_without_concurrency(
        self, tmp_path: Path
    ) -> None:
        """Without `concurrency`, chunks waiting for a slow consumer still count as work
        in flight: the producer stays within the in-flight bound (three of the largest
        chunks, one more dispatched as the bound frees, the stream's queue of two and the
        one being consumed), not the larger allowance for finished examples held up by
        a straggler of their chunk (``MAX_HELD``)."""
        from evaluator._pipeline._flow import MAX_CHUNK, MAX_HELD

        # An async metric: its executor reports each call done as it ends.
        path = write(tmp_path, "m.py", "async " + EXACT.lstrip())
        async with Evaluator(path, execution="async") as ev:
            pulled, seen = await _pull_slowly(ev, stop=40_000, every=1000, pause=0.01)
        assert pulled - seen <= 7 * MAX_CHUNK < 6 * MAX_CHUNK + MAX_HELD


class TestHosts:
    def test_inside_a_host_application_loop(self, tmp_path: Path) -> None:
        """An Evaluator opened inside a host's running loop, beside the host's own tasks."""
        path = write(tmp_path, "m.py", EXACT)

        async def host() -> list[float]:
            ticks = 0
            stop = asyncio.Event()

            async def heartbeat() -> None:
                nonlocal ticks
                while not stop.is_set():
                    ticks += 1
                    await asyncio.sleep(0.001)

            beat = asyncio.create_task(heartbeat())
            rows = [
                Example(id=i, input={}, expected={"label": "a"}, output="a") for i in range(20000)
            ]
            async with Evaluator(path, execution="inline") as ev:
                results = await ev.evaluate_many(None, rows)
            stop.set()
            await beat
            assert ticks > 0
            return [r.score for r in results]

        assert asyncio.run(host()) == [1.0] * 20000

    def test_under_uvloop(self, tmp_path: Path) -> None:
        """The same evaluation runs under uvloop, in the thread and async executors."""
        uvloop = pytest.importorskip("uvloop")
        path = write(tmp_path, "m.py", BEHAVIOURS)
        apath = write(tmp_path, "a.py", ASYNC_BEHAVIOURS)
        kinds = ["ok", "raise", "slow", "invalid"] * 10

        async def main() -> None:
            for p, execution in ((path, "thread"), (apath, "async"), (path, "process")):
                async with Evaluator(p, execution=execution, workers=2) as ev:
                    check_one_each(kinds, await ev.evaluate_many(None, examples(kinds)))

        uvloop.run(main())


class TestEvaluate:
    async def test_report_counts(self, metric: Path) -> None:
        """evaluate() returns a Report with explicit denominators and named-score means."""
        kinds = ["ok", "raise", "slow", "invalid"] * 5
        async with Evaluator(metric, execution="inline") as ev:
            report = await ev.evaluate(None, examples(kinds))
        assert report.n == 20 and report.ok == 10
        assert report.errors == {"metric_error": 5, "invalid_return": 5}
        # ok examples: 5 "ok" (ids e0, e4, ... all even -> output "b" -> 0.0) + 5 slow at 0.5
        assert report.mean_score_ok == pytest.approx(0.25)
        assert report.mean_score == pytest.approx(2.5 / 20)
        assert report.scores["part"].count == 5
        assert report.program_cost_usd is None


JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    verdict = llm("Answer PASS or FAIL.", input=f"Answer: {output}\\nExpected: {expected['label']}")
    ok = verdict.startswith("PASS")
    return (1.0 if ok else 0.0), {"feedback": verdict}
"""

LLM_PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["q"])
"""


class TestModels:
    async def test_judge_and_program_calls_are_metered(self, tmp_path: Path) -> None:
        """Program calls go to the program model and fill the Observation (tokens, cost,
        calls); metric calls go to the metric model and fill Result.judge; an unknown
        price leaves the cost unmeasured with a note, never a silent zero."""
        from evaluator._models import Models
        from llm_client import ModelConfig, Simulator, SimulatorConfig

        async with Simulator(SimulatorConfig()) as sim:
            models = Models(
                program=ModelConfig(
                    model="sim-program",
                    base_url=sim.base_url,
                    api_key_env=None,
                    price_input=1.0,
                    price_output=2.0,
                ),
                metric=ModelConfig(
                    model="sim-judge-unpriced", base_url=sim.base_url, api_key_env=None
                ),
            )
            rows = [
                {"id": i, "input": {"q": f"question {i}"}, "expected": {"label": "x"}}
                for i in range(6)
            ]
            async with Evaluator(
                write(tmp_path, "judge.py", JUDGE),
                write(tmp_path, "program.py", LLM_PROGRAM),
                models=models,
            ) as ev:
                assert (ev.metric_execution, ev.program_execution) == ("thread", "thread")
                results = await ev.evaluate_many("Answer briefly.", rows)
                stats = ev.statistics().models
        assert all(r.ok for r in results), results
        for r in results:
            assert r.observation.llm_calls == 1 and r.observation.input_tokens > 0
            assert r.observation.cost_usd is not None and r.observation.cost_usd > 0
            assert r.judge.llm_calls == 1 and r.judge.cost_usd is None
            assert any("cost not measured" in note for note in r.judge.notes)
            assert r.feedback.startswith(("PASS", "FAIL"))
        assert stats.program_calls == 6 and stats.judge_calls == 6

    async def test_llm_without_a_model_is_a_clear_metric_error(self, tmp_path: Path) -> None:
        """A metric that calls llm() with no model configured gets a metric_error saying
        that there is no model (not a hang, not a crash)."""
        rows = [{"id": 0, "input": {}, "expected": {"label": "x"}, "output": "x"}]
        async with Evaluator(write(tmp_path, "judge.py", JUDGE)) as ev:
            (result,) = await ev.evaluate_many(None, rows)
        assert result.error is not None and result.error.kind == "metric_error"
        assert "skynet.llm() has no model" in result.error.message
