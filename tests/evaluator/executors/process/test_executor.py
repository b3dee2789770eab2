"""The process executor, with real worker processes running tiny metric files."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import psutil
import pytest
from hypothesis import HealthCheck, given, settings

from evaluator._call._calls import Outcome, RunCall, ScoreCall
from evaluator._call._loader import UserFunction, load_function
from evaluator._exceptions import ConfigError
from evaluator._executors._process._executor import ProcessExecutor, ProcessExecutorStatistics
from llm_client import LLMError
from tests._helpers import write

# Real worker processes are what these tests are about (the mark implies slow).
pytestmark = pytest.mark.process

# One metric file that behaves by the example's input: each mode exercises one way a
# user function can fail. At import it records its pid, to count imports per process.
CHAOS = """
import ctypes, os, time
from pathlib import Path
from skynet import llm

with open(Path(__file__).with_suffix(".pids"), "a") as f:
    f.write(f"{os.getpid()}\\n")

def score(input, output, expected=None):
    mode = input["mode"]
    if mode == "ok":
        good = output == expected["answer"]
        return (1.0 if good else 0.0), {"feedback": "ok", "pid": os.getpid()}
    if mode == "raise":
        raise ValueError(f"bad example {input['i']}")
    if mode == "invalid":
        return 0.8
    if mode == "slow":
        time.sleep(0.01)
        return 0.5, {"feedback": "slow"}
    if mode == "hang":
        Path(input["marker"]).write_text("started")
        time.sleep(1000)
    if mode == "exit":
        os._exit(1)
    if mode == "segv":
        ctypes.string_at(0)
    if mode == "memory":
        block = bytearray(1024 * 1024 * 1024)
        return float(len(block)), {"feedback": "allocated"}
    if mode == "llm":
        reply = llm("Say PASS or FAIL.", input=str(output))
        return (1.0 if reply.startswith("PASS") else 0.0), {"feedback": reply}
    print("noise on stdout from a worker")
    return 0.0, {"feedback": "printed"}
"""


@pytest.fixture
def chaos(tmp_path: Path) -> UserFunction:
    return load_function(write(tmp_path, "metric.py", CHAOS), "score")


def _call(i: int, mode: str = "ok", output: Any = "a", **extra: Any) -> ScoreCall:
    return ScoreCall(i, f"ex{i}", {"mode": mode, "i": i, **extra}, output, {"answer": "a"})


def _kinds(outcomes: list[Outcome]) -> list[str]:
    return [o.error.kind if o.error else "ok" for o in outcomes]


def _message(outcome: Outcome) -> str:
    assert outcome.error is not None, f"expected an error, got {outcome!r}"
    return outcome.error.message


def _children() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    ]


def _workers() -> list[psutil.Process]:
    """Our live worker processes: the descendants but the pool's fork server (a child of
    this process running ``_zygote``; the workers it forks are its children)."""
    me = os.getpid()
    return [p for p in _children() if not (p.ppid() == me and "_zygote" in " ".join(p.cmdline()))]


async def _spare_ready(ex: ProcessExecutor) -> None:
    """Wait (at most 20 s, polling) until the executor's warm spare has imported the file."""
    for _ in range(2000):
        if ex.statistics().spare_ready:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no warm spare became ready: {ex.statistics()}")


@pytest.fixture
async def executor(chaos: UserFunction) -> AsyncIterator[ProcessExecutor]:
    async with ProcessExecutor(chaos, "score", timeout=30, workers=2) as ex:
        yield ex


