"""``skynet-eval simulator``: serve the OpenAI-compatible simulator until stopped.

Prints ``simulator serving at http://127.0.0.1:PORT/v1`` once it listens (a script
reads the port from it when ``--port 0`` picks one), and what it saw when Ctrl-C or
SIGTERM stops it. A stop signal is this command's normal end: exit 0.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from llm_client import Simulator

from . import _loop
from ._main import EXIT_FAILED, EXIT_OK
from ._options import SimulatorOptions

__all__ = ["execute"]


def execute(options: SimulatorOptions) -> int:
    """Serve until a stop signal, then print the summary."""
    try:
        sim = _loop.run(lambda: _serve(options), signals=(signal.SIGINT, signal.SIGTERM))
    except OSError as exc:
        print(f"skynet-eval simulator: cannot listen: {exc}", file=sys.stderr)
        return EXIT_FAILED
    stats = sim.statistics()
    faults = ", ".join(f"{k} {v}" for k, v in stats.faults.items() if v) or "none"
    print(
        f"stopped: {stats.requests} requests, {stats.served} served, "
        f"{stats.rate_limited} rate-limited, faults: {faults}",
        flush=True,
    )
    return EXIT_OK


async def _serve(options: SimulatorOptions) -> Simulator:
    sim = Simulator(options.config)
    try:
        async with sim:
            print(f"simulator serving at {sim.base_url}", flush=True)
            await asyncio.Event().wait()  # until a stop signal cancels this task
    except asyncio.CancelledError:
        # The stop signal is how serving ends, not a failure: take the cancellation back
        # (the simulator has closed), so that the command exits 0 with its summary.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
    return sim
