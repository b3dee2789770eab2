"""The execution kinds: where a user function's calls run, and which kind can run which.

The one definition that the loader (a file's ``EXECUTION``), the engine's options
(``execution=``, ``--execution``, ``--program-execution``), the executors and their
factory all read. A worker process imports it (through the loader): it imports nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from ._loader import UserFunction

__all__ = ["EXECUTIONS", "KINDS_LISTED", "ExecutionKind", "refusal"]

ExecutionKind = Literal["process", "thread", "async", "inline", "ray"]
#: Every kind, in the order messages and ``--help`` list them.
EXECUTIONS: tuple[ExecutionKind, ...] = get_args(ExecutionKind)
#: The kinds as a message lists them: ``'process', 'thread', ...``.
KINDS_LISTED = ", ".join(map(repr, EXECUTIONS))
_SYNC_KINDS = [repr(kind) for kind in EXECUTIONS if kind != "async"]
_SYNC_LISTED = f"{', '.join(_SYNC_KINDS[:-1])} or {_SYNC_KINDS[-1]}"


def refusal(fn: UserFunction, kind: object) -> str | None:
    """Why ``fn`` cannot run in ``kind`` (None when it can), worded to follow the name of
    the option that chose it: an unknown kind, an ``async def`` anywhere but "async", or
    a plain ``def`` there."""
    if kind not in EXECUTIONS:
        return f"must be one of {KINDS_LISTED}, got {kind!r}"
    if fn.is_async and kind != "async":
        return (
            f"is {kind!r} but `{fn.name}` in {fn.path} is `async def`; an async "
            "function is awaited on the event loop: use 'async' (or leave it unset)"
        )
    if not fn.is_async and kind == "async":
        return (
            f"is 'async' but `{fn.name}` in {fn.path} is a plain `def`; define it "
            f"with `async def`, or use {_SYNC_LISTED}"
        )
    return None
