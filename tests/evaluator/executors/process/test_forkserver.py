"""The process executor's fork server: replacements forked in milliseconds, each with a
spawned worker's guarantees (its own memory limit, no inherited thread, death with the
engine), the user's file preloaded only where that is safe."""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from evaluator._call._calls import Outcome, ScoreCall
from evaluator._call._loader import UserFunction, load_function
from evaluator._executors._process._executor import ProcessExecutor, ProcessExecutorStatistics
from evaluator._executors._process._forkserver import fork_supported
from tests._helpers import until

# Real worker processes are what these tests are about (the mark implies slow).
pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not fork_supported(), reason="the fork server is Linux only"),
]

# Records each process that imports it; ``thread`` makes the import start a thread,
# ``keep`` makes it keep a file open.
METRIC = """
import os, threading, time
from pathlib import Path

with open(Path(__file__).with_suffix(".pids"), "a") as f:
    f.write(f"{os.getpid()}\\n")
if THREAD:
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
if KEEP:
    KEPT = open(__file__)  # a file (a connection, a log) the import keeps open

def score(input, output, expected=None):
    if input["mode"] == "exit":
        os._exit(3)
    if input["mode"] == "memory":
        block = bytearray(1024 * 1024 * 1024)
        return float(len(block)), {"feedback": "allocated"}
    return 1.0, {"feedback": "ok", "pid": os.getpid()}
"""


def _metric(folder: Path, *, thread: bool = False, keep: bool = False) -> UserFunction:
    path = folder / "metric.py"
    source = textwrap.dedent(METRIC).replace("THREAD", str(thread)).replace("KEEP", str(keep))
    path.write_text(source)
    return load_function(path, "score")


def _call(i: int, mode: str = "ok") -> ScoreCall:
    return ScoreCall(i, f"ex{i}", {"mode": mode}, "a", None)


def _kinds(outcomes: list[Outcome]) -> list[str]:
    return [o.error.kind if o.error else "ok" for o in outcomes]


async def _until(
    ex: ProcessExecutor, ready: Callable[[ProcessExecutorStatistics], bool]
) -> ProcessExecutorStatistics:
    """The statistics, once ``ready`` holds of them."""
    return await until(
        lambda: stats if ready(stats := ex.statistics()) else None,
        lambda: f"ready: {ex.statistics()}",
    )


def _server_ready(stats: ProcessExecutorStatistics) -> bool:
    return stats.spare_ready and stats.fork_server not in (None, "starting")


async def _forked_pid(ex: ProcessExecutor) -> int:
    """Crash twice: the first crash promotes the spawned spare and forks a new spare,
    the second promotes that forked one. The pid of the worker that runs next."""
    await _until(ex, _server_ready)
    for i in (100, 101):
        assert _kinds(await ex.submit([_call(i, "exit")])) == ["worker_crash"]
        await _until(ex, lambda s: s.spare_ready)
    (outcome,) = await ex.submit([_call(102)])
    assert outcome.value is not None
    pid: int = outcome.value.extra["pid"]
    return pid


def _fork_server(pid: int) -> psutil.Process:
    """The worker ``pid``'s parent: the fork server, a child of this process."""
    server = psutil.Process(pid).parent()
    assert server is not None and server.ppid() == os.getpid()
    assert "_zygote" in " ".join(server.cmdline())
    return server


def _imports(fn: UserFunction) -> list[str]:
    return fn.path.with_suffix(".pids").read_text().split()


