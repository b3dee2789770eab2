"""The result cache an Evaluator consults before it runs an example.

Two tiers: a dict in memory, for the life of the Evaluator, in front of an optional
:class:`~evaluator._cache._disk.DiskStore`. A chunk's lookup is one pass over the memory
tier and, for what it misses, one ``SELECT`` on the disk's thread; a disk hit is kept in
memory too. Only results without an error are stored (errors and timeouts run again),
and only those whose stored form decodes to an equal ``Result`` (an output or extra
value msgpack would change, a tuple say, is run again rather than changed): a hit is the
very result that was stored, with ``cached=True``.

Every stored value is *sealed* (:func:`seal`): the cache format, a tag of the ``Result``
layout this engine decodes, and a BLAKE2b digest keyed by the entry's own key, before the
msgpack. A value read from disk is checked before it is used or kept in memory: one that
was cut short, changed in place, moved to another key or written by an engine with
another ``Result`` layout (or that does not decode) is a miss; it runs again and its new
result replaces it. The count of such values is in :class:`CacheStatistics` and in one
:class:`CacheWarning` when the cache closes (one per run, not one per value).

Writes to disk do not hold up the chunk that made them: they go to a writer task the
cache owns, which stores them in batches on the disk's thread and is drained when the
cache closes; lookups read on a second connection meanwhile (WAL: readers never wait for
the writer). A disk that fails during a run drops the disk tier with a
:class:`CacheWarning`: the run goes on with the memory tier; the next open checks the
file and moves it aside if it is bad.

One payment per identical call (issue 28): a key being paid for is *in flight*
(``_inflight``: key to a future of its sealed value). A lookup that misses a key another
chunk is paying for waits for that one's result instead of paying again (``Lookup.waits``,
:meth:`ResultCache.wait`); the owner's :meth:`~ResultCache.store` gives it the value, and
an owner that fails (errors are not stored) or is cancelled gives ``None``
(:meth:`~ResultCache.release`): the waiter looks up again and one of them pays. With a
disk tier the claim is also a row in the file's ``claims`` table, a lease renewed while
the run holds it, so that other processes on the same cache wait too (they poll the file
for the result, from one task, every 50 ms backing off to 1 s) and take over when the
owner gives up, or crashes and its lease runs out. A claim in the file costs a write
transaction, so a cache that is the file's only live owner claims in memory only
(``_others`` False): it registers at open, reads the owners every 100 ms, and on seeing
another claims what it is paying for and from then on claims as above (``_watch``); a
cache that opens beside such a solo owner waits, at open, until that one has seen it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import secrets
import socket
import sqlite3
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from .._aio import shielded
from .._call._results import Result
from .._data._dataset import Example
from ._disk import FILE_NAME, CacheWarning, DiskStore
from ._key import CACHE_FORMAT, KeyMaker

__all__ = ["DEFAULT_MEMORY_BYTES", "CacheStatistics", "Lookup", "ResultCache", "seal", "unseal"]

#: The memory tier's bound: the oldest entries go first once it holds this much.
DEFAULT_MEMORY_BYTES = 512 * 1024 * 1024
#: How long a claim on the disk holds without renewal (renewed every third of it): a
#: crashed owner's keys are taken over this long after it died.
DEFAULT_LEASE_SECONDS = 15.0
#: Polling another process's claim: the first interval, doubled while nothing changes.
_POLL_FIRST, _POLL_MAX = 0.05, 1.0
#: How often a solo owner (the file's only live one) looks for another owner.
_WATCH_SECONDS = 0.1

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Result).decode

#: What a sealed value starts with: ours, the cache format, and a tag of the ``Result``
#: layout (its fields and their types), so that a value written by an engine whose
#: ``Result`` differs is refused even where its msgpack would decode (to other fields).
_LAYOUT = hashlib.blake2b(repr(msgspec.inspect.type_info(Result)).encode(), digest_size=4).digest()
_PREFIX = b"sk" + CACHE_FORMAT.to_bytes(1, "little") + _LAYOUT
_DIGEST = 16
_SEALED = len(_PREFIX)
_HEAD = _SEALED + _DIGEST


def seal(key: bytes, payload: bytes) -> bytes:
    """``payload`` (a Result's msgpack) as stored under ``key``: prefix, digest, payload.
    The digest is keyed by ``key``: a value copied to another key fails its check too."""
    return _PREFIX + hashlib.blake2b(payload, key=key, digest_size=_DIGEST).digest() + payload


def unseal(key: bytes, value: bytes) -> memoryview | None:
    """The payload of the value stored under ``key``; None when it fails its check."""
    if not value.startswith(_PREFIX):
        return None
    payload = memoryview(value)[_HEAD:]
    digest = hashlib.blake2b(payload, key=key, digest_size=_DIGEST).digest()
    return payload if value[_SEALED:_HEAD] == digest else None


def _decoded(payload: memoryview | bytes) -> Result | None:
    try:
        return _decode(payload)
    except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
        return None


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
    damaged: int = 0
    """Stored values that failed their check (cut short, changed, from another version):
    run again as misses, and replaced."""
    shared: int = 0
    """Examples whose key another evaluation was paying for: they waited and took its
    result (a hit) instead of paying again."""
    taken_over: int = 0
    """Waits whose owner failed, was cancelled or crashed: looked up again and run."""
    claims_written: int = 0
    """Keys claimed in the disk file (0 while no other run shares it: claims stay in
    memory)."""
    measured: bool = False
    """The metric's scores depend on measured speed or cost: hits keep the measurements
    they were scored with."""


class Lookup:
    """One chunk's lookup: the hits in place, the examples still to run, their keys, the
    keys it pays for (``owned``) and the positions waiting for another's (``waits``)."""

    __slots__ = ("hits", "keys", "misses", "owned", "positions", "waits")

    def __init__(self, n: int) -> None:
        self.hits: list[Result | None] = [None] * n
        self.keys: list[bytes | None] = []
        self.misses: list[Example] = []
        self.positions: list[int] = []
        self.owned: dict[bytes, asyncio.Future[bytes | None]] = {}
        self.waits: list[tuple[int, asyncio.Future[bytes | None]]] = []

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
        lease: float | None = None,
    ) -> None:
        self.keys = keys
        self.directory = directory
        self.measured = measured
        self.max_memory_bytes = max_memory_bytes
        self.lease = DEFAULT_LEASE_SECONDS if lease is None else lease
        # Keys being paid for now, by this cache's chunks or (``_remote``) another process.
        self._inflight: dict[bytes, asyncio.Future[bytes | None]] = {}
        self._remote: dict[bytes, asyncio.Future[bytes | None]] = {}
        self._claimed: set[bytes] = set()  # this cache's claims in the file, unstored
        self._owns_rows = False  # it registered in the file (its rows go when it closes)
        self._others = False  # another live owner shares the file: claim there too
        self._sharing = False  # the writer's next transaction ends this owner's solo row
        self._releasing: list[bytes] = []
        self._claiming: list[tuple[list[bytes | None], asyncio.Future[Any]]] = []
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        self._wake_poller: asyncio.Event | None = None
        self._helpers: list[asyncio.Task[None]] = []  # the poller and the lease renewer
        self._memory: dict[bytes, bytes] = {}
        self._memory_bytes = 0
        # Two connections on two threads: WAL lets a chunk's lookup read while the
        # writer stores earlier chunks' results, so a lookup never queues behind a write.
        self._disk: dict[str, _Tier] = {}
        self._pending: list[tuple[bytes, bytes]] = []
        # Keys whose stored value failed its check: their next store replaces it.
        self._damaged: set[bytes] = set()
        self._replacing: list[tuple[bytes, bytes]] = []
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        # Lookups waiting for the reader: many small chunks at once (a model-bound run
        # has one example per chunk) share one SELECT and one hop to its thread.
        self._wanted: list[tuple[list[bytes], asyncio.Future[dict[bytes, bytes]]]] = []
        self._wake_reader: asyncio.Event | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closing = False
        self._counts = dict.fromkeys(
            ("lookups", "memory_hits", "disk_hits", "misses", "uncacheable", "stored"), 0
        )
        self._counts.update(not_stored=0, disk_errors=0, damaged=0, shared=0, taken_over=0)
        self._counts["claims_written"] = 0

    # -- lifetime ---------------------------------------------------------------------

    async def __aenter__(self) -> ResultCache:
        if self.directory is not None:
            try:
                for role in ("read", "write"):
                    tier = _Tier(role)
                    self._disk[role] = tier
                    await tier.open(self.directory)
                await self._join()
            except BaseException:
                await shielded(self._close_disk())
                raise
            loop = asyncio.get_running_loop()
            self._wake, self._wake_reader = asyncio.Event(), asyncio.Event()
            self._writer = loop.create_task(self._write_loop())
            self._reader = loop.create_task(self._read_loop())
            self._wake_poller = asyncio.Event()
            self._helpers = [loop.create_task(self._poll_loop()), loop.create_task(self._renew())]
            if not self._others:
                self._helpers.append(loop.create_task(self._watch()))
        return self

    async def _join(self) -> None:
        """Register in the file; beside a solo owner, wait until it has seen this one (it
        then claims what it pays for), or its lease runs out."""
        others = await self._disk_call("write", "join", self._owner, self.lease)
        if others is None:  # the disk is gone: memory only
            return
        self._owns_rows = True
        self._others = bool(others)
        delay = 0.01
        while self._others and await self._disk_call("read", "solo_owners", self._owner):
            await asyncio.sleep(delay)
            delay = min(delay * 2, _WATCH_SECONDS)

    async def _watch(self) -> None:
        """Solo: look for another owner; on seeing one, claim in the file the keys this
        cache is paying for (and every key from then on), in one transaction."""
        while not self._others:
            await asyncio.sleep(_WATCH_SECONDS)
            if not await self._disk_call("read", "others", self._owner):
                continue
            self._others = True
            paying = [k for k in self._inflight if k not in self._remote]
            self._sharing = True
            answer = await self._claim_many(list(paying))
            if answer is None:
                continue
            for key in answer[1]:
                if key in self._inflight:
                    self._claimed.add(key)
                else:  # stored or failed meanwhile: the row goes (a stored value wins anyway)
                    self._releasing.append(key)
            if self._releasing and self._wake is not None and not self._closing:
                self._wake.set()

    async def __aexit__(self, *exc_info: object) -> None:
        await shielded(self._close())

    async def _close(self) -> None:
        self._closing = True
        helpers, self._helpers = self._helpers, []
        for helper in helpers:
            helper.cancel()
        if helpers:
            await asyncio.wait(helpers)
        tasks = [t for t in (self._writer, self._reader) if t is not None]
        self._writer = self._reader = None
        for event in (self._wake, self._wake_reader):
            if event is not None:
                event.set()
        if tasks:
            await asyncio.wait(tasks)
        self._give_up()
        if self._owns_rows:  # its rows and lease go: what is left unstored is free now
            self._claimed.clear()
            self._releasing.clear()
            await self._disk_call("write", "release", self._owner)
        await self._close_disk()
        unkeyed = self.keys.unkeyed_reads()
        if unkeyed:
            shown = ", ".join(str(p) for p in unkeyed[:5])
            more = f" and {len(unkeyed) - 5:,} more" if len(unkeyed) > 5 else ""
            warnings.warn(
                f"result cache: the metric or program read {shown}{more} during calls; the "
                "cache key does not hold them, so an edit to them is not seen by the next "
                "cached run: read them at import, or add them to the key (--cache-key-file "
                "PATH, or Evaluator(cache_key_files=[...]))",
                CacheWarning,
                stacklevel=2,
            )
        damaged = self._counts["damaged"]
        if damaged:
            where = "" if self.directory is None else f" {self.directory / FILE_NAME}"
            warnings.warn(
                f"result cache{where}: {damaged:,} stored result(s) failed their check "
                "(damaged, cut short, or written by another version of the engine); they "
                "were run again as misses and their new results replace them",
                CacheWarning,
                stacklevel=2,
            )

    def _give_up(self) -> None:
        """Closing: whoever still waits (for a key, or a claim's answer) gets None."""
        waiting = [*self._inflight.values(), *self._remote.values()]
        waiting += [future for _, future in self._claiming]
        for future in waiting:
            if not future.done():
                future.set_result(None)
        self._claiming.clear()
        self._inflight.clear()
        self._remote.clear()

    async def _close_disk(self) -> None:
        tiers, self._disk = list(self._disk.values()), {}
        for tier in tiers:
            await tier.close()

    # -- lookups ----------------------------------------------------------------------

    async def lookup(
        self, artifact: Any, examples: Sequence[Example], again: bool = False
    ) -> Lookup:
        """The cached results of ``examples`` under ``artifact``, and what must run: the
        misses this lookup now pays for, and the waits for keys another is paying for.
        ``again``: a look after a wait whose owner gave up (not counted as lookups)."""
        counts = self._counts
        n = len(examples)
        if not again:
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
        from_disk = await self._from_disk(keys, values) if self._disk else _NONE
        hits = found.hits
        inflight = self._inflight
        claiming: list[int] = []
        for i, (ex, key, value) in enumerate(zip(examples, keys, values, strict=True)):
            # Memory holds only values checked on their way in (or sealed here): the
            # payload starts at _HEAD. One that does not decode is a damaged entry too.
            result = None if value is None else _decoded(memoryview(value)[_HEAD:])
            if result is None:
                if value is not None:
                    assert key is not None
                    self._damage(key)
                    counts["disk_hits" if i in from_disk else "memory_hits"] -= 1
                if key is not None and value is None and key not in self._damaged:
                    future = inflight.get(key)
                    if future is not None:  # another chunk pays for it: wait for its result
                        found.waits.append((i, future))
                        continue
                    inflight[key] = found.owned[key] = _future()
                    claiming.append(i)
                counts["uncacheable" if key is None else "misses"] += 1
                found.misses.append(ex)
                found.positions.append(i)
            else:
                result.example_id = ex.id
                result.cached = True
                hits[i] = result
        if claiming and self._disk and self._others:
            await self._claim(found, claiming)
        return found

    async def _claim(self, found: Lookup, claiming: list[int]) -> None:
        """Claim in the file the keys this lookup took in memory: those stored meanwhile
        (by another process) or claimed by another process become waits, the poller's."""
        keys = [found.keys[i] for i in claiming]
        try:
            answer = await self._claim_many(keys)
        except BaseException:
            self._releasing.extend(k for k in keys if k is not None)
            self.release(found)
            raise
        if answer is None:  # the disk is gone: this process's chunks still share the key
            return
        stored, claimed = answer  # for every chunk that claimed in that transaction
        mine = set(claimed)
        self._claimed.update(k for k in keys if k is not None and k in mine)
        if all(k in mine for k in keys):
            return
        moved = set()
        for i in claiming:
            key = found.keys[i]
            assert key is not None
            if key in mine:
                continue
            future = found.owned.pop(key)
            value = stored.get(key)
            if value is not None:  # stored by another process since the read
                if unseal(key, value) is None:
                    value = None  # damaged: a wait that looks up again, and reads it so
                else:
                    self._remember(key, value)
                del self._inflight[key]
                future.set_result(value)
            else:
                self._remote[key] = future
            found.waits.append((i, future))
            moved.add(i)
        self._counts["misses"] -= len(moved)
        keep = [j for j, i in enumerate(found.positions) if i not in moved]
        found.misses = [found.misses[j] for j in keep]
        found.positions = [found.positions[j] for j in keep]
        if self._remote and self._wake_poller is not None:
            self._wake_poller.set()

    async def _claim_many(self, keys: list[bytes | None]) -> Any:
        """The file's answer to claiming ``keys``, from the writer's next transaction (all
        the chunks claiming at once and the stores pending share it); None without disk."""
        if self._writer is None or self._writer.done() or self._wake is None or self._closing:
            return None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._claiming.append((keys, future))
        self._wake.set()
        return await future

    async def wait(self, found: Lookup, examples: Sequence[Example]) -> list[int]:
        """Wait for the results of ``found.waits`` and put them in ``found.hits``; the
        positions whose owner gave up, to look up again (one of the waiters then pays).
        Cancelling the wait leaves the owner's result to the others waiting for it."""
        pending = {future for _, future in found.waits if not future.done()}
        if pending:
            await asyncio.wait(pending)
        again = []
        hits = found.hits
        for i, future in found.waits:
            value = future.result()
            result = None if value is None else _decoded(memoryview(value)[_HEAD:])
            if result is None:
                again.append(i)
                continue
            result.example_id = examples[i].id
            result.cached = True
            hits[i] = result
        self._counts["shared"] += len(found.waits) - len(again)
        self._counts["taken_over"] += len(again)
        found.waits = []
        return again

    def release(self, found: Lookup) -> None:
        """The keys ``found`` paid for without storing a result (it failed, or was
        cancelled): their waiters look again, and other processes may take them over."""
        owned, found.owned = found.owned, {}
        inflight = self._inflight
        for key, future in owned.items():
            if inflight.get(key) is future:
                del inflight[key]
            if not future.done():
                future.set_result(None)
            if key in self._claimed:
                self._claimed.discard(key)
                self._releasing.append(key)
        if self._releasing and self._wake is not None and not self._closing:
            self._wake.set()

    def _damage(self, key: bytes) -> None:
        """The value stored under ``key`` failed its check: a miss, counted (once, however
        often it is read before it is replaced), replaced by the next store."""
        if key not in self._damaged:
            self._counts["damaged"] += 1
            self._damaged.add(key)
        value = self._memory.pop(key, None)
        if value is not None:
            self._memory_bytes -= len(value) + len(key)

    async def _from_disk(
        self, keys: list[bytes | None], values: list[bytes | None]
    ) -> frozenset[int] | set[int]:
        """Fill ``values`` from disk where memory had none; the positions filled."""
        wanted = [k for k, v in zip(keys, values, strict=True) if k is not None and v is None]
        if not wanted:
            return _NONE
        found = await self._read(wanted)
        if not found:
            return _NONE
        filled = set()  # the batch's reply may hold other chunks' keys too: count this chunk's
        for i, key in enumerate(keys):
            if values[i] is None and key is not None and (value := found.get(key)) is not None:
                if unseal(key, value) is None:
                    self._damage(key)
                    continue
                values[i] = value
                filled.add(i)
                self._remember(key, value)
        self._counts["disk_hits"] += len(filled)
        return filled

    async def _read(self, wanted: list[bytes]) -> dict[bytes, bytes]:
        """The stored values of ``wanted``, read together with other chunks' lookups."""
        reader = self._reader
        if reader is None or reader.done() or self._wake_reader is None:
            return {}  # closing: a miss
        future: asyncio.Future[dict[bytes, bytes]] = asyncio.get_running_loop().create_future()
        self._wanted.append((wanted, future))
        self._wake_reader.set()
        return await future

    async def _read_loop(self) -> None:
        assert self._wake_reader is not None
        try:
            while not self._closing:
                await self._wake_reader.wait()
                self._wake_reader.clear()
                while self._wanted:
                    batch, self._wanted = self._wanted, []
                    keys = [k for part, _ in batch for k in part]
                    found = await self._disk_call("read", "get_many", keys) or {}
                    for _, waiting in batch:
                        if not waiting.done():
                            waiting.set_result(found)
        finally:
            for _, waiting in self._wanted:  # closed meanwhile: those lookups miss
                if not waiting.done():
                    waiting.set_result({})
            self._wanted = []

    # -- stores -----------------------------------------------------------------------

    def store(self, found: Lookup, fresh: Sequence[Result]) -> None:
        """Keep ``fresh`` (the results of ``found.misses``) that have no error."""
        keys = found.keys
        counts = self._counts
        damaged = self._damaged
        items = []
        replacing = []
        owned = found.owned
        claimed = self._claimed
        for position, result in zip(found.positions, fresh, strict=True):
            key = keys[position]
            if key is None or result.error is not None:
                continue
            try:
                payload = _encode(result)
            except (TypeError, ValueError, OverflowError):
                counts["not_stored"] += 1
                continue
            if not _plain(result) and _decode(payload) != result:
                counts["not_stored"] += 1
                continue
            value = seal(key, payload)
            self._remember(key, value)
            future = owned.pop(key, None)
            if future is not None:  # its waiters take this value; its claim ends with the write
                # (a stored result ends a claim: others read results first)
                if self._inflight.get(key) is future:
                    del self._inflight[key]
                future.set_result(value)
                claimed.discard(key)
            if damaged and key in damaged:
                damaged.discard(key)
                replacing.append((key, value))
            else:
                items.append((key, value))
        counts["stored"] += len(items) + len(replacing)
        if (items or replacing) and self._disk and self._wake is not None and not self._closing:
            self._pending.extend(items)
            self._replacing.extend(replacing)
            self._wake.set()
        if owned:  # errors, and results kept out: their waiters look again
            self.release(found)

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
            while (
                self._pending or self._replacing or self._releasing or self._claiming
            ) or self._sharing:
                # One transaction for all: the stores, the claims ended, and the claims
                # of every chunk looking up now (a claim waits at most one of these).
                items, self._pending = self._pending, []
                replacing, self._replacing = self._replacing, []
                released, self._releasing = self._releasing, []
                claiming, self._claiming = self._claiming, []
                share, self._sharing = self._sharing, False
                claims = [k for keys, _ in claiming for k in keys]
                answer = None
                try:
                    answer = await self._disk_call(
                        "write",
                        "write",
                        items,
                        replacing,
                        released,
                        claims,
                        self._owner,
                        self.lease,
                        share,
                    )
                    if answer is not None:
                        self._counts["claims_written"] += len(answer[1])
                finally:
                    for _, future in claiming:
                        if not future.done():
                            future.set_result(None if not self._disk else answer)
            if self._closing:
                return

    async def _disk_call(self, role: str, name: str, *args: Any) -> Any:
        """A call on the disk; a failure drops the disk tier for the rest of the run (the
        next open checks the file, and moves it aside if it is bad)."""
        tier = self._disk.get(role)
        if tier is None:
            return None
        try:
            return await tier.call(name, *args)
        except (sqlite3.Error, OSError) as exc:
            self._counts["disk_errors"] += 1
            if self._disk:
                path = tier.path
                self._pending.clear()
                self._replacing.clear()
                await self._close_disk()
                warnings.warn(
                    f"result cache {path}: {exc}; this run goes on with the memory cache "
                    "only (the next run checks the file, and rebuilds it if it is bad)",
                    CacheWarning,
                    stacklevel=2,
                )
            return None

    async def _poll_loop(self) -> None:
        """Watch the file for the keys other processes are paying for: a stored value
        goes to its waiters; a claim that ended or expired gives them None (look again)."""
        assert self._wake_poller is not None
        delay = _POLL_FIRST
        while True:
            if not self._remote:
                await self._wake_poller.wait()
                self._wake_poller.clear()
                delay = _POLL_FIRST
            await asyncio.sleep(delay)
            keys = list(self._remote)
            answer = await self._disk_call("read", "poll", keys)
            stored, live = answer if answer is not None else ({}, set())
            moved = 0
            for key in keys:
                if key in live:
                    continue
                future = self._remote.pop(key, None)
                if future is None:
                    continue
                value = stored.get(key)
                if value is not None:
                    if unseal(key, value) is None:
                        value = None  # damaged: the waiter looks again, reads it so and pays
                    else:
                        self._remember(key, value)
                if self._inflight.get(key) is future:
                    del self._inflight[key]
                if not future.done():
                    future.set_result(value)
                moved += 1
            delay = _POLL_FIRST if moved else min(delay * 2, _POLL_MAX)

    async def _renew(self) -> None:
        """Renew this cache's lease in the file (its registration, and any claims)."""
        while True:
            await asyncio.sleep(self.lease / 3)
            if self._owns_rows:
                solo = not self._others
                await self._disk_call("write", "renew", self._owner, self.lease, solo)

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(
            **self._counts,
            memory_entries=len(self._memory),
            disk=None if self.directory is None else str(self.directory / FILE_NAME),
            measured=self.measured,
        )


_NONE: frozenset[int] = frozenset()


def _future() -> asyncio.Future[bytes | None]:
    return asyncio.get_running_loop().create_future()


_PLAIN = (str, int, float, bool, type(None))


def _plain(result: Result) -> bool:
    """Whether msgpack keeps ``result`` exactly without checking: its output a plain
    scalar, no extra (every other field is typed and round-trips exactly)."""
    return type(result.output) in _PLAIN and not result.extra


class _Tier:
    """One connection to the cache file, on a thread of its own."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.store: DiskStore | None = None
        self.path: Path | None = None
        self._thread = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"skynet-eval-cache-{role}"
        )

    async def open(self, directory: Path) -> None:
        loop = asyncio.get_running_loop()
        self.store = await loop.run_in_executor(self._thread, DiskStore.open, directory)
        self.path = self.store.path

    async def call(self, name: str, *args: Any) -> Any:
        assert self.store is not None
        fn = getattr(self.store, name)
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def close(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            await asyncio.get_running_loop().run_in_executor(self._thread, store.close)
        self._thread.shutdown(wait=True)
