"""The Ray executor on a real two-node cluster: results, faults, losses, cancellation,
shipping, model calls, and an Evaluator with both stages on Ray.

Every test opens its own executor on the session's cluster (``conftest.py``) and checks,
after closing it, that nothing of it is left: no actor process, no worker process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from evaluator import Evaluator
from evaluator._call._calls import Outcome, ScoreCall
from evaluator._call._loader import UserFunction, load_function
from evaluator._exceptions import ContractError
from evaluator._executors._process._executor import ProcessExecutor
from evaluator._executors._ray._boot import FOLDER_PREFIX, remove_orphans
from evaluator._executors._ray._executor import RayExecutor
from evaluator._report import report_rows
from llm_client import LLMError
from tests._helpers import until

from .conftest import node_args

# A real Ray instance or cluster (the mark implies slow).
pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

# Behaves by the example's input, like the process executor's chaos metric; each call
# appends its worker's pid to a file beside it, so the tests can check those processes.
METRIC = """
import ctypes, os, time
from pathlib import Path
from skynet import llm

PIDS = Path(__file__).with_suffix(".pids")

def score(input, output, expected=None):
    with open(PIDS, "a") as f:
        f.write(f"{os.getpid()}\\n")
    mode = input["mode"]
    if mode == "ok":
        good = output == expected["answer"]
        return (1.0 if good else 0.0), {"feedback": "ok", "scores": {"i": float(input["i"])}}
    if mode == "raise":
        raise ValueError(f"bad example {input['i']}")
    if mode == "invalid":
        return "high"
    if mode == "slow":
        time.sleep(input.get("seconds", 0.05))
        return 0.5, {"feedback": "slow"}
    if mode == "gate":
        while not os.path.exists(input["gate"]):  # held until the test opens the gate
            time.sleep(0.002)
        return 0.5, {"feedback": "gated"}
    if mode == "hang":
        time.sleep(1000)
    if mode == "exit":
        os._exit(3)
    if mode == "segv":
        ctypes.string_at(0)
    if mode == "llm":
        reply = llm("Say PASS or FAIL.", input=str(output))
        return (1.0 if reply.startswith("PASS") else 0.0), {"feedback": reply}
    raise AssertionError(mode)
"""


def _metric(folder: Path, source: str = METRIC) -> UserFunction:
    path = folder / "metric.py"
    path.write_text(textwrap.dedent(source))
    return load_function(path, "score")


def _call(i: int, mode: str = "ok", **extra: Any) -> ScoreCall:
    return ScoreCall(i, f"ex{i}", {"mode": mode, "i": i, **extra}, "a", {"answer": "a"})


def _kinds(outcomes: list[Outcome]) -> list[str]:
    return [o.error.kind if o.error is not None else "ok" for o in outcomes]


def _pids(fn: UserFunction) -> set[int]:
    path = fn.path.with_suffix(".pids")
    return {int(line) for line in path.read_text().split()} if path.exists() else set()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _assert_nothing_left(fn: UserFunction, ex: RayExecutor) -> None:
    """No actor of ``ex`` and no worker process that ran ``fn`` is alive, and no actor's
    folder is left: a closed actor removed its own, a killed actor's goes with the next
    boot on the machine (which removes the folders of actors that are gone)."""
    pids = _pids(fn) | {m.pid for m in ex._roster.every if m.pid}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(_gone(pid) for pid in pids):
        time.sleep(0.05)
    assert [pid for pid in pids if not _gone(pid)] == []
    temp = Path(tempfile.gettempdir())

    def folders(members: list[Any]) -> list[Path]:
        return [p for m in members for p in temp.glob(f"{FOLDER_PREFIX}{m.pid}-*")]

    actors = [m for m in ex._roster.every if m.pid]
    stats = ex.statistics()
    if stats.actors_lost == 0 and not stats.lost_nodes:
        assert folders(actors) == []  # every actor closed and removed its own
    remove_orphans(str(temp))  # what the next boot does
    assert folders(actors) == []


class TestResults:
    async def test_same_outcomes_as_the_process_executor(self, tmp_path: Path) -> None:
        """Values and error kinds equal the process executor's on the same calls, and the
        calls ran on both nodes."""
        fn = _metric(tmp_path)
        calls = [_call(i, ("ok", "ok", "raise", "invalid", "slow")[i % 5]) for i in range(60)]
        async with RayExecutor(fn, "score", timeout=30) as ex:
            on_ray = await ex.submit(calls)
            stats = ex.statistics()
        async with ProcessExecutor(fn, "score", timeout=30, workers=2) as px:
            local = await px.submit(calls)
        assert [(o.value, o.error) for o in on_ray] == [(o.value, o.error) for o in local]
        assert _kinds(on_ray).count("ok") == 36
        assert stats.calls == 60 and sum(stats.calls_by_node.values()) == 60
        assert stats.nodes == 2 and stats.parallelism == 2
        assert stats.actors_lost == 0 and stats.calls_requeued == 0
        _assert_nothing_left(fn, ex)


class TestFaults:
    async def test_a_timeout_kills_the_call_not_the_node(self, tmp_path: Path) -> None:
        """A hung call gets metric_timeout; its node's actor stays and runs the rest."""
        fn = _metric(tmp_path)
        calls = [_call(i, "hang" if i == 3 else "ok") for i in range(12)]
        async with RayExecutor(fn, "score", timeout=1.0) as ex:
            actors = {m.pid for m in ex._roster.ready()}
            outcomes = await ex.submit(calls)
            again = await ex.submit([_call(i) for i in range(4)])
            stats = ex.statistics()
            assert {m.pid for m in ex._roster.ready()} == actors
        assert _kinds(outcomes) == ["ok"] * 3 + ["metric_timeout"] + ["ok"] * 8
        assert outcomes[3].error is not None and "1 s timeout" in outcomes[3].error.message
        assert _kinds(again) == ["ok"] * 4
        assert stats.timeouts == 1 and stats.actors_lost == 0 and stats.nodes == 2
        _assert_nothing_left(fn, ex)

    async def test_a_crash_is_worker_crash(self, tmp_path: Path) -> None:
        """A worker's exit or segfault is that call's worker_crash; no actor is lost."""
        fn = _metric(tmp_path)
        calls = [_call(i, {2: "exit", 5: "segv"}.get(i, "ok")) for i in range(10)]
        async with RayExecutor(fn, "score", timeout=30) as ex:
            outcomes = await ex.submit(calls)
            stats = ex.statistics()
        kinds = _kinds(outcomes)
        assert kinds[2] == kinds[5] == "worker_crash"
        assert kinds.count("ok") == 8
        assert outcomes[2].error is not None and "code 3" in outcomes[2].error.message
        assert stats.crashes == 2 and stats.actors_lost == 0
        _assert_nothing_left(fn, ex)


