"""``skynet-eval run`` killed mid-run: whole lines, ``--resume`` finishes, workers go too.

Real processes: the CLI runs as ``python -m evaluator run`` in a subprocess; its metric
runs in worker processes (the process executor).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

# Real worker processes are what these tests are about (the mark implies slow).
pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
N = 400

# A few milliseconds a call: a run lasts about a second on 2 workers, long enough to be
# killed at many points, short enough for CI.
METRIC = """
import time

def score(input, output, expected=None):
    time.sleep(0.004)
    good = output == expected["label"]
    return (1.0 if good else 0.0), {"feedback": "Correct." if good else "Wrong label."}
"""


def _files(tmp_path: Path, n: int = N) -> tuple[Path, Path, Path]:
    metric = tmp_path / "metric.py"
    metric.write_text(textwrap.dedent(METRIC))
    data = tmp_path / "data.jsonl"
    with data.open("w") as f:
        for i in range(n):
            label = "a" if i % 3 else "b"
            row = {"id": f"q{i}", "input": {"i": i}, "expected": {"label": "a"}, "output": label}
            f.write(json.dumps(row) + "\n")
    return metric, data, tmp_path / "results.jsonl"


def _argv(metric: Path, data: Path, output: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "evaluator",
        "run",
        "--metric",
        str(metric),
        "--data",
        str(data),
        "--output",
        str(output),
        "--execution",
        "process",
        "--workers",
        "2",
        "--timeout",
        "5",
        *extra,
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("OPENAI_API_KEY", None)
    return env


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


HEADER_KEY = "skynet_eval_results"


def _check_whole(path: Path) -> tuple[list[Any], bool]:
    """The ids of the whole result lines (a header line, first or after a resume, is
    skipped); at most the last line may be cut short."""
    lines = _lines(path)
    ids: list[Any] = []
    torn = False
    for number, raw in enumerate(lines, start=1):
        try:
            row = json.loads(raw)
            assert raw.endswith(b"\n"), f"line {number} has no newline"
            if HEADER_KEY not in row:
                ids.append(row["example_id"])
        except (json.JSONDecodeError, AssertionError):
            assert number == len(lines), f"{path}:{number} is broken but not the last line"
            torn = True
    return ids, torn


def _wait_for_lines(proc: subprocess.Popen[bytes], path: Path, count: int) -> None:
    """Poll the results file (bounded) until it holds ``count`` lines or the run ends."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if len(_lines(path)) >= count:
            return
        time.sleep(0.005)


