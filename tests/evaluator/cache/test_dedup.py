"""One payment per identical call (issue 28): a key being paid for is waited for, not paid
again, in one Evaluator and across processes on one disk cache; an owner that fails, is
cancelled or crashes hands the key over."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator._cache import DiskStore
from evaluator._cli import main
from evaluator._models import Models
from evaluator._pipeline import Evaluator
from llm_client import ModelConfig, Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["q"])
"""
JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    verdict = llm("Answer PASS or FAIL.", input=f"{input['q']} {output}")
    ok = float(len(verdict) % 2)
    return ok, {"feedback": f"verdict {verdict[:20]}", "scores": {"odd": ok}}
"""
# A CPU metric held by the test: its first call says so and waits for `go`, then fails
# when told to; every call is counted.
GATED = """
import dedup_gate as gate

def score(input, output, expected=None):
    gate.calls.append(input["n"])
    if len(gate.calls) == 1:
        gate.started.set()
        gate.go.wait(60)
        if gate.fail_first:
            raise ValueError("the owner fails")
    return 1.0, {"feedback": "ok"}
"""
# A CPU metric that, in the process told so, blocks on its first call after saying so.
BLOCKING = """
import os, sys, threading

def score(input, output, expected=None):
    if os.environ.get("DEDUP_BLOCK"):
        print("started", flush=True)
        threading.Event().wait()
    return 1.0, {"feedback": "ok"}
"""
# The process that holds claims and is killed: a five-second lease, so that the test
# sees the takeover soon after the kill.
HOLDER = """
import asyncio, sys
import evaluator._cache._cache as cache_module
from evaluator._pipeline import Evaluator

cache_module.DEFAULT_LEASE_SECONDS = 5.0
rows = [{"id": f"e{i}", "input": {"n": i}, "output": "x"} for i in range(int(sys.argv[3]))]

async def main():
    async with Evaluator(sys.argv[1], cache=sys.argv[2], execution="inline") as ev:
        await ev.evaluate_many("a", rows)

asyncio.run(main())
"""


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def rows(n: int) -> list[dict[str, Any]]:
    return [{"id": f"e{i}", "input": {"q": f"question {i}", "n": i}} for i in range(n)]


def scored(n: int) -> list[dict[str, Any]]:
    """Rows for a score-only run: the output given, as the crash test's holder has them."""
    return [{"id": f"e{i}", "input": {"n": i}, "output": "x"} for i in range(n)]


def models(sim: Simulator) -> Models:
    def config(name: str) -> ModelConfig:
        return ModelConfig(model=name, base_url=sim.base_url, api_key_env=None)

    return Models(program=config("sim-program"), metric=config("sim-judge"))


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    # Slow enough that the evaluations below overlap: each key is in flight a while.
    async with Simulator(SimulatorConfig(latency_ms=100, jitter_ms=50)) as simulator:
        yield simulator


@pytest.fixture
def gate() -> Iterator[types.SimpleNamespace]:
    state = types.SimpleNamespace(
        started=threading.Event(), go=threading.Event(), calls=[], fail_first=False
    )
    sys.modules["dedup_gate"] = state  # type: ignore[assignment]
    try:
        yield state
    finally:
        state.go.set()
        del sys.modules["dedup_gate"]


def on_wait(ev: Evaluator) -> asyncio.Event:
    """An event set when a chunk of ``ev`` starts waiting for another's key."""
    cache = ev._cache
    assert cache is not None
    waiting = asyncio.Event()
    wait = cache.wait

    async def waited(found: Any, examples: Any) -> list[int]:
        waiting.set()
        return await wait(found, examples)

    cache.wait = waited  # type: ignore[method-assign]
    return waiting


