"""``skynet-eval simulator``: serves until stopped, then prints what it saw."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

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
