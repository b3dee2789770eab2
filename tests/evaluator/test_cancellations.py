"""Cancellation at each phase of an executor's life, then a check that the state is whole.

After httpcore's ``tests/test_cancellations.py``: each test cancels at one phase (opening,
worker start-up, spare start-up, mid-batch, model relay, closing) with a native
``Task.cancel()``, the kind Ctrl-C sends through ``asyncio.run``, then asserts that
nothing is left (no process, thread or task), that the executor's statistics agree with
what happened, that no slot of a limiter stays taken, and that what is still open keeps
working. Tasks are ordered with events and marker files, never with sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from evaluator._call._calls import ScoreCall
from evaluator._call._loader import UserFunction, load_metric
from evaluator._executors._async import AsyncExecutor
from evaluator._executors._process._executor import ProcessExecutor
from evaluator._executors._threads import ThreadExecutor
from evaluator._models import Models
from evaluator._pipeline import Evaluator
from llm_client import ModelConfig, Simulator, SimulatorConfig
from tests._helpers import until

SOURCES = Path(__file__).resolve().parent / "sources"

# A metric for worker processes. Its import in a worker counts itself in "imports" and,
# while a "hold" file exists, waits if more imports than the number in "hold" came
# before it: "0" keeps every worker starting, "1" lets the first through and keeps the
# next one (the spare) starting. Its calls behave by input["mode"].
METRIC = """
import os, time
from pathlib import Path
from skynet import llm

HERE = Path(__file__).parent
if os.getpid() != {engine}:
    with open(HERE / "imports", "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    seen = len((HERE / "imports").read_text().split())
    hold = HERE / "hold"
    while hold.exists() and seen > int(hold.read_text() or 0):
        time.sleep(0.005)

def score(input, output, expected=None):
    mode = input["mode"]
    if mode == "hang":
        (HERE / f"running-{{input['i']}}").write_text("")
        time.sleep(1000)
    if mode == "llm":
        return 1.0, {{"feedback": llm("judge", input=str(input["i"]))}}
    if mode == "exit":
        os._exit(1)
    return 1.0, {{"feedback": "ok"}}
"""


def alive(p: psutil.Process) -> bool:
    """Whether ``p`` still runs (a zombie is already dead)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def children() -> list[psutil.Process]:
    """Child processes of this one still running."""
    return [p for p in psutil.Process().children(recursive=True) if alive(p)]


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("skynet-") and t.is_alive()]


def other_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}


