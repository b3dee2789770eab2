"""Helpers shared by the tests: write a source file, wait for a state change, the
process case of a test parametrized by execution kind.

Import them as ``from tests._helpers import until, write`` (pytest's importlib mode
makes ``tests`` importable from every test module).
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

T = TypeVar("T")

#: The "process" case of a test parametrized by execution kind: real worker processes,
#: so out of the developer loop (``process`` implies ``slow``).
PROCESS = pytest.param("process", marks=pytest.mark.process, id="process")


def write(folder: Path, name: str, source: str) -> Path:
    """``folder/name`` holding ``source``, dedented (the folder is made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


#: Debian's Chromium, which the report's browser tests, its benchmark and its screenshots
#: drive through Playwright, with these flags: headless, and nothing that reaches out.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


async def until(
    predicate: Callable[[], T | None],
    what: str | Callable[[], str] = "the condition",
    timeout: float = 20.0,
) -> T:
    """Yield to the loop until ``predicate()`` is truthy, and return that value.

    The state it reads changes in other tasks, threads or processes, which may offer
    nothing to await: poll, bounded by ``timeout`` (a guard against a hang, not a timing).
    ``what`` names the state in the failure (a callable: read when it fails).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (value := predicate()):
        if loop.time() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting until {said}")
        await asyncio.sleep(0.002)
    return value


def until_sync(predicate: Callable[[], T], what: str = "the condition", timeout: float = 30.0) -> T:
    """:func:`until` for a test without a loop: the state changes in another thread."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting until {what}")
        time.sleep(0.005)
    return value


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on a fake clock: whenever nothing is ready, its clock jumps to the
    next timer instead of sleeping. Timing logic (a governor's pacing, a pause) runs in
    no real time, and exactly: pass ``clock=loop.time`` to what takes a clock.

    Only for tests without real I/O to wait on: a socket's reply would be overtaken by
    the jump. ``asyncio.Runner(loop_factory=VirtualTimeLoop)`` runs one.
    """

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        poll = self._selector.select  # type: ignore[attr-defined]

        def select(timeout: float | None = None) -> Any:
            ready = poll(0)
            if ready or timeout == 0:
                return ready
            if timeout is None:  # no timer: only I/O (a call_soon_threadsafe) can wake us
                return poll(None)
            self._now += timeout
            return []

        self._selector.select = select  # type: ignore[attr-defined]

    def time(self) -> float:
        return self._now


def result_rows(path: Path) -> list[dict[str, Any]]:
    """The result lines of a results file as JSON-like dicts holding every field: read
    through the engine's reader (a line leaves out the fields at their defaults, which
    reading fills back), so a test sees what was stored, not how it was spelt."""
    from evaluator._results_file._store import read_results

    return [_every_field(result) for result in read_results(path, repair=False)]


def _every_field(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return {
            name: _every_field(getattr(value, name))
            for name in value.__struct_fields__
            if getattr(value, name) is not msgspec.UNSET
        }
    if isinstance(value, list | tuple):
        return [_every_field(item) for item in value]
    if isinstance(value, dict):
        return {key: _every_field(item) for key, item in value.items()}
    return value