class TestOneEvaluator:
    async def test_four_at_once_pay_once_per_key(self, tmp_path: Path, sim: Simulator) -> None:
        """Four evaluate_many at once over the same 50 examples and artifact: the server
        sees one program and one judge request per distinct key, and every result is
        the same in the four."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "judge.py", JUDGE)
        async with asyncio.timeout(120):
            async with Evaluator(metric, program, models=models(sim), cache=True) as ev:
                runs = await asyncio.gather(
                    *(ev.evaluate_many("Answer briefly.", rows(50)) for _ in range(4))
                )
                stats = ev.cache_statistics()
        assert sim.statistics().requests == 2 * 50
        assert all(len(run) == 50 and all(r.ok for r in run) for run in runs)
        assert sum(not r.cached for run in runs for r in run) == 50
        assert stats is not None and stats.shared > 0 and stats.taken_over == 0
        for i in range(50):
            assert len({(run[i].score, run[i].feedback, run[i].output) for run in runs}) == 1

    async def test_owner_fails_waiter_runs_it(
        self, tmp_path: Path, gate: types.SimpleNamespace
    ) -> None:
        """The owner's call fails (errors are not cached): the waiter runs the example
        itself and gets a result; nothing hangs."""
        gate.fail_first = True
        metric = write(tmp_path, "gated.py", GATED)
        async with asyncio.timeout(60):
            async with Evaluator(metric, cache=True, execution="inline") as ev:
                waiting = on_wait(ev)
                owner = asyncio.create_task(ev.evaluate_many("a", scored(1)))
                await asyncio.to_thread(gate.started.wait, 30)
                waiter = asyncio.create_task(ev.evaluate_many("a", scored(1)))
                await waiting.wait()
                gate.go.set()
                (failed,), (taken,) = await owner, await waiter
                stats = ev.cache_statistics()
        assert failed.error is not None and "owner fails" in failed.error.message
        assert taken.ok and not taken.cached and taken.score == 1.0
        assert gate.calls == [0, 0]
        assert stats is not None and (stats.taken_over, stats.stored) == (1, 1)

    async def test_owner_cancelled_waiter_takes_over(
        self, tmp_path: Path, gate: types.SimpleNamespace
    ) -> None:
        """The owner's evaluation is cancelled while its call runs: the waiter takes the
        key over, runs it and finishes."""
        metric = write(tmp_path, "gated.py", GATED)
        async with asyncio.timeout(60):
            async with Evaluator(metric, cache=True, execution="inline") as ev:
                waiting = on_wait(ev)
                owner = asyncio.create_task(ev.evaluate_many("a", scored(3)))
                await asyncio.to_thread(gate.started.wait, 30)
                waiter = asyncio.create_task(ev.evaluate_many("a", scored(3)))
                await waiting.wait()
                owner.cancel()
                gate.go.set()
                with pytest.raises(asyncio.CancelledError):
                    await owner
                taken = await waiter
                stats = ev.cache_statistics()
        assert [r.example_id for r in taken] == ["e0", "e1", "e2"]
        assert all(r.ok and r.score == 1.0 for r in taken)
        assert stats is not None and stats.taken_over >= 1

    async def test_same_key_twice_in_one_call(self, tmp_path: Path, sim: Simulator) -> None:
        """One call with the same example twice pays once; both get the result."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, program, models=models(sim), cache=True) as ev:
            first, second = await ev.evaluate_many("Answer.", rows(1) * 2, unique_ids=False)
        assert sim.statistics().requests == 2
        assert first.ok and second.ok and first.score == second.score
        assert [first.cached, second.cached].count(True) == 1