class TestProcessExecutor:
    async def test_exact_match_scores_in_order(self, executor: ProcessExecutor) -> None:
        """10,000 cheap calls come back in input order with the right scores, batched."""
        calls = [_call(i, output="a" if i % 3 == 0 else "b") for i in range(10_000)]
        outcomes = await executor.submit(calls)
        assert [o.value.score for o in outcomes] == [
            1.0 if i % 3 == 0 else 0.0 for i in range(10_000)
        ]
        assert all(isinstance(o, Outcome) and o.ended_ns >= o.started_ns for o in outcomes)
        stats = executor.statistics()
        assert stats.calls_done >= 10_000
        assert stats.mean_batch_size > 50  # cheap calls travel many to a message
        assert len({o.value.extra["pid"] for o in outcomes}) == 2  # both workers got work

    async def test_small_cheap_submit_is_one_message(self, executor: ProcessExecutor) -> None:
        """Once calls are known to be cheap, a minibatch of 3 goes to one worker as one
        batch (splitting it would only add a round trip); a large submit is still spread
        over both workers."""
        await executor.submit([_call(i) for i in range(200)])  # cost measured
        assert executor._queue.cost_ns is not None
        # Known cheap: what this call costs a worker (a few µs). Under a loaded suite a
        # preempted worker has measured 100 µs a call, which rightly splits 3 of them.
        executor._queue.cost_ns = 5_000.0
        before = executor.statistics().batches_sent
        outcomes = await executor.submit([_call(i) for i in range(3)])
        assert _kinds(outcomes) == ["ok"] * 3
        assert executor.statistics().batches_sent == before + 1
        assert len({o.value.extra["pid"] for o in outcomes}) == 1
        spread = await executor.submit([_call(i) for i in range(20_000)])
        assert len({o.value.extra["pid"] for o in spread}) == 2

    async def test_concurrent_submits(self, executor: ProcessExecutor) -> None:
        """Concurrent submits on one executor each get their own outcomes, in order."""
        sizes = [1, 3, 500, 2000, 7]
        jobs = [
            [_call(i, output="a" if (i + k) % 2 else "b") for i in range(n)]
            for k, n in enumerate(sizes)
        ]
        results = await asyncio.gather(*(executor.submit(calls) for calls in jobs))
        for k, (calls, outcomes) in enumerate(zip(jobs, results, strict=True)):
            assert len(outcomes) == len(calls)
            assert [o.value.score for o in outcomes] == [
                1.0 if (i + k) % 2 else 0.0 for i in range(len(calls))
            ]

    async def test_errors_are_labelled(self, executor: ProcessExecutor) -> None:
        """A raising metric gives metric_error, a bad return invalid_return, others ok."""
        calls = [_call(0), _call(1, "raise"), _call(2, "invalid"), _call(3), _call(4, "print")]
        outcomes = await executor.submit(calls)
        assert _kinds(outcomes) == ["ok", "metric_error", "invalid_return", "ok", "ok"]
        assert "ValueError" in _message(outcomes[1]) and "bad example 1" in _message(outcomes[1])
        assert "not a pair" in _message(outcomes[2])
        assert outcomes[4].value.feedback == "printed"  # printing does not corrupt messages

    async def test_empty_submit(self, executor: ProcessExecutor) -> None:
        """An empty submit returns an empty list without touching the workers."""
        assert await executor.submit([]) == []

    @pytest.mark.slow
    async def test_hung_call_times_out(self, chaos: UserFunction, tmp_path: Path) -> None:
        """A hung call (sleep 1000) is killed at a 1 s timeout with metric_timeout, and the
        rest of its batch still completes ok (tolerance: done within 10 s)."""
        async with ProcessExecutor(chaos, "score", timeout=1, workers=1) as ex:
            first = await ex.submit([_call(i) for i in range(200)])  # cheap: big batches
            await _spare_ready(ex)
            spare = {p.pid for p in _workers()} - {first[0].value.extra["pid"]}
            marker = tmp_path / "hang.started"
            calls = [_call(i) for i in range(20)]
            calls += [_call(20, "hang", marker=str(marker))]
            calls += [_call(i) for i in range(21, 41)]
            started = time.monotonic()
            outcomes = await ex.submit(calls)
            elapsed = time.monotonic() - started
            assert _kinds(outcomes) == ["ok"] * 20 + ["metric_timeout"] + ["ok"] * 20
            # The same words as in every executor: the limit, the example and the fix.
            assert "1 s timeout on example 'ex20'" in _message(outcomes[20])
            assert "raise `timeout`" in _message(outcomes[20])
            assert 1.0 <= elapsed < 10
            stats = ex.statistics()
            assert (stats.timeouts, stats.restarts) == (1, 1)
            assert stats.calls_requeued >= 20  # the unrun calls of the batch were sent again
            assert stats.spares_promoted == 1  # the warm spare took the killed one's place
            # They ran in the spare, or in a stand-in forked while the hung call slept.
            hung = first[0].value.extra["pid"]
            assert hung not in {o.value.extra["pid"] for o in outcomes[21:]}
            assert (
                stats.stand_ins_started > 0
                or {o.value.extra["pid"] for o in outcomes[21:]} == spare
            )
            for _ in range(1000):  # an idle stand-in retires (guard: 10 s)
                if ex.statistics().workers_alive == 1:
                    break
                await asyncio.sleep(0.01)
            assert ex.statistics().workers_alive == 1

    @pytest.mark.slow
    async def test_run_stage_timeout_is_program_timeout(self, tmp_path: Path) -> None:
        """A hung `run` in a worker gives program_timeout (tolerance: 0.3 s timeout, 10 s)."""
        program = write(
            tmp_path,
            "program.py",
            """
            import time
            def run(artifact, input):
                if input == "hang":
                    time.sleep(1000)
                return f"{artifact}:{input}"
            """,
        )
        fn = load_function(program, "run")
        async with ProcessExecutor(fn, "run", timeout=0.3, workers=1) as ex:
            calls = [RunCall(i, i, "p", x) for i, x in enumerate(["a", "hang", "b"])]
            outcomes = await ex.submit(calls)
        assert _kinds(outcomes) == ["ok", "program_timeout", "ok"]
        assert [outcomes[0].value, outcomes[2].value] == ["p:a", "p:b"]

    @pytest.mark.parametrize(
        ("mode", "reason"), [("exit", "exited with code 1"), ("segv", "SIGSEGV")]
    )
    async def test_crash_costs_only_its_call(
        self, executor: ProcessExecutor, mode: str, reason: str
    ) -> None:
        """os._exit(1) and a real segfault give worker_crash to that call only; the pool
        recovers and the other calls finish ok."""
        await executor.submit([_call(i) for i in range(100)])
        calls = (
            [_call(i) for i in range(30)] + [_call(30, mode)] + [_call(i) for i in range(31, 60)]
        )
        outcomes = await executor.submit(calls)
        assert _kinds(outcomes) == ["ok"] * 30 + ["worker_crash"] + ["ok"] * 29
        assert reason in _message(outcomes[30])
        stats = executor.statistics()
        assert (stats.crashes, stats.restarts) == (1, 1)
        assert len(await executor.submit([_call(i) for i in range(50)])) == 50
        assert executor.statistics().workers_alive == 2

    async def test_memory_limit(self, chaos: UserFunction) -> None:
        """Allocating past memory_limit_mb gives worker_crash naming the limit; the worker
        is replaced and the next calls run."""
        async with ProcessExecutor(
            chaos, "score", timeout=30, workers=1, memory_limit_mb=300
        ) as ex:
            outcomes = await ex.submit([_call(0), _call(1, "memory"), _call(2)])
            assert _kinds(outcomes) == ["ok", "worker_crash", "ok"]
            assert "memory limit of 300 MB exceeded" in _message(outcomes[1])
            assert ex.statistics().crashes == 1

    async def test_recycling(self, chaos: UserFunction) -> None:
        """With max_calls_per_worker=5 no worker runs more than 5 calls; all calls are ok."""
        async with ProcessExecutor(
            chaos, "score", timeout=30, workers=1, max_calls_per_worker=5
        ) as ex:
            outcomes = await ex.submit([_call(i) for i in range(23)])
            stats = ex.statistics()
        assert _kinds(outcomes) == ["ok"] * 23
        per_pid: dict[int, int] = {}
        for o in outcomes:
            per_pid[o.value.extra["pid"]] = per_pid.get(o.value.extra["pid"], 0) + 1
        assert max(per_pid.values()) <= 5 and len(per_pid) >= 5
        assert stats.recycled >= 4 and stats.crashes == 0

    async def test_module_imported_once_per_worker(self, chaos: UserFunction) -> None:
        """Each worker imports the metric file exactly once, whatever it runs."""
        async with ProcessExecutor(chaos, "score", timeout=30, workers=2) as ex:
            for _ in range(3):
                await ex.submit([_call(i) for i in range(500)])
            await _spare_ready(ex)
            workers = {p.pid for p in _workers()}
        pids = chaos.path.with_suffix(".pids").read_text().split()
        assert pids.count(str(os.getpid())) == 1
        assert len(workers) == 3  # two workers and the warm spare
        assert all(pids.count(str(pid)) == 1 for pid in workers)

    @pytest.mark.slow
    async def test_cancel_returns_promptly_and_leaves_nothing(
        self, chaos: UserFunction, tmp_path: Path
    ) -> None:
        """Cancelling a submit whose call hangs returns within 0.5 s, and after the
        executor closes no child process, thread or task is left."""
        threads = threading.active_count()
        marker = tmp_path / "started"
        async with ProcessExecutor(chaos, "score", timeout=60, workers=2) as ex:
            task = asyncio.create_task(ex.submit([_call(0, "hang", marker=str(marker))]))
            for _ in range(1000):  # wait (at most 10 s) until the worker runs the call
                if marker.exists():
                    break
                await asyncio.sleep(0.01)
            assert marker.exists()
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - started < 0.5
            outcomes = await ex.submit([_call(i) for i in range(10)])  # the other worker
            assert _kinds(outcomes) == ["ok"] * 10
        assert _children() == []
        assert threading.active_count() == threads
        assert asyncio.all_tasks() == {asyncio.current_task()}

    async def test_cancelled_caller_scope_cleans_up(self, chaos: UserFunction) -> None:
        """A caller scope cancelled while inside `async with` still kills every worker."""

        async def hang_until_cancelled() -> None:
            async with ProcessExecutor(chaos, "score", timeout=60, workers=2) as ex:
                await ex.submit([_call(0, "hang", marker=os.devnull)])

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(hang_until_cancelled(), 0.5)
        assert _children() == []

    async def test_llm_relay(self, chaos: UserFunction) -> None:
        """skynet.llm in a worker is answered by the engine's llm_handler with the call's
        token and stage; an LLMError there becomes llm_error for that call only."""
        seen: list[tuple[int, str, str, str | None]] = []

        async def handler(
            token: int, stage: Any, instruction: str, input: str | None, options: dict[str, Any]
        ) -> str:
            seen.append((token, stage, instruction, input))
            if input == "quota":
                raise LLMError("insufficient quota", status=429, model="judge")
            await asyncio.sleep(0)
            return "PASS" if input == "good" else "FAIL"

        async with ProcessExecutor(
            chaos, "score", timeout=30, workers=2, llm_handler=handler
        ) as ex:
            outputs = ["good", "bad", "quota", "good"]
            outcomes = await ex.submit([_call(i, "llm", output=o) for i, o in enumerate(outputs)])
        assert _kinds(outcomes) == ["ok", "ok", "llm_error", "ok"]
        assert [o.value.score for o in outcomes if o.value] == [1.0, 0.0, 1.0]
        assert "HTTP 429: insufficient quota" in _message(outcomes[2])
        assert sorted(seen) == sorted(
            (i, "score", "Say PASS or FAIL.", o) for i, o in enumerate(outputs)
        )

    async def test_llm_without_handler_is_a_metric_error(self, executor: ProcessExecutor) -> None:
        """Without an llm_handler, skynet.llm in a worker fails that call with a clear error."""
        (outcome,) = await executor.submit([_call(0, "llm")])
        assert outcome.error is not None and outcome.error.kind == "metric_error"
        assert "no model" in _message(outcome)

    async def test_unpicklable_arguments(self, executor: ProcessExecutor) -> None:
        """A call whose output cannot be pickled fails alone with a message saying so."""
        calls = [_call(0), _call(1, output=lambda: None), _call(2)]
        outcomes = await executor.submit(calls)
        assert _kinds(outcomes) == ["ok", "metric_error", "ok"]
        assert "cannot be sent to a worker" in _message(outcomes[1])

    async def test_crash_is_served_by_the_warm_spare(self, chaos: UserFunction) -> None:
        """After a crash the next call runs in the warm spare, a process started (and
        done importing the file) before the crash, so no fresh start-up is waited for; a
        new spare follows, and no process, spare included, outlives the executor."""
        async with ProcessExecutor(chaos, "score", timeout=30, workers=1) as ex:
            (first,) = await ex.submit([_call(0)])
            await _spare_ready(ex)
            worker = first.value.extra["pid"]
            (spare,) = {p.pid for p in _workers()} - {worker}
            imported = chaos.path.with_suffix(".pids").read_text().split()
            assert str(spare) in imported  # the spare had imported the file before
            outcomes = await ex.submit([_call(1, "exit"), _call(2)])
            assert _kinds(outcomes) == ["worker_crash", "ok"]
            assert outcomes[1].value.extra["pid"] == spare
            stats = ex.statistics()
            assert (stats.crashes, stats.restarts, stats.spares_promoted) == (1, 1, 1)
            await _spare_ready(ex)  # a new spare is started in the background
            seen = {p.pid for p in _workers()}
            assert len(seen) == 2 and spare in seen and worker not in seen
            assert ex.statistics().spares_started == 2
        assert _children() == []
        assert not any(
            psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            for pid in seen
        )

    async def test_spare_killed_from_outside_is_replaced(self, chaos: UserFunction) -> None:
        """A spare that dies while idle (killed from outside) fails no call and is not
        counted as a crash; another spare is started."""
        async with ProcessExecutor(chaos, "score", timeout=30, workers=1) as ex:
            (first,) = await ex.submit([_call(0)])
            await _spare_ready(ex)
            (spare,) = {p.pid for p in _workers()} - {first.value.extra["pid"]}
            os.kill(spare, signal.SIGKILL)
            for _ in range(2000):  # at most 20 s
                stats = ex.statistics()
                if stats.spares_started == 2 and stats.spare_ready:
                    break
                await asyncio.sleep(0.01)
            assert (stats.spares_started, stats.spare_ready, stats.crashes) == (2, True, 0)
            assert _kinds(await ex.submit([_call(i) for i in range(5)])) == ["ok"] * 5

    async def test_file_that_kills_its_workers(self, tmp_path: Path) -> None:
        """A file whose import kills workers (no message sent) stops being retried after
        a few start-ups: every call fails with worker_crash, no spare is started."""
        path = write(
            tmp_path,
            "metric.py",
            f"""
            import os, signal
            if os.getpid() != {os.getpid()}:
                os.kill(os.getpid(), signal.SIGKILL)
            def score(input, output, expected=None):
                return 1.0, {{"feedback": ""}}
            """,
        )
        fn = load_function(path, "score")
        async with ProcessExecutor(fn, "score", timeout=30, workers=2) as ex:
            outcomes = await ex.submit([_call(i) for i in range(5)])
            assert _kinds(outcomes) == ["worker_crash"] * 5
            assert "die while starting" in _message(outcomes[0])
            assert "killed by SIGKILL" in _message(outcomes[0])
            assert ex.statistics().spares_started == 0
        assert _children() == []

    async def test_file_that_exits_in_workers(self, tmp_path: Path) -> None:
        """A file whose import calls os._exit in workers is named by the worker before it
        goes: every call fails with worker_crash saying the file exited while importing,
        with its code and line; no spare is started."""
        path = write(
            tmp_path,
            "metric.py",
            f"""
            import os
            if os.getpid() != {os.getpid()}:
                os._exit(3)
            def score(input, output, expected=None):
                return 1.0, {{"feedback": ""}}
            """,
        )
        fn = load_function(path, "score")
        async with ProcessExecutor(fn, "score", timeout=30, workers=2) as ex:
            outcomes = await ex.submit([_call(i) for i in range(5)])
            assert _kinds(outcomes) == ["worker_crash"] * 5
            message = _message(outcomes[0])
            assert "exited the process while importing (os._exit(3) at import)" in message
            assert "metric.py:4" in message
            assert ex.statistics().spares_started == 0
        assert _children() == []

    async def test_file_that_fails_in_workers(self, tmp_path: Path) -> None:
        """A file that imports in the engine but not in a worker fails every call with
        worker_crash naming the cause, instead of restarting workers for ever."""
        path = write(
            tmp_path,
            "metric.py",
            f"""
            import os
            if os.getpid() != {os.getpid()}:
                raise RuntimeError("only in the engine")
            def score(input, output, expected=None):
                return 1.0, {{"feedback": ""}}
            """,
        )
        fn = load_function(path, "score")
        async with ProcessExecutor(fn, "score", timeout=30, workers=2) as ex:
            outcomes = await ex.submit([_call(i) for i in range(5)])
            assert _kinds(outcomes) == ["worker_crash"] * 5
            assert "only in the engine" in _message(outcomes[0])
            assert _kinds(await ex.submit([_call(0)])) == ["worker_crash"]

    async def test_statistics_and_lifetime(self, chaos: UserFunction) -> None:
        """statistics() is a frozen snapshot; the executor refuses use outside its block."""
        ex = ProcessExecutor(chaos, "score", timeout=30, workers=1)
        with pytest.raises(RuntimeError, match="async with"):
            await ex.submit([_call(0)])
        async with ex:
            await ex.submit([_call(i) for i in range(10)])
            stats = ex.statistics()
        assert isinstance(stats, ProcessExecutorStatistics)
        assert (stats.workers, stats.workers_alive, stats.calls_done) == (1, 1, 10)
        assert stats.call_cost_ms is not None and stats.call_cost_ms > 0
        with pytest.raises(AttributeError):
            stats.workers = 3  # type: ignore[misc]
        with pytest.raises(RuntimeError, match="closed"):
            await ex.submit([_call(0)])
        with pytest.raises(RuntimeError, match="only once"):
            async with ex:
                pass

    def test_invalid_configuration(self, chaos: UserFunction) -> None:
        """Bad parameters are refused at construction with a ConfigError naming the
        parameter and carrying the value."""
        with pytest.raises(ConfigError, match="`timeout`") as info:
            ProcessExecutor(chaos, "score", timeout=0)
        assert (info.value.option, info.value.value) == ("timeout", 0)
        with pytest.raises(ConfigError, match="`workers`"):
            ProcessExecutor(chaos, "score", timeout=1, workers=0)
        with pytest.raises(ConfigError, match="`max_calls_per_worker`"):
            ProcessExecutor(chaos, "score", timeout=1, max_calls_per_worker=0)

    def test_runs_under_uvloop(self, chaos: UserFunction) -> None:
        """The executor works on uvloop too, including recovery from a crashed worker."""
        uvloop = pytest.importorskip("uvloop")

        async def main() -> list[str]:
            async with ProcessExecutor(chaos, "score", timeout=30, workers=2) as ex:
                return _kinds(await ex.submit([_call(0), _call(1, "exit"), _call(2)]))

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            assert runner.run(main()) == ["ok", "worker_crash", "ok"]


