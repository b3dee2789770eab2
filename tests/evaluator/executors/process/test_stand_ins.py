"""Stand-ins: a worker whose call holds its slot without using its core (a sleep, a hang,
a wait on a model call) gets a forked stand-in that takes the pending work; a call busy
on its core never does. Real worker processes and a real fork server."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from evaluator._call._calls import ScoreCall
from evaluator._call._loader import load_function
from evaluator._executors._process._executor import ProcessExecutor
from evaluator._executors._process._forkserver import fork_supported
from evaluator._executors._process._pool import cpu_state

# Real worker processes are what these tests are about (the mark implies slow).
pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        not fork_supported() or cpu_state(1) is None,
        reason="stand-ins need the fork server and /proc",
    ),
]

METRIC = """
import os
import time

def score(input, output, expected=None):
    if "log" in input:  # one line per execution, appended whole (O_APPEND)
        fd = os.open(input["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, b"%d\\n" % input["id"])
        os.close(fd)
    if input["mode"] == "sleep":
        time.sleep(input["s"])
    elif input["mode"] == "spin":
        end = time.perf_counter() + input["s"]
        while time.perf_counter() < end:
            pass
    return 1.0, {"feedback": input["mode"]}
"""


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    """One worker, its fork server ready (stand-ins are forked, never spawned)."""
    path = tmp_path / "metric.py"
    path.write_text(METRIC)
    fn = load_function(path, "score")
    async with ProcessExecutor(fn, "score", timeout=30, workers=1) as ex:
        await ex.submit([ScoreCall(0, 0, {"mode": "ok"}, None)])
        for _ in range(3000):  # a guard against a hang: 30 s
            if ex.statistics().fork_server not in (None, "starting"):
                break
            await asyncio.sleep(0.01)
        assert ex.statistics().fork_server == "preloads the user's file"
        yield ex


def _calls(start: int, n: int, mode: str, seconds: float = 0.0) -> list[ScoreCall]:
    return [ScoreCall(i, i, {"mode": mode, "s": seconds}, None) for i in range(start, start + n)]


async def test_a_sleeping_call_gets_a_stand_in_that_takes_the_other_work(
    executor: ProcessExecutor,
) -> None:
    """With the one worker asleep in a call for 3 s, the calls submitted after it run at
    once in a stand-in and are back while the sleeper still sleeps; once it wakes, the
    idle stand-in retires."""
    sleeper = asyncio.create_task(executor.submit(_calls(1, 1, "sleep", 3.0)))
    await asyncio.sleep(0.2)
    quick = await asyncio.wait_for(executor.submit(_calls(2, 50, "ok")), timeout=20)
    assert [o.error for o in quick] == [None] * 50
    assert not sleeper.done()  # the quick calls did not wait for it
    stats = executor.statistics()
    assert stats.stand_ins_started >= 1
    (slept,) = await asyncio.wait_for(sleeper, timeout=30)
    assert slept.error is None
    for _ in range(1000):  # the stand-in retires: one worker again (guard: 10 s)
        if executor.statistics().workers_alive == 1:
            break
        await asyncio.sleep(0.01)
    assert executor.statistics().workers_alive == 1


async def test_a_call_busy_on_its_core_gets_no_stand_in(executor: ProcessExecutor) -> None:
    """A call that keeps its core busy for a second holds a core, not just a slot: no
    stand-in, and the calls after it wait for the one worker."""
    spinner = asyncio.create_task(executor.submit(_calls(1, 1, "spin", 1.0)))
    await asyncio.sleep(0.2)
    quick = await asyncio.wait_for(executor.submit(_calls(2, 5, "ok")), timeout=30)
    assert spinner.done()  # the quick calls waited behind it, in its worker
    assert [o.error for o in quick] == [None] * 5
    assert executor.statistics().stand_ins_started == 0
    await spinner


async def test_calls_queued_behind_a_stalled_call_are_taken_back(
    executor: ProcessExecutor,
) -> None:
    """One submit whose first call sleeps 3 s and 200 quick calls after it, all in the
    one worker's batch: the quick calls are taken back from behind the sleeper, run by a
    stand-in, and reported done (through ``progress``) while the sleeper still sleeps;
    every call gets its one outcome, in order."""
    told: list[int] = []
    calls = _calls(1, 1, "sleep", 3.0) + _calls(2, 200, "ok")
    submit = asyncio.create_task(executor.submit(calls, told.append))
    for _ in range(2000):  # guard: 20 s
        if sum(told) >= 200:
            break
        await asyncio.sleep(0.01)
    assert sum(told) == 200 and not submit.done()
    outcomes = await asyncio.wait_for(submit, timeout=30)
    assert [o.error for o in outcomes] == [None] * 201
    assert [o.value.feedback for o in outcomes] == ["sleep"] + ["ok"] * 200
    stats = executor.statistics()
    assert stats.calls_taken_back >= 1 and stats.stand_ins_started >= 1


async def test_each_call_runs_once_across_many_cuts(
    executor: ProcessExecutor, tmp_path: Path
) -> None:
    """Eight sleepers, each followed by 60 quick calls, in one submit: each sleeper
    stalls the worker (or stand-in) running it and the calls behind it are taken back,
    again and again. Every call gets its one outcome, and every call ran exactly once
    (each execution appends its id to a log)."""
    log = tmp_path / "ran.log"
    calls = []
    for i in range(8 * 61):
        mode = "sleep" if i % 61 == 0 else "ok"
        calls.append(ScoreCall(i, i, {"mode": mode, "s": 0.3, "id": i, "log": str(log)}, None))
    outcomes = await asyncio.wait_for(executor.submit(calls), timeout=60)
    assert [o.error for o in outcomes] == [None] * len(calls)
    stats = executor.statistics()
    assert stats.calls_taken_back >= 1 and stats.stand_ins_started >= 1
    ran = Counter(int(line) for line in log.read_text().split())
    assert ran == Counter(range(len(calls)))