class TestLosses:
    async def test_a_killed_actor_loses_nothing(self, tmp_path: Path) -> None:
        """Killing an actor mid-run requeues its unfinished calls: every call gets
        exactly one outcome, all ok, and a new actor takes the node's place."""
        import ray

        fn = _metric(tmp_path)
        calls = [_call(i, "slow", seconds=0.05) for i in range(80)]
        async with RayExecutor(fn, "score", timeout=30) as ex:
            task = asyncio.ensure_future(ex.submit(calls))
            await until(lambda: ex.statistics().calls >= 10, "the first outcomes", timeout=60)
            victim = ex._roster.ready()[0]
            ray.kill(victim.handle, no_restart=True)
            outcomes = await task
            await until(lambda: ex.statistics().actors == 2, "a replacement actor", timeout=60)
            stats = ex.statistics()
        assert _kinds(outcomes) == ["ok"] * 80
        assert [o.value.score for o in outcomes] == [0.5] * 80
        assert stats.actors_lost == 1 and stats.actors_started == 3
        assert stats.calls == 80 and stats.lost_nodes == []
        _assert_nothing_left(fn, ex)

    async def test_a_removed_node_loses_nothing(self, tmp_path: Path, ray_cluster: Any) -> None:
        """Removing a node mid-run requeues its unfinished calls on the other nodes:
        every call gets exactly one outcome, and the node is reported lost."""
        fn = _metric(tmp_path)
        node = ray_cluster.add_node(**node_args())  # Ray sets signal handlers: main thread
        calls = [_call(i, "slow", seconds=0.05) for i in range(90)]
        try:
            async with RayExecutor(fn, "score", timeout=30) as ex:
                assert ex.statistics().nodes == 3
                doomed = next(m for m in ex._roster.ready() if m.node_id == node.node_id)
                task = asyncio.ensure_future(ex.submit(calls))
                await until(lambda: doomed.calls_done >= 3, "work on the doomed node", timeout=60)
                ray_cluster.remove_node(node)
                outcomes = await task
                await until(lambda: ex.statistics().lost_nodes != [], "the node's loss", timeout=60)
                stats = ex.statistics()
        finally:
            if node in ray_cluster.worker_nodes:
                ray_cluster.remove_node(node)
        assert _kinds(outcomes) == ["ok"] * 90
        assert stats.calls == 90 and stats.actors_lost == 1
        assert stats.lost_nodes == [doomed.name] and stats.nodes == 2
        _assert_nothing_left(fn, ex)


