"""The result cache an Evaluator consults before it runs an example.

Two tiers: a dict in memory, for the life of the Evaluator, in front of an optional
:class:`~evaluator._cache._disk.DiskStore`. A chunk's lookup is one pass over the memory
tier and, for what it misses, one ``SELECT`` on the disk's thread; a disk hit is kept in
memory too. Only results without an error are stored (errors and timeouts run again),
and only those whose stored form decodes to an equal ``Result`` (an output or extra
value msgpack would change, a tuple say, is run again rather than changed): a hit is the
very result that was stored, with ``cached=True``.

Writes to disk do not hold up the chunk that made them: they go to a writer task the
cache owns, which stores them in batches on the disk's thread and is drained when the
cache closes. A disk that fails during a run is moved aside and rebuilt once
(:class:`CacheWarning`); if it fails again the run goes on with the memory tier alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sqlite3
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from .._aio import shielded
from .._dataset import Example
from .._results import Result
from ._disk import CacheWarning, DiskStore
from ._key import KeyMaker

__all__ = ["DEFAULT_MEMORY_BYTES", "CacheStatistics", "Lookup", "ResultCache"]

#: The memory tier's bound: the oldest entries go first once it holds this much.
DEFAULT_MEMORY_BYTES = 512 * 1024 * 1024

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Result).decode


class CacheStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What the cache did: lookups and hits by tier, results stored and not."""

    lookups: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    uncacheable: int = 0
    """Examples (or artifacts) with no canonical form: run, never looked up."""
    stored: int = 0
    not_stored: int = 0
    """Results without errors whose stored form would differ from them (kept out)."""
    memory_entries: int = 0
    disk: str | None = None
    """The cache file, when the disk tier is on."""
    disk_errors: int = 0
    measured: bool = False
    """The metric's scores depend on measured speed or cost: hits keep the measurements
    they were scored with."""


class Lookup:
    """One chunk's lookup: the hits in place, the examples still to run, their keys."""

    __slots__ = ("hits", "keys", "misses", "positions")

    def __init__(self, n: int) -> None:
        self.hits: list[Result | None] = [None] * n
        self.keys: list[bytes | None] = []
        self.misses: list[Example] = []
        self.positions: list[int] = []

    @property
    def hit_count(self) -> int:
        return len(self.hits) - len(self.misses)

    def merge(self, fresh: Sequence[Result]) -> list[Result]:
        """The chunk's results in order: the hits, and ``fresh`` (one per miss) between."""
        out = self.hits
        for position, result in zip(self.positions, fresh, strict=True):
            out[position] = result
        return out  # type: ignore[return-value]  # every hole is filled above


