"""The engine's async idiom: cleanup that no cancellation cuts short, errors unwrapped."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from evaluator._aio import shielded, unwrap_group
from evaluator._exceptions import DatasetError


class TestShielded:
    async def test_returns_the_cleanups_result(self) -> None:
        """Without a cancellation, it is just the cleanup's result."""

        async def cleanup() -> str:
            await asyncio.sleep(0)
            return "done"

        assert await shielded(cleanup()) == "done"

    async def test_native_cancels_wait_for_the_end_then_re_raise(self) -> None:
        """Cancelled natively again and again (Ctrl-C), the caller still waits until the
        cleanup has finished, then raises the cancellation."""
        steps: list[int] = []
        release = asyncio.Event()

        async def cleanup() -> None:
            steps.append(1)
            await release.wait()
            steps.append(2)

        task = asyncio.create_task(shielded(cleanup()))
        for _ in range(20):
            await asyncio.sleep(0)
            task.cancel()
        assert not task.done() and steps == [1]
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert steps == [1, 2]

    async def test_the_cancellation_keeps_asyncio_timeout_working(self) -> None:
        """An asyncio.timeout that expires during cleanup still becomes TimeoutError once
        the cleanup is done (its own cancellation is re-raised, not swallowed)."""
        turns = 0

        async def cleanup() -> None:
            nonlocal turns
            for _ in range(10):
                turns += 1
                await asyncio.sleep(0)

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0):
                await shielded(cleanup())
        assert turns == 10

    async def test_an_anyio_caller_waits_quietly(self) -> None:
        """A caller in an anyio scope that expires waits for the cleanup without anyio
        cancelling it at every turn (no cancellation reaches the wait), then sees its
        scope cancelled at its next await."""
        turns = 0
        returned = False

        async def cleanup() -> None:
            nonlocal turns
            for _ in range(10):
                turns += 1
                await asyncio.sleep(0)

        with anyio.move_on_after(0) as scope:
            await shielded(cleanup())
            returned = True
            await asyncio.sleep(0)
        assert returned and turns == 10 and scope.cancelled_caught


class TestUnwrapGroup:
    async def test_one_real_error_is_raised_as_itself(self) -> None:
        """A task group's single real error comes out as itself, not in a group."""

        async def run() -> None:
            with unwrap_group():
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(asyncio.sleep(10))
                    raise DatasetError("rows.jsonl", 3, "bad row")

        with pytest.raises(DatasetError):
            await run()

    async def test_several_errors_stay_a_group(self) -> None:
        """Two real errors stay together in the group."""

        async def fail(n: int) -> None:
            raise ValueError(n)

        async def run() -> None:
            with unwrap_group():
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(fail(1))
                    tg.create_task(fail(2))

        with pytest.raises(ExceptionGroup):
            await run()
