"""The executor interface: where user calls run.

An executor is owned by an ``Evaluator`` for one user function and stage, entered with
``async with`` inside the running loop, and given calls in batches. Whatever the user
function does (raise, hang, crash its worker, return garbage), :meth:`Executor.submit`
returns exactly one :class:`Outcome` per call, in order, with timeouts enforced per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ._calls import Call, Outcome


class Executor(Protocol):
    async def __aenter__(self) -> Executor: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def submit(self, calls: Sequence[Call]) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe."""
        ...