PARENT = """
import asyncio, sys
from evaluator._call._calls import ScoreCall
from evaluator._call._loader import load_function
from evaluator._executors._process._executor import ProcessExecutor

async def wait_for(ex, ready):
    while not ready(ex.statistics()):
        await asyncio.sleep(0.01)

async def main():
    fn = load_function(sys.argv[1], "score")
    async with ProcessExecutor(fn, "score", timeout=60, workers=2) as ex:
        await ex.submit([ScoreCall(1, 1, {"mode": "ok", "i": 1}, "a", {"answer": "a"})])
        await wait_for(ex, lambda s: s.spare_ready and s.fork_server not in (None, "starting"))
        # A crash: the spare takes its place, and a new spare is forked by the server.
        await ex.submit([ScoreCall(2, 2, {"mode": "exit", "i": 2}, "a", None)])
        await wait_for(ex, lambda s: s.workers_forked == 1 and s.spare_ready)
        call = ScoreCall(0, 0, {"mode": "hang", "i": 0, "marker": sys.argv[2]}, "a", None)
        task = asyncio.create_task(ex.submit([call]))
        print("ready", flush=True)
        await task

asyncio.run(main())
"""


@pytest.fixture
def parent_script(tmp_path: Path) -> Path:
    return write(tmp_path, "parent.py", PARENT)


