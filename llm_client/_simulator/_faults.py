"""Injected faults: which one (if any) hits a request, and the error replies they send.

One draw per request from the simulator's seeded generator, whatever the rates, so that a
seed gives the same sequence of faults in every run. The rates are laid end to end on
[0, 1) in the order of ``FAULT_KINDS``; a draw past their sum is no fault.
"""

from __future__ import annotations

import random

from ._config import FAULT_KINDS, SimulatorConfig
from ._server import JSON

__all__ = ["ERROR_FAULTS", "FaultDraw", "FaultReply"]

#: status, message, error type, error code, header lines.
FaultReply = tuple[int, str, str, str | None, bytes]

#: The faults answered at once with an error; the others act later ("slow" delays the
#: reply, "drop" and "malformed" spoil it when it is due).
ERROR_FAULTS: dict[str, FaultReply] = {
    "insufficient_quota": (
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota",
        "insufficient_quota",
        JSON,
    ),
    "error_500": (500, "simulated 500", "server_error", None, JSON),
    "error_503": (503, "simulated 503", "server_error", None, JSON),
    "rate_limit": (
        429,
        "Rate limit reached (simulated).",
        "requests",
        "rate_limit_exceeded",
        JSON + b"retry-after-ms: 100\r\nretry-after: 1\r\n",
    ),
}


class FaultDraw:
    """Draws the fault of each request from ``rng`` at the configured rates."""

    def __init__(self, config: SimulatorConfig, rng: random.Random) -> None:
        self._rng = rng
        self._edges: list[tuple[float, str]] = []
        edge = 0.0
        for kind in FAULT_KINDS:
            rate = getattr(config, f"{kind}_rate")
            edge += rate
            if rate > 0:
                self._edges.append((edge, kind))

    def draw(self) -> str | None:
        """The fault of the next request (a name from ``FAULT_KINDS``), or None."""
        draw = self._rng.random()
        for edge, kind in self._edges:
            if draw < edge:
                return kind
        return None
