"""The loop starter: uvloop, a return value, and a stop signal (a real SIGINT or SIGTERM
to a real process) that cancels the command, lets it print its partial report, and ends
in 130 (SIGINT) or 143 (SIGTERM)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evaluator._cli import _loop

ROOT = Path(__file__).resolve().parents[3]

# A command shaped like `run`: on cancellation it prints what it has, then lets the
# cancellation go on. Exits as _main does: 128 + the signal on Interrupted, else its own
# code.
COMMAND = """
import asyncio, signal, sys
from evaluator._cli import _loop

async def command():
    print("ready", flush=True)
    done = 0
    try:
        while True:
            done += 1
            await asyncio.sleep(0.001)
    except asyncio.CancelledError:
        print(f"partial report: {done} done", flush=True)
        if "--slow-cleanup" in sys.argv:
            print("cleaning up", flush=True)
            await asyncio.sleep(60)
        raise

try:
    _loop.run(command, note="interrupted: kept")
except _loop.Interrupted as exc:
    print(exc.note, exc.signum, file=sys.stderr)
    sys.exit(128 + exc.signum)
except KeyboardInterrupt:
    print("hard stop", file=sys.stderr)
    sys.exit(99)
"""


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "command.py"
    script.write_text(textwrap.dedent(COMMAND))
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _wait_for(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdout is not None
    got = proc.stdout.readline()
    assert got == line + "\n", got


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
class TestStopSignal:
    @pytest.mark.parametrize(("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
    def test_stop_signal_cancels_the_command_which_reports(
        self, tmp_path: Path, stop: signal.Signals, code: int
    ) -> None:
        """SIGINT or SIGTERM mid-command (both are stop signals by default): the command
        sees a cancellation, prints its partial report, and run() raises Interrupted with
        the note and the signal; no traceback."""
        assert stop in _loop.STOP_SIGNALS
        proc = _start(tmp_path)
        try:
            _wait_for(proc, "ready")
            proc.send_signal(stop)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == code, stderr
        assert stdout.startswith("partial report: ") and "Traceback" not in stderr
        assert stderr.strip() == f"interrupted: kept {int(stop)}"

    def test_second_sigterm_ends_the_process(self, tmp_path: Path) -> None:
        """A second SIGTERM while the command cleans up is not caught: SIGTERM's own
        action (the process ends by the signal), as without the starter."""
        proc = _start(tmp_path, "--slow-cleanup")
        try:
            _wait_for(proc, "ready")
            proc.send_signal(signal.SIGTERM)
            _wait_for_prefix(proc, "partial report: ")
            _wait_for(proc, "cleaning up")
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == -signal.SIGTERM

    def test_second_sigint_stops_at_once(self, tmp_path: Path) -> None:
        """A second SIGINT while the command cleans up is not caught: KeyboardInterrupt
        at once, as without the starter."""
        proc = _start(tmp_path, "--slow-cleanup")
        try:
            _wait_for(proc, "ready")
            proc.send_signal(signal.SIGINT)
            _wait_for_prefix(proc, "partial report: ")
            _wait_for(proc, "cleaning up")
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 99 and "hard stop" in stderr, stderr


def _wait_for_prefix(proc: subprocess.Popen[str], prefix: str) -> None:
    assert proc.stdout is not None
    got = proc.stdout.readline()
    assert got.startswith(prefix), got


class TestRun:
    def test_returns_the_value_on_uvloop(self) -> None:
        """run() returns the command's value; the loop is uvloop's when it is installed."""
        pytest.importorskip("uvloop")

        async def command() -> str:
            return type(asyncio.get_running_loop()).__module__

        assert _loop.run(command).startswith("uvloop")

    def test_signal_handlers_are_put_back(self) -> None:
        """After run(), SIGINT's handler is the one from before (and SIGTERM's)."""
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        async def command() -> int:
            return 0

        _loop.run(command, signals=(signal.SIGINT, signal.SIGTERM))
        assert {sig: signal.getsignal(sig) for sig in before} == before

    @pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
    def test_a_command_that_ends_on_the_signal_keeps_its_value(self) -> None:
        """A command whose normal end is the stop signal takes the cancellation back and
        returns: its value stands, no Interrupted (the simulator's way)."""

        async def command() -> str:
            try:
                os.kill(os.getpid(), signal.SIGINT)  # delivered to the starter's handler
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()
            return "stopped cleanly"

        assert _loop.run(command) == "stopped cleanly"

    def test_an_unrequested_cancellation_is_not_an_interruption(self) -> None:
        """A cancellation no stop signal asked for is a bug, raised as it is."""

        async def command() -> None:
            raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):
            _loop.run(command)