class ResultCache:
    """Memory tier, and disk tier when ``directory`` is given; ``async with`` to open."""

    def __init__(
        self,
        keys: KeyMaker,
        *,
        directory: Path | None = None,
        measured: bool = False,
        max_memory_bytes: int = DEFAULT_MEMORY_BYTES,
    ) -> None:
        self.keys = keys
        self.directory = directory
        self.measured = measured
        self.max_memory_bytes = max_memory_bytes
        self._memory: dict[bytes, bytes] = {}
        self._memory_bytes = 0
        self._disk: DiskStore | None = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list[tuple[bytes, bytes]] = []
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._counts = dict.fromkeys(
            ("lookups", "memory_hits", "disk_hits", "misses", "uncacheable", "stored"), 0
        )
        self._counts.update(not_stored=0, disk_errors=0)

    # -- lifetime ---------------------------------------------------------------------

    async def __aenter__(self) -> ResultCache:
        if self.directory is not None:
            self._thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="skynet-eval-cache"
            )
            try:
                self._disk = await self._on_disk(DiskStore.open, self.directory)
            except BaseException:
                self._thread.shutdown(wait=True)
                self._thread = None
                raise
            self._wake = asyncio.Event()
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await shielded(self._close())

    async def _close(self) -> None:
        self._closing = True
        writer, self._writer = self._writer, None
        if writer is not None:
            assert self._wake is not None
            self._wake.set()
            await asyncio.wait({writer})
        disk, self._disk = self._disk, None
        if disk is not None:
            await self._on_disk(disk.close)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=True)

    async def _on_disk(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    # -- lookups ----------------------------------------------------------------------

    async def lookup(self, artifact: Any, examples: Sequence[Example]) -> Lookup:
        """The cached results of ``examples`` under ``artifact``, and what must run."""
        counts = self._counts
        n = len(examples)
        counts["lookups"] += n
        found = Lookup(n)
        candidate = self.keys.candidate(artifact)
        if candidate is None:
            counts["uncacheable"] += n
            found.keys = [None] * n
            found.misses = list(examples)
            found.positions = list(range(n))
            return found
        keys = found.keys = self.keys.keys(candidate, examples)
        memory = self._memory
        values: list[bytes | None] = [memory.get(k) if k is not None else None for k in keys]
        counts["memory_hits"] += n - values.count(None)
        if self._disk is not None:
            await self._from_disk(keys, values)
        hits = found.hits
        for i, (ex, key, value) in enumerate(zip(examples, keys, values, strict=True)):
            if value is None:
                counts["uncacheable" if key is None else "misses"] += 1
                found.misses.append(ex)
                found.positions.append(i)
            else:
                result = _decode(value)
                result.example_id = ex.id
                result.cached = True
                hits[i] = result
        return found

    async def _from_disk(self, keys: list[bytes | None], values: list[bytes | None]) -> None:
        wanted = [k for k, v in zip(keys, values, strict=True) if k is not None and v is None]
        if not wanted:
            return
        found = await self._disk_call("get_many", wanted)
        if not found:
            return
        self._counts["disk_hits"] += len(found)
        for i, key in enumerate(keys):
            if values[i] is None and key is not None and (value := found.get(key)) is not None:
                values[i] = value
                self._remember(key, value)

    # -- stores -----------------------------------------------------------------------

    def store(self, found: Lookup, fresh: Sequence[Result]) -> None:
        """Keep ``fresh`` (the results of ``found.misses``) that have no error."""
        keys = found.keys
        counts = self._counts
        items = []
        for position, result in zip(found.positions, fresh, strict=True):
            key = keys[position]
            if key is None or result.error is not None:
                continue
            value = _encode(result)
            if _decode(value) != result:
                counts["not_stored"] += 1
                continue
            self._remember(key, value)
            items.append((key, value))
        counts["stored"] += len(items)
        if items and self._wake is not None and not self._closing:
            self._pending.extend(items)
            self._wake.set()

    def _remember(self, key: bytes, value: bytes) -> None:
        memory = self._memory
        if key in memory:
            return
        memory[key] = value
        self._memory_bytes += len(value) + len(key)
        while self._memory_bytes > self.max_memory_bytes and memory:
            old = next(iter(memory))
            self._memory_bytes -= len(memory.pop(old)) + len(old)

    async def _write_loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending, []
                await self._disk_call("put_many", batch)
            if self._closing:
                return

    async def _disk_call(self, name: str, arg: Any) -> Any:
        """A disk call; a malformed file is rebuilt once, then the disk tier is dropped."""
        for attempt in (1, 2):
            disk = self._disk
            if disk is None:
                return None
            try:
                return await self._on_disk(getattr(disk, name), arg)
            except (sqlite3.Error, OSError) as exc:
                self._counts["disk_errors"] += 1
                if attempt == 1 and isinstance(exc, sqlite3.DatabaseError):
                    with contextlib.suppress(sqlite3.Error, OSError):
                        await self._on_disk(disk.rebuild, f"SQLite failed during the run ({exc})")
                        continue
                self._drop_disk(disk, exc)
        return None

    def _drop_disk(self, disk: DiskStore, exc: BaseException) -> None:
        self._disk = None
        self._pending.clear()
        disk.close()
        warnings.warn(
            f"result cache {disk.path}: {exc}; this run goes on with the memory cache only "
            "(its results are not kept on disk)",
            CacheWarning,
            stacklevel=2,
        )

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(
            **self._counts,
            memory_entries=len(self._memory),
            disk=None if self.directory is None else str(self.directory),
            measured=self.measured,
        )