@pytest.mark.slow
def test_workers_exit_when_engine_is_killed(
    chaos: UserFunction, parent_script: Path, tmp_path: Path
) -> None:
    """After SIGKILL of the engine, its processes (one worker busy in user code, one
    idle, the fork server and the warm spare it forked) exit by themselves within 5 s."""
    marker = tmp_path / "hang.started"
    with subprocess.Popen(
        [sys.executable, str(parent_script), str(chaos.path), str(marker)],
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        try:
            assert parent.stdout is not None
            assert parent.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 10
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            processes = psutil.Process(parent.pid).children(recursive=True)
            assert len(processes) == 4
            forked = [p for p in processes if p.ppid() != parent.pid]
            assert len(forked) == 1  # the spare, a child of the fork server
        finally:
            parent.send_signal(signal.SIGKILL)
            parent.wait()
    _, alive = psutil.wait_procs(processes, timeout=5)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []


MODES = ["ok", "raise", "invalid", "slow", "exit"]
EXPECTED = {
    "ok": "ok",
    "raise": "metric_error",
    "invalid": "invalid_return",
    "slow": "ok",
    "exit": "worker_crash",
}


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(modes=st.lists(st.sampled_from(MODES), min_size=1, max_size=12))
def test_one_outcome_per_call_of_the_right_kind(chaos: UserFunction, modes: list[str]) -> None:
    """Whatever mix of ok, raising, slow, invalid and crashing calls, every call gets
    exactly one outcome, in order, of the kind its behaviour implies."""

    async def main() -> list[Outcome]:
        async with ProcessExecutor(chaos, "score", timeout=30, workers=2) as ex:
            half = len(modes) // 2
            first, second = await asyncio.gather(
                ex.submit([_call(i, m) for i, m in enumerate(modes[:half])]),
                ex.submit([_call(i, m) for i, m in enumerate(modes[half:], half)]),
            )
            return first + second

    outcomes = asyncio.run(main())
    assert _kinds(outcomes) == [EXPECTED[m] for m in modes]