async def cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` natively and check that it ends with the cancellation."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def _call(i: int, mode: str = "ok") -> ScoreCall:
    return ScoreCall(i, f"e{i}", {"mode": mode, "i": i}, "a", None)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def metric(folder: Path) -> UserFunction:
    path = folder / "metric.py"
    path.write_text(textwrap.dedent(METRIC.format(engine=os.getpid())))
    return load_metric(path)


def _whole_process_executor(ex: ProcessExecutor) -> None:
    """Nothing waits in the queue, no job is left, and the counts add up."""
    queue = ex._queue
    assert queue.pending_count == 0 and not queue.pending and not queue.jobs
    stats = ex.statistics()
    assert stats.calls <= queue.calls_sent


class TestOpening:
    async def test_cancelled_while_opening_model_clients(self, metric: UserFunction) -> None:
        """Cancelled while its model clients open, an Evaluator re-raises, is closed (it
        refuses reuse), and leaves no process, thread or task; a new one opens fine."""
        async with Simulator(SimulatorConfig()) as sim:
            config = ModelConfig(model="sim", base_url=sim.base_url, api_key_env=None)
            ev = Evaluator(metric, models=Models(metric=config), execution="process", workers=1)
            before = other_tasks()
            task = asyncio.create_task(ev.__aenter__())
            await asyncio.sleep(0)  # it starts, and waits on the price lookup in a thread
            await cancelled(task)
            with pytest.raises(RuntimeError, match="closed"):
                await ev.evaluate_many(None, [])
            assert children() == [] and our_threads() == []
            assert other_tasks() <= before
            async with Evaluator(metric, models=Models(metric=config), execution="inline") as ev2:
                (result,) = await ev2.evaluate_many(
                    None, [{"input": {"mode": "ok", "i": 0}, "output": "a"}]
                )
            assert result.ok, result


class TestWorkerStartUp:
    async def test_cancel_while_workers_start(self, metric: UserFunction, folder: Path) -> None:
        """A submit cancelled while no worker is ready yet returns at once and leaves its
        calls nowhere; once the workers are ready, the executor runs new calls."""
        (folder / "hold").write_text("0")
        async with ProcessExecutor(metric, "score", timeout=30, workers=2) as ex:
            task = asyncio.create_task(ex.submit([_call(i) for i in range(10)]))
            await until(lambda: ex._queue.jobs != set(), "the calls are queued")
            assert ex.statistics().calls == 0
            await cancelled(task)
            _whole_process_executor(ex)
            sent = ex._queue.calls_sent  # already in the workers' sockets: run, then dropped
            (folder / "hold").unlink()
            outcomes = await ex.submit([_call(i) for i in range(5)])
            assert [o.error for o in outcomes] == [None] * 5
            # Every call sent is run and counted once, the dropped ones too.
            await until(lambda: ex.statistics().calls == sent + 5, "every call is counted")
            stats = ex.statistics()
            assert (stats.crashes, stats.restarts, stats.calls_requeued) == (0, 0, 0)
        assert children() == [] and other_tasks() == set()

    async def test_close_while_workers_start(self, metric: UserFunction, folder: Path) -> None:
        """Closing while workers are still importing kills them at once; a call waiting
        for them is told the executor closed (cancelled), nothing is left."""
        (folder / "hold").write_text("0")
        ex = ProcessExecutor(metric, "score", timeout=30, workers=2)
        await ex.__aenter__()
        waiting = asyncio.create_task(ex.submit([_call(0)]))
        await until(lambda: ex._queue.jobs != set(), "the call waits for a worker")
        assert len(children()) == 2 and ex.statistics().calls == 0
        await ex.__aexit__(None, None, None)
        (outcome,) = await waiting
        assert outcome.error is not None and outcome.error.kind == "cancelled"
        assert children() == [] and other_tasks() == set()


class TestSpareStartUp:
    async def test_cancel_and_close_while_the_spare_starts(
        self, metric: UserFunction, folder: Path
    ) -> None:
        """With the warm spare still starting, a cancelled submit and then the close leave
        nothing behind: the spare and the fork server are killed with the workers."""
        (folder / "hold").write_text("1")  # the worker starts; the spare, next, waits
        async with ProcessExecutor(metric, "score", timeout=30, workers=1) as ex:
            assert [o.error for o in await ex.submit([_call(0)])] == [None]
            await until(lambda: ex.statistics().spares_started == 1, "the spare starts")
            assert not ex.statistics().spare_ready
            task = asyncio.create_task(ex.submit([_call(1, "hang")]))
            await until(lambda: (folder / "running-1").exists(), "the call runs")
            await cancelled(task)
            _whole_process_executor(ex)
            # The busy worker, the starting spare and the fork server (started with it).
            assert len(children()) == 3
        assert children() == [] and other_tasks() == set()

    async def test_crash_promotes_a_starting_spare(
        self, metric: UserFunction, folder: Path
    ) -> None:
        """A crash while the spare is still starting promotes it anyway; the calls wait
        for it, and a cancel then leaves the queue empty and nothing behind."""
        (folder / "hold").write_text("1")
        async with ProcessExecutor(metric, "score", timeout=30, workers=1) as ex:
            await ex.submit([_call(0)])
            await until(lambda: ex.statistics().spares_started == 1, "the spare starts")
            task = asyncio.create_task(ex.submit([_call(1, "exit"), _call(2)]))
            await until(lambda: ex.statistics().spares_promoted == 1, "the spare is promoted")
            stats = ex.statistics()
            assert (stats.crashes, stats.restarts, stats.workers_alive) == (1, 1, 1)
            await cancelled(task)
            _whole_process_executor(ex)
            (folder / "hold").unlink()
            assert [o.error for o in await ex.submit([_call(3)])] == [None]
        assert children() == [] and other_tasks() == set()


class TestMidBatch:
    async def test_process_cancel_while_a_call_runs(
        self, metric: UserFunction, folder: Path
    ) -> None:
        """Cancelled while a worker runs one of its calls, a submit returns at once; the
        other worker serves the next submit; the close kills the busy one."""
        async with ProcessExecutor(metric, "score", timeout=60, workers=2) as ex:
            task = asyncio.create_task(ex.submit([_call(0, "hang")]))
            await until(lambda: (folder / "running-0").exists(), "the call runs")
            assert ex.statistics().busy == 1
            await cancelled(task)
            _whole_process_executor(ex)
            assert [o.error for o in await ex.submit([_call(i) for i in range(8)])] == [None] * 8
        assert children() == [] and other_tasks() == set()

    async def test_thread_cancel_stops_claiming(self, tmp_path: Path) -> None:
        """A thread pool's cancelled submit stops its threads claiming the batch's calls:
        the call running finishes, the rest never start, the pool stays usable."""
        path = tmp_path / "behaviours.py"
        path.write_text((SOURCES / "behaviours.py").read_text())
        fn = load_metric(path)
        calls = [
            ScoreCall(
                i, i, {"kind": "hang" if i == 0 else "slow", "hang_s": 30}, "a", {"label": "a"}
            )
            for i in range(200)
        ]
        release = sys.modules[fn.module_name].RELEASE
        try:
            async with ThreadExecutor(fn, "score", timeout=30, workers=1) as ex:
                task = asyncio.create_task(ex.submit(calls))
                await until(lambda: ex.statistics().busy == 1, "the first call runs")
                await cancelled(task)
                release.set()
                await until(lambda: ex.statistics().busy == 0, "the running call ends")
                assert ex.statistics().calls == 1
                ok = await ex.submit(calls[1:3])
                assert [o.error for o in ok] == [None, None]
            assert our_threads() == [] and other_tasks() == set()
        finally:
            release.set()

    @pytest.mark.parametrize("steps", [0, 1, 3])
    async def test_async_cancel_leaves_no_slot_taken(self, tmp_path: Path, steps: int) -> None:
        """Cancelled at any point, even before its calls' tasks have started, an async
        submit gives every slot back: all `concurrency` slots run calls at once after."""
        path = tmp_path / "async_behaviours.py"
        path.write_text((SOURCES / "async_behaviours.py").read_text())
        fn = load_metric(path)

        def hangs(n: int) -> list[ScoreCall]:
            return [ScoreCall(i, i, {"kind": "hang", "hang_s": 30}, "a", None) for i in range(n)]

        async with AsyncExecutor(fn, "score", timeout=60, concurrency=4) as ex:
            task = asyncio.create_task(ex.submit(hangs(10)))
            for _ in range(steps):
                await asyncio.sleep(0)
            await cancelled(task)
            assert ex.statistics().busy == 0 and other_tasks() == set()
            again = asyncio.create_task(ex.submit(hangs(4)))
            await until(lambda: ex.statistics().busy == 4, "four calls run at once")
            await cancelled(again)
        assert other_tasks() == set()


class TestModelRelay:
    async def test_cancel_while_a_worker_waits_for_the_model(self, metric: UserFunction) -> None:
        """Cancelled while a worker's skynet.llm call is relayed and the model has not
        answered, the submit returns at once; the close cancels the relay (the handler
        sees the cancellation) and leaves no task or process."""
        entered = asyncio.Event()
        ended: list[str] = []

        async def handler(token: int, stage: Any, instruction: str, input: Any, opts: Any) -> str:
            entered.set()
            try:
                await asyncio.Event().wait()  # a model that never answers
            except asyncio.CancelledError:
                ended.append("cancelled")
                raise
            return "never"

        async with ProcessExecutor(
            metric, "score", timeout=60, workers=1, llm_handler=handler
        ) as ex:
            task = asyncio.create_task(ex.submit([_call(0, "llm")]))
            await entered.wait()
            await cancelled(task)
            _whole_process_executor(ex)
            assert ended == []  # the relay belongs to the worker, not to the submit
        assert ended == ["cancelled"]
        assert children() == [] and other_tasks() == set()

    async def test_cancel_an_evaluation_waiting_on_a_model(self, tmp_path: Path) -> None:
        """Cancelled while an async metric awaits a slow model over HTTP, an evaluation
        returns at once, the model call is cancelled with it, nothing is left."""
        path = tmp_path / "judge.py"
        path.write_text(
            "from skynet import allm\n"
            "async def score(input, output, expected=None):\n"
            "    return 1.0, {'feedback': await allm('judge', input=str(output))}\n"
        )
        async with Simulator(SimulatorConfig(latency_ms=30_000)) as sim:
            config = ModelConfig(model="sim", base_url=sim.base_url, api_key_env=None)
            async with Evaluator(path, models=Models(metric=config)) as ev:
                before = other_tasks()
                rows: list[dict[str, Any]] = [
                    {"input": {}, "output": i, "expected": None} for i in range(3)
                ]
                task = asyncio.create_task(ev.evaluate_many(None, rows))
                await until(lambda: sim.statistics().requests >= 3, "the model is asked")
                await cancelled(task)
                assert other_tasks() <= before
                stats = ev.statistics()
                assert stats.in_flight == 0 and stats.metric.busy == 0
        assert other_tasks() == set()


async def under_fire(
    task: asyncio.Task[Any], shots: int, on_shot: Callable[[int], object] | None = None
) -> None:
    """Cancel ``task`` natively, then again at every turn of the loop while it unwinds
    (Ctrl-C pressed over and over): it must finish its cleanup, then re-raise."""
    fired = 0
    while not task.done() and fired < shots:
        task.cancel()
        fired += 1
        if on_shot is not None:
            on_shot(fired)
        await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fired > 1  # hit while the cleanup was under way, not only before it


class TestClosing:
    async def test_native_cancels_during_close_leave_nothing(
        self, metric: UserFunction, folder: Path
    ) -> None:
        """An evaluation cancelled again and again while its Evaluator closes (workers
        busy in calls, the spare and the fork server up) still reaps every process and
        leaves no task."""
        opened: list[Evaluator] = []

        async def main() -> None:
            async with Evaluator(metric, execution="process", workers=2, timeout=60) as ev:
                opened.append(ev)
                rows = [{"input": {"mode": "hang", "i": i}, "output": "a"} for i in range(2)]
                await ev.evaluate_many(None, rows)

        task = asyncio.create_task(main())
        await until(lambda: all((folder / f"running-{i}").exists() for i in range(2)), "hangs")
        await until(lambda: opened[0].statistics().metric.spare_ready, "the spare is ready")
        # Asleep in their calls, both workers are stalled: a stand-in forked for each.
        await until(lambda: opened[0].statistics().metric.stand_ins_started == 2, "stand-ins")
        # Two busy workers, the spare, the fork server and the two stand-ins: a stand-in
        # is counted when its fork is asked for, and its process appears a moment later.
        await until(lambda: len(children()) == 6, "the six processes are up")
        up = children()
        await under_fire(task, 10_000)
        assert children() == [] and other_tasks() == set()
        assert not any(map(alive, up))  # none of them left, orphaned or not
        with pytest.raises(RuntimeError, match="closed"):
            await opened[0].evaluate_many(None, [])

    async def test_thread_close_waits_for_its_threads_under_cancels(self, tmp_path: Path) -> None:
        """A thread executor cancelled again and again while it waits at close for a
        running call still waits for the call to end: no working thread is left."""
        path = tmp_path / "behaviours.py"
        path.write_text((SOURCES / "behaviours.py").read_text())
        fn = load_metric(path)
        release = sys.modules[fn.module_name].RELEASE

        async def main() -> None:
            async with ThreadExecutor(fn, "score", timeout=30, workers=1) as ex:
                opened.append(ex)
                call = ScoreCall(0, 0, {"kind": "hang", "hang_s": 30}, "a", {"label": "a"})
                await ex.submit([call])

        opened: list[ThreadExecutor] = []
        task = asyncio.create_task(main())
        await until(lambda: bool(opened) and opened[0].statistics().busy == 1, "the call runs")
        try:
            # The call ends after some cancels have hit the close that waits for it.
            await under_fire(task, 1_000_000, lambda n: n == 50 and release.set())
        finally:
            release.set()
        stats = opened[0].statistics()
        assert our_threads() == [] and stats.abandoned_threads == 0 and stats.busy == 0
        assert other_tasks() == set()


CTRL_C = """
import asyncio, sys
from evaluator import Evaluator

async def main():
    async with Evaluator(sys.argv[1], execution="process", workers=2, timeout=60) as ev:
        rows = [{"input": {"mode": "hang", "i": i}, "output": "a"} for i in range(4)]
        await ev.evaluate_many(None, rows)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_leaves_no_worker(metric: UserFunction, folder: Path, presses: int) -> None:
    """Ctrl-C (SIGINT to the engine, whose asyncio.run cancels the main task) during an
    evaluation stops it within seconds and leaves no worker process, with no traceback
    from any worker; pressed twice, the workers still die with the engine. Tolerance:
    10 s to exit, 5 s for orphans to go."""
    script = folder / "ctrl_c.py"
    script.write_text(CTRL_C)
    with subprocess.Popen(
        [sys.executable, str(script), str(metric.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as engine:
        try:
            start = time.monotonic()
            while len(list(folder.glob("running-*"))) < 2:  # both workers in a call
                assert time.monotonic() - start < 20, "the workers never ran the calls"
                time.sleep(0.01)
            workers = psutil.Process(engine.pid).children()
            assert len(workers) >= 2
            for _ in range(presses):
                engine.send_signal(signal.SIGINT)
            out, err = engine.communicate(timeout=10)
        finally:
            if engine.poll() is None:
                engine.kill()
    if presses == 1:
        assert engine.returncode == 0 and out.strip() == "interrupted", (out, err)
    assert "Traceback" not in err or presses == 2, err
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