@pytest.mark.process
class TestAcrossProcesses:
    async def test_two_cli_runs_on_one_cache_pay_once(self, tmp_path: Path, sim: Simulator) -> None:
        """Two `skynet-eval run --cache DIR` started together on one cache and one
        server: the server sees one request per distinct key and call, not two."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "judge.py", JUDGE)
        data = tmp_path / "data.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows(40)))
        command = [
            sys.executable, "-m", "evaluator", "run",
            "--program", str(program), "--metric", str(metric),
            "--artifact-text", "Answer briefly.", "--data", str(data),
            "--model", "sim-program", "--base-url", sim.base_url,
            "--metric-model", "sim-judge", "--metric-base-url", sim.base_url,
            "--api-key-env", "none", "--concurrency", "4",
            "--cache", str(tmp_path / "cache"), "--json",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        pipe = asyncio.subprocess.PIPE
        runs = [
            await asyncio.create_subprocess_exec(
                *command,
                "--output",
                str(tmp_path / f"run{i}.jsonl"),
                stdout=pipe,
                stderr=pipe,
                env=env,
                cwd=tmp_path,
            )
            for i in range(2)
        ]
        reports = []
        async with asyncio.timeout(300):
            for proc in runs:
                out, err = await proc.communicate()
                assert proc.returncode == 0, err.decode()
                reports.append(json.loads(out))
        assert sim.statistics().requests == 2 * 40
        assert sum(r["cache"]["executed"] for r in reports) == 40
        assert all(r["n"] == 40 and r["ok"] == 40 for r in reports)
        assert sum(r["cache"]["shared"] for r in reports) > 0  # they did overlap

    def test_crashed_owner_is_taken_over_after_its_lease(self, tmp_path: Path) -> None:
        """A process holding claims is killed (-9) mid-call: a run on the same cache
        waits for its keys, takes them over once the lease runs out, and finishes."""
        for folder in ("metric", "holder"):  # the holder apart: not one of the metric's helpers
            (tmp_path / folder).mkdir()
        metric = write(tmp_path / "metric", "blocking.py", BLOCKING)
        holder = write(tmp_path / "holder", "holder.py", HOLDER)
        cache = tmp_path / "cache"
        # Another live owner on the file (the test, claiming): the holder claims there.
        witness = DiskStore.open(cache)
        assert witness.join("witness", 300) is False
        witness.write(owner="witness", share=True)
        proc = subprocess.Popen(
            [sys.executable, str(holder), str(metric), str(cache), "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT), "DEDUP_BLOCK": "1"},
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == b"started\n", proc.stderr.read() if proc.stderr else line
            store = DiskStore.open(cache)
            try:
                claimed = store._conn.execute("SELECT count(*) FROM claims").fetchone()[0]
            finally:
                store.close()
            assert claimed >= 1
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)

        async def take_over() -> tuple[list[Any], Any]:
            async with asyncio.timeout(60):
                async with Evaluator(metric, cache=cache, execution="inline") as ev:
                    return await ev.evaluate_many("a", scored(5)), ev.cache_statistics()

        try:
            results, stats = asyncio.run(take_over())
        finally:
            witness.release("witness")
            witness.close()
        assert all(r.ok and not r.cached for r in results)
        assert stats is not None and stats.taken_over >= 1 and stats.stored == 5


class TestSoloOwner:
    """A claim in the file is a write transaction: made only while another run shares it."""

    async def test_lone_owner_claims_nothing_in_the_file(self, tmp_path: Path) -> None:
        """One run on a cache directory: every result stored, no claim row written."""
        metric = write(tmp_path, "blocking.py", BLOCKING)
        async with Evaluator(metric, cache=tmp_path / "cache", execution="inline") as ev:
            results = await ev.evaluate_many("a", scored(30))
            stats = ev.cache_statistics()
        assert all(r.ok for r in results)
        assert stats is not None and stats.stored == 30 and stats.claims_written == 0

    async def test_second_owner_makes_claims_start(
        self, tmp_path: Path, gate: types.SimpleNamespace
    ) -> None:
        """A solo run is paying for a key when a second run opens on the cache: the second
        opens only once the first has claimed that key in the file, waits for it instead of
        paying, and the first claims every key from then on."""
        metric = write(tmp_path, "gated.py", GATED)
        cache = tmp_path / "cache"
        async with asyncio.timeout(60):
            async with Evaluator(metric, cache=cache, execution="inline") as first:
                paying = asyncio.create_task(first.evaluate_many("a", scored(1)))
                await asyncio.to_thread(gate.started.wait, 30)
                before = first.cache_statistics()
                async with Evaluator(metric, cache=cache, execution="inline") as second:
                    after = first.cache_statistics()
                    waiting = on_wait(second)
                    waiter = asyncio.create_task(second.evaluate_many("a", scored(1)))
                    await waiting.wait()
                    gate.go.set()
                    (paid,), (shared,) = await paying, await waiter
                    await first.evaluate_many("a", scored(4))  # three new keys
                    firsts, seconds = first.cache_statistics(), second.cache_statistics()
        assert before is not None and before.claims_written == 0
        assert after is not None and after.claims_written == 1  # the key it was paying for
        assert paid.ok and not paid.cached and shared.ok and shared.cached
        assert gate.calls == [0, 1, 2, 3]
        assert seconds is not None and seconds.shared == 1
        assert firsts is not None and firsts.claims_written == 4

    def test_expired_owners_rows_go_at_open_and_clear_removes_claims(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A crashed owner's claims stay until the next open drops them (its lease over);
        `cache clear` removes every claim and owner row."""
        cache = tmp_path / "cache"

        def count(store: DiskStore, table: str) -> int:
            return int(store._conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

        store = DiskStore.open(cache)
        try:
            store.join("live", 300)
            store.write(claims=[b"j" * 16], owner="live", lease=300, share=True)
            store.join("crashed", -1.0)  # its lease already over
            store.write(claims=[b"k" * 16], owner="crashed", lease=-1.0, share=True)
            assert (count(store, "claims"), count(store, "owners")) == (2, 2)
            assert store.join("next", 300) is True  # "live" is still live
            assert store._conn.execute("SELECT owner FROM claims").fetchall() == [("live",)]
            assert count(store, "owners") == 2
        finally:
            store.close()
        assert main(["cache", "clear", str(cache)]) == 0
        capsys.readouterr()
        store = DiskStore.open(cache)
        try:
            assert [count(store, t) for t in ("claims", "owners", "solo")] == [0, 0, 0]
        finally:
            store.close()