def _workers(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    try:
        children: list[psutil.Process] = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return children


def _gone_within(procs: list[psutil.Process], seconds: float) -> list[int]:
    """The pids still running (zombies count as gone) after ``seconds``."""
    deadline = time.monotonic() + seconds
    alive = list(procs)
    while alive and time.monotonic() < deadline:
        still = []
        for p in alive:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    still.append(p)
            except psutil.NoSuchProcess:
                pass
        alive = still
        if alive:
            time.sleep(0.02)
    return [p.pid for p in alive]


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


class TestKillAndResume:
    def test_sigkill_at_random_points_then_resume(self, tmp_path: Path) -> None:
        """SIGKILL of the CLI at three random points: every line of the results file is
        whole JSON (at most the last one cut short); its worker processes exit by
        themselves within 5 s; ``--resume`` then finishes with each id exactly once."""
        metric, data, output = _files(tmp_path)
        rng = random.Random(20240607)
        for round_ in range(3):
            extra = ("--resume",) if output.exists() and output.stat().st_size else ()
            proc = subprocess.Popen(
                _argv(metric, data, output, *extra),
                env=_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                before = len(_lines(output))
                _wait_for_lines(proc, output, before + rng.randint(1, 100))
                workers = _workers(proc)
                assert proc.poll() is None, "the run ended before it could be killed"
                assert len(workers) >= 2, f"round {round_}: no worker processes seen"
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                assert proc.stderr is not None
                proc.stderr.close()
            ids, _ = _check_whole(output)
            assert len(ids) == len(set(ids)), f"round {round_}: an id written twice"
            assert _gone_within(workers, 5.0) == [], "workers outlived the killed engine"
        done = subprocess.run(
            _argv(metric, data, output, "--resume", "--json"),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        _no_traceback(done.stderr)
        ids, torn = _check_whole(output)
        assert not torn
        assert Counter(ids) == Counter(f"q{i}" for i in range(N))
        report = json.loads(done.stdout)
        assert report["n"] == N and report["resumed"] > 0

    def test_torn_last_line_is_dropped_with_a_warning(self, tmp_path: Path) -> None:
        """A results file whose last line was cut short mid-write: ``--resume`` drops
        that line with a warning naming file and line, runs that example again, and ends
        with each id exactly once."""
        metric, data, output = _files(tmp_path, n=40)
        first = subprocess.run(
            _argv(metric, data, output, "--json"),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert first.returncode == 0, first.stderr
        lines = _lines(output)
        kept, cut = lines[:25], lines[25]
        output.write_bytes(b"".join(kept) + cut[: len(cut) // 2])
        done = subprocess.run(
            _argv(metric, data, output, "--resume", "--json"),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        _no_traceback(done.stderr)
        assert "incomplete last line" in done.stderr and f"{output}:26" in done.stderr
        ids, torn = _check_whole(output)
        assert not torn
        assert Counter(ids) == Counter(f"q{i}" for i in range(40))

    @pytest.mark.parametrize(
        ("json_report", "stop", "group", "code"),
        [
            (False, signal.SIGINT, True, 130),  # Ctrl-C: the terminal signals the group
            (True, signal.SIGINT, True, 130),
            (False, signal.SIGTERM, False, 143),  # `kill PID`, a CI runner's cancel
            (True, signal.SIGTERM, False, 143),
            (False, signal.SIGTERM, True, 143),  # systemd, `kill -- -PGID`: workers too
        ],
        ids=["ctrl-c", "ctrl-c-json", "sigterm", "sigterm-json", "sigterm-group"],
    )
    def test_stop_signal_ends_the_run_cleanly(
        self,
        tmp_path: Path,
        json_report: bool,
        stop: signal.Signals,
        group: bool,
        code: int,
    ) -> None:
        """SIGINT to the CLI's process group (what Ctrl-C does), or SIGTERM to the CLI or
        its group, mid-run: exit code 130 (SIGINT) or 143 (SIGTERM), the report of what
        was done printed (partial), no traceback, whole lines, the workers gone within
        5 s; ``--resume`` then finishes the run with each id once."""
        metric, data, output = _files(tmp_path)
        extra = ("--json",) if json_report else ()
        proc = subprocess.Popen(
            _argv(metric, data, output, *extra),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _wait_for_lines(proc, output, 51)  # the header and 50 results
            workers = _workers(proc)
            assert proc.poll() is None, "the run ended before the signal"
            if group:
                os.killpg(proc.pid, stop)
            else:
                proc.send_signal(stop)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        text_out, text_err = stdout.decode(), stderr.decode()
        assert proc.returncode == code, text_err
        _no_traceback(text_err)
        assert "interrupted" in text_err
        ids, torn = _check_whole(output)
        assert not torn and 50 <= len(ids) < N
        rows = [json.loads(raw) for raw in _lines(output)]
        crashes = [r for r in rows if (r.get("error") or {}).get("kind") == "worker_crash"]
        assert crashes == [], "the signal was recorded as a worker crash"
        if json_report:
            report = json.loads(text_out)
            assert report["n"] == len(ids)
        else:
            assert "Report (interrupted: partial)" in text_out
        assert _gone_within(workers, 5.0) == []
        done = subprocess.run(
            _argv(metric, data, output, "--resume", "--json"),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        ids, _ = _check_whole(output)
        assert Counter(ids) == Counter(f"q{i}" for i in range(N))
