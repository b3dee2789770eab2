"""The disk tier: one SQLite file in WAL mode, shared by concurrent runs and processes.

Why SQLite: it is in the standard library, it is built for many readers and writers in
several processes on one file (WAL: readers never wait for the writer; writers take turns
under ``busy_timeout``), and a batch of lookups is one indexed ``SELECT``. Measured in
``benchmarks/bench_cache.py`` (lookups per second from disk, a cold run with and without).

The file is ``DIR/results.sqlite3``; it is marked as ours by ``PRAGMA application_id``
and a ``meta`` table holding the cache format. A file that is not SQLite, or is someone
else's database, or an older format, or that SQLite finds malformed, is never read nor
changed: it is moved aside (``results.sqlite3.bad-<time>``, with its ``-wal``), a
:class:`CacheWarning` says so and where it went, and a new cache is made in its place.
Opening and rebuilding happen under an exclusive ``flock`` on ``DIR/results.sqlite3.lock``
so that two processes never rebuild at once.

Claims (issue 28): a run about to pay for a key no run has stored holds a row in
``claims(key, owner)``; another run that needs the key meanwhile waits for the result
instead of paying again. A claim holds while its owner's lease in ``owners(owner,
expires)`` does: one row per open cache, renewed while it runs (one ``UPDATE`` however
many keys it holds), so the keys of an owner that crashed are taken over once its lease
runs out. A stored result ends a claim by itself (waiters read ``results`` first), so a
store writes no claim row; an owner that fails a key deletes its claim, and all of its
rows when it closes. Taking a claim re-reads ``results`` in the same transaction, so a
result stored between a lookup and its claim is a hit, not a second payment.

A claim is a write transaction (tens of ms on a slow disk), worth it only when another
run may need the key: an owner registers at open (:meth:`DiskStore.join`, one transaction
that also drops expired owners and their claims) and, when it finds no other live owner,
is *solo* (a row in ``solo``): it claims nothing in the file. A run that joins while a
solo owner lives claims from the start, and waits before paying for anything until every
solo owner has seen it (:meth:`DiskStore.solo_owners`): a solo owner reads ``owners``
every 100 ms (:meth:`DiskStore.others`), and on finding another claims the keys it is
paying for and leaves ``solo`` in one transaction (``write(share=True)``). Two runs that
join at one instant take turns in ``join``: the second sees the first, so one of them
always claims and the other always hears of it before the first one pays.

Every method here blocks: the engine calls them on a thread of its own
(:class:`~evaluator._cache._cache.ResultCache`), never on the event loop.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec

from .._exceptions import ConfigError
from .._outpath import check_output_path
from ._key import CACHE_FORMAT

__all__ = ["FILE_NAME", "CacheWarning", "DiskStats", "DiskStore"]

FILE_NAME = "results.sqlite3"
#: ``PRAGMA application_id``: "skyc", so that ``file(1)`` and we can tell our files.
APPLICATION_ID = 0x736B7963
#: Keys per SELECT: well under SQLite's limit on bound parameters.
_BATCH = 500
_BUSY_MS = 30_000


class CacheWarning(UserWarning):
    """The disk cache could not be used as it was (a corrupt or foreign file, moved aside)."""


class DiskStats(msgspec.Struct, frozen=True, kw_only=True):
    """What ``skynet-eval cache stats`` prints: the file, its entries and their age."""

    path: str
    entries: int
    bytes: int
    oldest: str | None
    newest: str | None


def _stamp(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="seconds")


def check_directory(directory: str | os.PathLike[str], option: str = "cache") -> Path:
    """``directory`` as a Path, refused with a clear error when it cannot hold a cache."""
    if not isinstance(directory, (str, os.PathLike)) or not str(directory).strip():
        raise ConfigError(
            f"must be a directory path (or True for memory only), got {directory!r}",
            option=option,
            value=directory,
        )
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"must be a directory, but {path} is a file; give a directory for the cache "
            f"(it holds {FILE_NAME})",
            option=option,
            value=str(directory),
        )
    if path.is_dir():  # the cache's own files: never a FIFO or a device written through
        for name in (FILE_NAME, f"{FILE_NAME}-wal", f"{FILE_NAME}-shm", f"{FILE_NAME}.lock"):
            if os.path.lexists(path / name):
                check_output_path(path / name, option=option)
    return path


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with open(directory / f"{FILE_NAME}.lock", "a+b") as fh:
        # A file system without locks: SQLite's own locking still holds.
        with contextlib.suppress(OSError):
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


class DiskStore:
    """One open cache file. Build it with :meth:`open`; use it from one thread."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn

    @classmethod
    def open(cls, directory: Path) -> DiskStore:
        """Open (or make) the cache in ``directory``; a bad file is moved aside, with a
        :class:`CacheWarning`, and a new one made. A directory that cannot hold a cache
        (not writable, say) is a :class:`ConfigError` saying so."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with _locked(directory):
                return cls(directory / FILE_NAME, _open_or_rebuild(directory / FILE_NAME))
        except OSError as exc:
            raise _unusable_directory(directory, exc.strerror or str(exc)) from None
        except _Unusable as bad:
            raise _unusable_directory(directory, bad.reason) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (taking SQLite's write lock at once), rolled back on error."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The stored values of those ``keys`` that are in the cache."""
        return self._select(keys)

    def _select(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        found: dict[bytes, bytes] = {}
        execute = self._conn.execute
        for start in range(0, len(keys), _BATCH):
            part = keys[start : start + _BATCH]
            marks = ",".join("?" * len(part))
            rows = execute(f"SELECT key, value FROM results WHERE key IN ({marks})", part)
            found.update(rows.fetchall())
        return found

    def put_many(self, items: Sequence[tuple[bytes, bytes]], replace: bool = False) -> None:
        """Store ``items`` in one transaction; a key already stored keeps its value, unless
        ``replace`` (its value failed its check on reading: the new one takes its place)."""
        if replace:
            self.write(replacing=items)
        else:
            self.write(items)

    def write(
        self,
        items: Sequence[tuple[bytes, bytes]] = (),
        replacing: Sequence[tuple[bytes, bytes]] = (),
        released: Sequence[bytes] = (),
        claims: Sequence[bytes] = (),
        owner: str = "",
        lease: float = 0.0,
        share: bool = False,
    ) -> tuple[dict[bytes, bytes], list[bytes]]:
        """One transaction: store ``items`` (a key already stored keeps its value) and
        ``replacing`` (their stored values failed their check: these take their place),
        end ``owner``'s claims on ``released``, and claim those ``claims`` that have no
        result and no live claim, renewing ``owner``'s lease for ``lease`` seconds. The
        answer, for ``claims``: the values stored meanwhile, and the keys claimed (the
        rest are another owner's, live). ``share``: ``owner`` leaves ``solo`` (it claims
        from now on; ``claims`` holds the keys it was paying for unclaimed)."""
        now = time.time()
        with self._transaction() as conn:
            for verb, batch in (("IGNORE", items), ("REPLACE", replacing)):
                if batch:
                    conn.executemany(
                        f"INSERT OR {verb} INTO results (key, value, created) VALUES (?, ?, ?)",
                        [(k, v, now) for k, v in batch],
                    )
            if released:
                conn.executemany(
                    "DELETE FROM claims WHERE key = ? AND owner = ?", [(k, owner) for k in released]
                )
            if share:
                conn.execute("DELETE FROM solo WHERE owner = ?", (owner,))
            if not claims:
                return {}, []
            keys = claims
            conn.execute("INSERT OR REPLACE INTO owners VALUES (?, ?)", (owner, now + lease))
            found = self._select(keys)
            rest = [k for k in keys if k not in found]
            conn.executemany(
                "INSERT INTO claims (key, owner) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
                "SET owner = excluded.owner WHERE NOT EXISTS (SELECT 1 FROM owners "
                "WHERE owners.owner = claims.owner AND owners.expires >= ?)",
                [(k, owner, now) for k in rest],
            )
            mine: set[bytes] = set()
            for start in range(0, len(rest), _BATCH):
                part = rest[start : start + _BATCH]
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT key FROM claims WHERE owner = ? AND key IN ({marks})", (owner, *part)
                )
                mine.update(row[0] for row in rows)
        return found, [k for k in rest if k in mine]

    def poll(self, keys: Sequence[bytes]) -> tuple[dict[bytes, bytes], set[bytes]]:
        """The values stored under ``keys``, and those of the rest still claimed by a live
        lease (a key in neither is free: its owner failed, gave up or crashed)."""
        found = self._select(keys)
        rest = [k for k in keys if k not in found]
        live: set[bytes] = set()
        now = time.time()
        for start in range(0, len(rest), _BATCH):
            part = rest[start : start + _BATCH]
            marks = ",".join("?" * len(part))
            rows = self._conn.execute(
                "SELECT key FROM claims JOIN owners USING (owner) "
                f"WHERE owners.expires >= ? AND key IN ({marks})",
                (now, *part),
            )
            live.update(row[0] for row in rows)
        return found, live

    def join(self, owner: str, lease: float) -> bool:
        """Register ``owner`` for ``lease`` seconds, dropping expired owners and every claim
        without a live owner; whether another live owner is registered (if not, ``owner``
        is solo: it claims nothing until it sees one, :meth:`others`)."""
        now = time.time()
        with self._transaction() as conn:
            conn.execute("DELETE FROM owners WHERE expires < ?", (now,))
            for table in ("claims", "solo"):
                conn.execute(f"DELETE FROM {table} WHERE owner NOT IN (SELECT owner FROM owners)")
            (others,) = conn.execute(
                "SELECT count(*) FROM owners WHERE owner != ?", (owner,)
            ).fetchone()
            conn.execute("INSERT OR REPLACE INTO owners VALUES (?, ?)", (owner, now + lease))
            if not others:
                conn.execute("INSERT OR REPLACE INTO solo VALUES (?)", (owner,))
        return bool(others)

    def others(self, owner: str) -> bool:
        """Whether an owner other than ``owner`` holds a live lease (one indexed read)."""
        row = self._conn.execute(
            "SELECT 1 FROM owners WHERE owner != ? AND expires >= ? LIMIT 1", (owner, time.time())
        ).fetchone()
        return row is not None

    def solo_owners(self, owner: str) -> int:
        """How many live owners other than ``owner`` claim nothing yet (solo): a run that
        joined with them waits until they have seen it, or their leases run out."""
        (count,) = self._conn.execute(
            "SELECT count(*) FROM solo JOIN owners USING (owner) WHERE owner != ? AND expires >= ?",
            (owner, time.time()),
        ).fetchone()
        return int(count)

    def renew(self, owner: str, lease: float, solo: bool = False) -> None:
        """Extend ``owner``'s lease (every claim it holds) by ``lease`` seconds from now;
        its rows come back (``solo``: as a solo owner) if ``cache clear`` dropped them."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO owners VALUES (?, ?) ON CONFLICT (owner) DO UPDATE SET expires = "
                "excluded.expires",
                (owner, time.time() + lease),
            )
            if solo:
                conn.execute("INSERT OR IGNORE INTO solo VALUES (?)", (owner,))

    def release(self, owner: str) -> None:
        """End ``owner``'s claims and lease (it closes): others take its keys over now."""
        with self._transaction() as conn:
            for table in ("claims", "solo", "owners"):
                conn.execute(f"DELETE FROM {table} WHERE owner = ?", (owner,))

    def stats(self) -> DiskStats:
        count, oldest, newest = self._conn.execute(
            "SELECT count(*), min(created), max(created) FROM results"
        ).fetchone()
        size = sum(
            p.stat().st_size
            for p in (self.path, self.path.with_name(FILE_NAME + "-wal"))
            if p.exists()
        )
        return DiskStats(
            path=str(self.path),
            entries=int(count),
            bytes=size,
            oldest=_stamp(oldest),
            newest=_stamp(newest),
        )

    def clear(self) -> int:
        """Delete every entry, claim and owner (a crashed run's rows too; a live run's
        lease comes back at its next renewal) and give the space back; the entries deleted."""
        with self._transaction() as conn:
            (count,) = conn.execute("SELECT count(*) FROM results").fetchone()
            for table in ("results", "claims", "owners", "solo"):
                conn.execute(f"DELETE FROM {table}")
        # Giving the space back needs the file to itself: with a run reading it now, the
        # entries are gone all the same and the space is reused by the next entries.
        conn.execute("PRAGMA busy_timeout = 1000")
        try:
            with contextlib.suppress(sqlite3.OperationalError):
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
        return int(count)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()


