"""The SDK hook's part in a worker process, started at boot once the user's file is loaded."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from . import _audit, _environ, _intercept, _owner

__all__ = ["boot", "own"]


def boot() -> None:
    """Route SDK calls made by the loaded user code, and report connections around them.

    Only the HTTP libraries the user's module imported are patched (importing the others
    would slow every worker's start); an SDK imported later, inside a call, is not
    routed, and its connections make that example's cost unmeasured (the audit hook).
    The forwarded reply's class is imported now, not inside the first timed call.
    """
    import llm_client._forward  # noqa: F401

    _intercept.activate_in_worker()
    _audit.activate()
    simulator = os.environ.get(_environ.SIMULATOR_ENV)
    if simulator:  # --simulator: the engine set it for its workers (``_environ``)
        parts = urlsplit(simulator)
        if parts.hostname:
            _audit.seal(parts.hostname, parts.port or 80)


def own(ctx: Any) -> None:
    """The worker runs one call at a time: whatever any thread of it does belongs to the
    call ``ctx`` describes (its context, updated in place call after call)."""
    _owner.own_process(ctx)