class TestCancellation:
    async def test_cancelling_mid_run_leaves_nothing_behind(self, tmp_path: Path) -> None:
        """A cancelled submit returns at once, the executor stays usable, and closing
        leaves no actor and no worker process."""
        fn = _metric(tmp_path)
        async with RayExecutor(fn, "score", timeout=30) as ex:
            task = asyncio.ensure_future(
                ex.submit([_call(i, "slow", seconds=0.2) for i in range(40)])
            )
            await until(lambda: ex.statistics().calls >= 2, "the first outcomes", timeout=60)
            task.cancel()
            started = time.monotonic()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - started < 5  # a guard against a hang
            assert _kinds(await ex.submit([_call(i) for i in range(6)])) == ["ok"] * 6
            assert ex.statistics().busy == 0
        _assert_nothing_left(fn, ex)


class TestShipping:
    async def test_an_import_missing_on_the_node_is_a_clear_error(self, tmp_path: Path) -> None:
        """A module the driver finds but the nodes do not (outside the shipped folder)
        stops the executor at its start with an error naming the node and the module."""
        helpers = tmp_path / "elsewhere"
        helpers.mkdir()
        (helpers / "driver_only_helper.py").write_text("WEIGHT = 1.0\n")
        folder = tmp_path / "metric"
        folder.mkdir()
        sys.path.insert(0, str(helpers))
        try:
            fn = _metric(
                folder,
                "from driver_only_helper import WEIGHT\n\n"
                "def score(input, output, expected=None):\n    return WEIGHT\n",
            )
        finally:
            sys.path.remove(str(helpers))
        ex = RayExecutor(fn, "score", timeout=30)
        with pytest.raises(ContractError) as caught:
            await ex.__aenter__()
        message = str(caught.value)
        assert "cannot be loaded on Ray node 127.0.0.1" in message
        assert "No module named 'driver_only_helper'" in message
        assert str(fn.path) in message
        assert ex.statistics().actors == 0
        _assert_nothing_left(fn, ex)

    def test_a_file_missing_on_the_node_is_a_clear_error(self, tmp_path: Path) -> None:
        """On the engine's own local instance (nothing shipped: the nodes read the
        driver's path), a file gone from that path is an error naming the node and the
        path, and the instance is shut down. (A process of its own: a local instance
        cannot share this process with the test cluster.)"""
        fn = _metric(tmp_path)
        code = f"""
import asyncio, ray
from evaluator._exceptions import ContractError
from evaluator._executors._ray._executor import RayExecutor
from evaluator._call._loader import load_function

fn = load_function({str(fn.path)!r}, "score")
fn.path.unlink()

async def main():
    try:
        async with RayExecutor(fn, "score", timeout=30):
            pass
    except ContractError as exc:
        print(exc)
    print("initialized:", ray.is_initialized())

asyncio.run(main())
"""
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=110
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "cannot be loaded on Ray node" in done.stdout
        assert f"the file is not on this node (no {fn.path})" in done.stdout
        assert "initialized: False" in done.stdout

    async def test_objects_of_the_users_classes_cross_both_ways(self, tmp_path: Path) -> None:
        """A value of a class defined in the user's file reaches the shipped copy on the
        node and comes back as the driver's class (module names are aliased)."""
        source = """
        class Box:
            def __init__(self, value):
                self.value = value

        def run(artifact, input):
            return Box(artifact.value + input)
        """
        path = tmp_path / "program.py"
        path.write_text(textwrap.dedent(source))
        fn = load_function(path, "run")
        from evaluator._call._calls import RunCall

        box = fn.module.Box  # type: ignore[union-attr]
        async with RayExecutor(fn, "run", timeout=30) as ex:
            outcomes = await ex.submit([RunCall(i, i, box(10), i) for i in range(4)])
        assert [o.error for o in outcomes] == [None] * 4
        assert [type(o.value) for o in outcomes] == [box] * 4
        assert [o.value.value for o in outcomes] == [10, 11, 12, 13]


class TestModelCalls:
    async def test_model_calls_reach_the_drivers_handler(self, tmp_path: Path) -> None:
        """skynet.llm on a node is answered by the driver's handler, for the calling
        example's token; a failed model call is that example's llm_error."""
        fn = _metric(tmp_path)
        seen: list[tuple[int, str]] = []

        async def handler(
            token: int, stage: Any, instruction: str, input: str | None, options: Any
        ) -> str:
            seen.append((token, stage))
            if token == 4:
                raise LLMError("the model is overloaded", status=503, attempts=3)
            return "PASS" if token % 2 == 0 else "FAIL"

        calls = [_call(i, "llm") for i in range(8)]
        async with RayExecutor(fn, "score", timeout=30, llm_handler=handler) as ex:
            outcomes = await ex.submit(calls)
        assert sorted(seen) == [(i, "score") for i in range(8)]
        assert _kinds(outcomes) == ["ok"] * 4 + ["llm_error"] + ["ok"] * 3
        assert [o.value.score for o in outcomes if o.value is not None] == [1, 0, 1, 0, 0, 1, 0]
        assert outcomes[4].error is not None and "overloaded" in outcomes[4].error.message