class _Unusable(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _unusable_directory(directory: Path, why: str) -> ConfigError:
    return ConfigError(
        f"cannot hold a result cache ({why}); give a directory you can write, or move "
        f"{FILE_NAME} out of it",
        option="cache",
        value=str(directory),
    )


def _open_or_rebuild(path: Path) -> sqlite3.Connection:
    """A connection to the cache at ``path``; a bad file there is moved aside first."""
    try:
        return _connect(path)
    except _Unusable as bad:
        aside = _move_aside(path)
        warnings.warn(
            f"result cache {path}: {bad.reason}; moved it to {aside.name} and made a new "
            "cache (nothing is lost: the old file is kept as it was)",
            CacheWarning,
            stacklevel=4,
        )
    return _connect(path)


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to a checked (or new) cache file; :class:`_Unusable` if it is bad."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _Unusable(f"SQLite cannot open it ({exc})") from None
    try:
        _prepare(conn)
    except _Unusable:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise _Unusable(f"it is not a usable SQLite database ({exc})") from None
    return conn


#: Who is paying for a key now, and until when each owner's lease holds (renewed while
#: it runs), and the owners that claim nothing yet (no other owner was live when they
#: joined). An owner's rows are dropped when it closes; a crashed one's at the next join.
_CLAIMS = (
    "CREATE TABLE claims (key BLOB PRIMARY KEY, owner TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE owners (owner TEXT PRIMARY KEY, expires REAL NOT NULL)",
    "CREATE TABLE solo (owner TEXT PRIMARY KEY) WITHOUT ROWID",
)


def _prepare(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
    (app,) = conn.execute("PRAGMA application_id").fetchone()
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if app == 0 and not tables:  # a new (or empty) file: make it ours
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute(
            "CREATE TABLE results (key BLOB PRIMARY KEY, value BLOB NOT NULL, "
            "created REAL NOT NULL) WITHOUT ROWID"
        )
        conn.execute("INSERT INTO meta VALUES ('format', ?)", (str(CACHE_FORMAT),))
        for table in _CLAIMS:
            conn.execute(table)
        conn.execute("COMMIT")
    elif app != APPLICATION_ID:
        raise _Unusable("it is not a skynet-eval result cache (another program's database)")
    else:
        row = conn.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
        if row is None or row[0] != str(CACHE_FORMAT):
            found = "none" if row is None else row[0]
            raise _Unusable(f"it has cache format {found}, this engine writes {CACHE_FORMAT}")
        conn.execute("PRAGMA journal_mode = WAL")
        if "solo" not in tables:  # made before claims: the same format, tables more
            for table in _CLAIMS:
                conn.execute(table.replace("TABLE", "TABLE IF NOT EXISTS", 1))
    conn.execute("PRAGMA synchronous = NORMAL")


def _move_aside(path: Path) -> Path:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%f")
    aside = path.with_name(f"{FILE_NAME}.bad-{stamp}")
    if path.exists():
        os.replace(path, aside)
    for suffix in ("-wal", "-shm"):
        extra = path.with_name(FILE_NAME + suffix)
        if extra.exists():
            os.replace(extra, aside.with_name(aside.name + suffix))
    return aside
