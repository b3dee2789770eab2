"""The SDK hook's part in a worker process, started at boot once the user's file is loaded."""

from __future__ import annotations

from . import _audit, _intercept

__all__ = ["boot"]


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