PROGRAM = """
def run(artifact, input):
    return artifact + str(input["n"] * 2)
"""

PIPELINE_METRIC = """
def score(input, output, expected=None):
    good = output == expected["want"]
    return (1.0 if good else 0.0), {"feedback": "right" if good else f"got {output!r}"}
"""


class TestEvaluator:
    async def test_program_and_metric_on_ray(self, tmp_path: Path) -> None:
        """Both stages run on the cluster (one connection, two sets of actors); every
        example gets its result, and the report counts nodes, actors and batches."""
        (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
        (tmp_path / "metric.py").write_text(textwrap.dedent(PIPELINE_METRIC))
        rows = [
            {"id": f"e{i}", "input": {"n": i}, "expected": {"want": f"x{i * 2 if i % 4 else -1}"}}
            for i in range(40)
        ]
        async with Evaluator(
            tmp_path / "metric.py",
            tmp_path / "program.py",
            execution="ray",
            program_execution="ray",
        ) as ev:
            results = await ev.evaluate_many("x", rows)
            report = await ev.evaluate("x", rows)
            stats = ev.statistics()
        assert [r.example_id for r in results] == [f"e{i}" for i in range(40)]
        assert [r.score for r in results] == [0.0 if i % 4 == 0 else 1.0 for i in range(40)]
        assert report.n == 40 and report.ok == 40 and report.mean_score == 0.75
        cluster = report.cluster
        assert cluster is not None and cluster.nodes == 2 and cluster.actors == 4
        assert sum(cluster.calls_by_node.values()) == 160  # two runs of two stages
        assert cluster.lost_nodes == [] and cluster.calls_requeued == 0
        assert stats.cluster is not None and stats.metric.kind == "ray"
        labels = [label for label, _ in report_rows(report)]
        assert {"ray nodes", "ray actors", "ray batches / calls requeued"} <= set(labels)

    async def test_small_submits_wait_for_busy_nodes_and_go_together(self, tmp_path: Path) -> None:
        """The pipeline's chunks are small (20 ms of the engine's time: a few calls of a
        few milliseconds). While every node holds two pieces of work or more, a submit
        smaller than a piece a worker waits, as Nagle would, instead of going out as a
        batch of its own (a round trip each costs the nodes a tenth of their throughput,
        bench_ray.py); when the nodes' work comes back, the waiting submits go together.

        Ordered by the executor's own state, not by time: the held calls wait on a file."""
        fn = _metric(tmp_path)
        gate = tmp_path / "gate"
        async with RayExecutor(fn, "score", timeout=30) as ex:
            for warm in range(2):  # the call's cost is measured: about 10 ms
                await ex.submit([_call(100 * warm + i, "slow", seconds=0.01) for i in range(20)])
            queue = ex._queue

            def dispatched(pending: int) -> bool:
                return queue.pending_count == pending and not ex._dispatching

            held = asyncio.create_task(
                ex.submit([_call(1000 + i, "gate", gate=str(gate)) for i in range(60)])
            )
            await until(
                lambda: dispatched(0) and sum(m.in_flight for m in ex._roster.ready()) == 60,
                "the held calls are on the nodes",
            )
            busy = ex.statistics()
            assert [m.in_flight for m in ex._roster.ready()] == [30, 30]  # 300 ms each
            small = []
            for i in range(3):
                call = _call(2000 + i, "slow", seconds=0.01)
                small.append(asyncio.create_task(ex.submit([call])))
                await asyncio.sleep(0)  # the submit runs up to its wait: its call is queued
                await until(lambda: not ex._dispatching, "the small submit was dispatched")
                assert queue.pending_count == i + 1, "a small submit went out on its own"
            assert ex.statistics().batches_sent == busy.batches_sent  # all three wait
            gate.touch()
            outcomes = await held
            smalls = await asyncio.gather(*small)
            after = ex.statistics()
        assert [o.value.score for o in outcomes] == [0.5] * 60
        assert [[o.value.score for o in s] for s in smalls] == [[0.5]] * 3
        assert after.batches_sent - busy.batches_sent < 3, after  # gathered, not one each
        _assert_nothing_left(fn, ex)
