"""The result cache: never pay twice for an (artifact, example) pair (issue 15).

- ``_key.py``    the key: everything that can change a result, hashed in three layers
- ``_disk.py``   the disk tier: one SQLite file in WAL mode, checked, rebuilt when bad
- ``_cache.py``  ResultCache: the memory tier in front of the disk, lookups and stores
"""

from ._cache import CacheStatistics as CacheStatistics
from ._cache import Lookup as Lookup
from ._cache import ResultCache as ResultCache
from ._disk import FILE_NAME as FILE_NAME
from ._disk import CacheWarning as CacheWarning
from ._disk import DiskStats as DiskStats
from ._disk import DiskStore as DiskStore
from ._disk import check_directory as check_directory
from ._key import NOT_KEYED as NOT_KEYED
from ._key import KeyMaker as KeyMaker
from ._key import check_key_files as check_key_files
from ._key import depends_on_measurements as depends_on_measurements

__all__ = [
    "FILE_NAME",
    "NOT_KEYED",
    "CacheStatistics",
    "CacheWarning",
    "DiskStats",
    "DiskStore",
    "KeyMaker",
    "Lookup",
    "ResultCache",
    "check_directory",
    "check_key_files",
    "depends_on_measurements",
]