class TestForkServer:
    async def test_replacement_is_forked_with_its_own_memory_limit(self, tmp_path: Path) -> None:
        """A worker forked after a crash is a child of the fork server, its address space
        is limited to memory_limit_mb, and going past it is that call's worker_crash."""
        fn = _metric(tmp_path)
        async with ProcessExecutor(fn, "score", timeout=30, workers=1, memory_limit_mb=300) as ex:
            pid = await _forked_pid(ex)
            _fork_server(pid)
            limits = await asyncio.to_thread(Path(f"/proc/{pid}/limits").read_text)
            (line,) = [ln for ln in limits.splitlines() if ln.startswith("Max address space")]
            assert line.split()[3:5] == [str(300 * 1024 * 1024)] * 2
            outcomes = await ex.submit([_call(200, "memory"), _call(201)])
            stats = ex.statistics()
        assert _kinds(outcomes) == ["worker_crash", "ok"]
        assert "memory limit of 300 MB exceeded" in str(outcomes[0].error)
        assert stats.workers_forked >= 2 and stats.fork_server == "preloads the user's file"

    async def test_preloaded_file_is_imported_once_and_forks_have_one_thread(
        self, tmp_path: Path
    ) -> None:
        """The fork server imports the user's file once; a forked worker does not import
        it again and runs no thread but its main one (no thread crosses the fork)."""
        fn = _metric(tmp_path)
        async with ProcessExecutor(fn, "score", timeout=30, workers=1) as ex:
            pid = await _forked_pid(ex)
            server = _fork_server(pid)
            assert psutil.Process(pid).num_threads() == 1
            assert server.num_threads() == 1
            imported = _imports(fn)
        assert imported.count(str(server.pid)) == 1
        assert str(pid) not in imported

    async def test_file_whose_import_starts_a_thread_is_not_preloaded(self, tmp_path: Path) -> None:
        """A file whose import starts a thread is not preloaded (forking a threaded
        process is unsafe): the statistics say why, the forked worker imports the file
        itself, and its calls run."""
        fn = _metric(tmp_path, thread=True)
        async with ProcessExecutor(fn, "score", timeout=30, workers=1) as ex:
            pid = await _forked_pid(ex)
            server = _fork_server(pid)
            stats = ex.statistics()
            assert server.num_threads() == 1
            assert _kinds(await ex.submit([_call(i) for i in range(5)])) == ["ok"] * 5
        assert stats.fork_server is not None and "thread" in stats.fork_server
        assert "each worker imports" in stats.fork_server
        assert str(pid) in _imports(fn) and str(server.pid) not in _imports(fn)

    async def test_file_whose_import_keeps_a_file_open_is_not_preloaded(
        self, tmp_path: Path
    ) -> None:
        """A file whose import keeps a file or socket open is not preloaded (every fork
        would share that descriptor): the statistics say why, and each forked worker
        imports the file itself."""
        fn = _metric(tmp_path, keep=True)
        async with ProcessExecutor(fn, "score", timeout=30, workers=1) as ex:
            pid = await _forked_pid(ex)
            server = _fork_server(pid)
            stats = ex.statistics()
            assert _kinds(await ex.submit([_call(i) for i in range(5)])) == ["ok"] * 5
        assert stats.fork_server is not None and "open" in stats.fork_server
        assert "each worker imports" in stats.fork_server
        assert str(pid) in _imports(fn) and str(server.pid) not in _imports(fn)
        fn.module.KEPT.close()  # type: ignore[union-attr]  # this process imported it too

    async def test_fork_server_killed_from_outside(self, tmp_path: Path) -> None:
        """Killing the fork server ends the workers it forked (they die with it); their
        calls are settled, and workers are started as fresh interpreters from then on."""
        fn = _metric(tmp_path)
        async with ProcessExecutor(fn, "score", timeout=30, workers=1) as ex:
            pid = await _forked_pid(ex)
            server = _fork_server(pid)
            server.kill()
            psutil.wait_procs([psutil.Process(pid)], timeout=5)
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
            stats = await _until(ex, lambda s: s.fork_server is None and s.workers_alive == 1)
            outcomes = await ex.submit([_call(i) for i in range(5)])
        assert _kinds(outcomes) == ["ok"] * 5
        assert {o.value.extra["pid"] for o in outcomes if o.value} != {pid}
        assert stats.workers_forked >= 1

    async def test_nothing_outlives_the_executor(self, tmp_path: Path) -> None:
        """Closing the executor ends the fork server and every worker it forked."""
        fn = _metric(tmp_path)
        seen: list[Any] = []
        async with ProcessExecutor(fn, "score", timeout=30, workers=1) as ex:
            pid = await _forked_pid(ex)
            seen = [_fork_server(pid), *psutil.Process().children(recursive=True)]
        _, alive = psutil.wait_procs(seen, timeout=5)
        assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
        assert [p for p in psutil.Process().children(recursive=True) if p.is_running()] == []

    def test_signals_of_a_forked_worker(self, tmp_path: Path) -> None:
        """A forked worker ignores neither SIGINT nor SIGTERM (what user code starts must
        not inherit an ignored signal), leads a process group of its own (the terminal's
        Ctrl-C is the engine's to handle), and has SIGCHLD back at its default."""

        async def main() -> tuple[str, str, int, int]:
            fn = _metric(tmp_path)
            async with ProcessExecutor(fn, "score", timeout=30, workers=1) as ex:
                pid = await _forked_pid(ex)
                status = await asyncio.to_thread(Path(f"/proc/{pid}/status").read_text)
                group = os.getpgid(pid)
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            return fields["SigIgn"].strip(), fields["SigCgt"].strip(), pid, group

        ignored, caught, pid, group = asyncio.run(main())
        for sig in (signal.SIGINT, signal.SIGTERM):
            assert not int(ignored, 16) & (1 << (sig - 1))
        assert not int(caught, 16) & (1 << (signal.SIGCHLD - 1))
        assert group == pid != os.getpgid(0)

    async def test_fork_server_can_be_turned_off(self, tmp_path: Path) -> None:
        """With fork_server=False no fork server starts: replacements after crashes are
        fresh interpreters (children of this process), and the statistics say so."""
        fn = _metric(tmp_path)
        async with ProcessExecutor(fn, "score", timeout=30, workers=1, fork_server=False) as ex:
            await ex.submit([_call(0)])
            await _until(ex, lambda s: s.spare_ready)
            for i in (1, 2):
                assert _kinds(await ex.submit([_call(i, "exit")])) == ["worker_crash"]
                await _until(ex, lambda s: s.spare_ready)
            (outcome,) = await ex.submit([_call(3)])
            stats = ex.statistics()
        assert outcome.value is not None
        assert (stats.workers_forked, stats.fork_server, stats.crashes) == (0, None, 2)
        assert str(outcome.value.extra["pid"]) in _imports(fn)
