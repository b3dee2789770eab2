"""``skynet-eval cache stats|clear DIR``: the result cache, for people who look after disks.

``stats`` prints the file, its entries, its size on disk and the age of its entries;
``clear`` deletes every entry (under the cache's own lock and SQLite's, so a run using the
cache meanwhile waits a moment and goes on) and gives the space back. A corrupt or
foreign file is moved aside and replaced by an empty cache, with a warning, as a run does.
"""

from __future__ import annotations

import sqlite3
import sys

from evaluator._cache import DiskStore, check_directory

from ._main import EXIT_FAILED, EXIT_OK
from ._options import CacheOptions
from ._output import write_json

__all__ = ["execute"]


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def execute(options: CacheOptions) -> int:
    """Print the cache's statistics, or clear it."""
    try:
        return _execute(options)
    except sqlite3.Error as exc:  # busy past the timeout, a disk error: say so, no traceback
        print(f"skynet-eval cache: error: {options.directory}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _execute(options: CacheOptions) -> int:
    store = DiskStore.open(check_directory(options.directory, option="directory"))
    try:
        if options.action == "clear":
            deleted = store.clear()
            stats = store.stats()
            if options.json:
                write_json(sys.stdout, {"cleared": deleted, "stats": stats})
            else:
                print(f"cleared {deleted:,} entries from {stats.path} ({_size(stats.bytes)} now)")
            return EXIT_OK
        stats = store.stats()
    finally:
        store.close()
    if options.json:
        write_json(sys.stdout, stats)
        return EXIT_OK
    print(f"cache   {stats.path}")
    print(f"entries {stats.entries:,}")
    print(f"size    {_size(stats.bytes)}")
    if stats.oldest is not None:
        print(f"oldest  {stats.oldest}")
        print(f"newest  {stats.newest}")
    return EXIT_OK
