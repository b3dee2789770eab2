"""The import of llm_client: nothing else of ours, no loop bound (``__all__``: tests/test_exports.py)."""

from __future__ import annotations

import subprocess
import sys


def test_import_touches_nothing_else_of_ours() -> None:
    """Importing llm_client imports no evaluator, reward or skynet module, nor genai-prices."""
    code = (
        "import sys, llm_client\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'evaluator', 'reward', 'skynet', 'genai_prices'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def test_no_event_loop_needed_at_import() -> None:
    """Configs and simulators can be built with no running loop (nothing binds at import)."""
    code = (
        "import asyncio, llm_client\n"
        "llm_client.ModelConfig(model='m')\n"
        "llm_client.Simulator(llm_client.SimulatorConfig())\n"
        "llm_client.ModelClient(llm_client.ModelConfig(model='m', api_key_env=None))\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "ok"
