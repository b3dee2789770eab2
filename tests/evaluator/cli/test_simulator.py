"""``skynet-eval simulator``: serves until stopped, then prints what it saw."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_serves_until_stopped_and_reports() -> None:
    """The command prints its URL, serves the configured model, and on SIGTERM stops
    cleanly with a summary."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evaluator",
            "simulator",
            "--port",
            "0",
            "--model",
            "judge-a:latency_ms=1,noise=0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("simulator serving at http://127.0.0.1:")
        base_url = line.split()[-1]
        body = {
            "model": "judge-a",
            "messages": [{"role": "user", "content": "PASS or FAIL? Answer: 1\nExpected: 1"}],
        }
        request = urllib.request.Request(
            base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            reply = json.loads(resp.read())
        assert reply["choices"][0]["message"]["content"].startswith("PASS. ")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped: 1 requests, 1 served" in out


def test_bad_flag_is_a_usage_error() -> None:
    """An out-of-range rate exits with status 2 and names the setting."""
    proc = subprocess.run(
        [sys.executable, "-m", "evaluator", "simulator", "--drop-rate", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2 and "`drop_rate` must be between 0 and 1" in proc.stderr


def test_ctrl_c_stops_it_cleanly_too() -> None:
    """SIGINT, like SIGTERM, is the simulator's normal end: the summary, exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaluator", "simulator", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("simulator serving at http://127.0.0.1:")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped: 0 requests, 0 served" in out and "Traceback" not in err


def test_port_in_use_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A port that is taken: exit 1 with one line saying it cannot listen."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["simulator", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("skynet-eval simulator: cannot listen: ") and "Traceback" not in err
