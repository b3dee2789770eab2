"""The ids a :class:`~evaluator._pipeline._flow.Source` has taken, for the duplicate check.

:func:`~evaluator._data._dataset.check_unique_ids` keeps every id taken and its position,
so that a repeat names both positions. In a dict that is about 110 bytes an example (an
entry, and an int object for the position and, unless the caller keeps them, for the
id): streaming a million examples held 100 MB for it alone, the only state that grew
with the stream. :class:`SeenIds` is the same mapping, id -> position, kept as *runs*
where the ids are consecutive ints taken in order (rows without ids, whose positions
are their ids; ids 0..n-1): one run, three ints, for any number of examples. Other ids
(strings, shuffled ints) stay in a dict, at the dict's cost.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, KeysView, Mapping, MutableMapping
from typing import Any

__all__ = ["SeenIds"]


def _as_int(key: Any) -> int | None:
    """``key`` as the int a dict would take it for (2, 2.0, True -> 1), or None."""
    if isinstance(key, float):
        return int(key) if key.is_integer() else None
    try:
        return operator.index(key)
    except TypeError:
        return None


class SeenIds(MutableMapping[Any, int]):
    """id -> position, like a dict, with runs of consecutive int ids kept as runs."""

    __slots__ = ("_other", "_runs")

    #: Runs kept before the ids of a new run go to the dict (shuffled chunks would
    #: otherwise make every lookup walk many runs).
    MAX_RUNS = 64

    def __init__(self) -> None:
        self._runs: list[list[int]] = []  # [first id, its position, length]
        self._other: dict[Any, int] = {}

    # -- the runs ----------------------------------------------------------------------

    @staticmethod
    def _run_of(fresh: Mapping[Any, int]) -> tuple[int, int, int] | None:
        """``(first id, first position, length)`` if ``fresh`` is one run, else None."""
        if not fresh:
            return None
        first = next(iter(fresh))
        if type(first) is not int:
            return None
        n = len(fresh)
        start = fresh[first]
        # Two C-level comparisons a chunk (equality as the dict's: 2.0 == 2).
        if list(fresh) != list(range(first, first + n)):
            return None
        if list(fresh.values()) != list(range(start, start + n)):
            return None
        return first, start, n

    def _run_position(self, key: Any) -> int | None:
        i = _as_int(key)
        if i is None:
            return None
        for first, start, length in self._runs:
            if first <= i < first + length:
                return start + (i - first)
        return None

    # -- the mapping -------------------------------------------------------------------

    def __getitem__(self, key: Any) -> int:
        if key in self._other:
            return self._other[key]
        position = self._run_position(key) if self._runs else None
        if position is None:
            raise KeyError(key)
        return position

    def __contains__(self, key: object) -> bool:
        return key in self._other or (bool(self._runs) and self._run_position(key) is not None)

    def __setitem__(self, key: Any, position: int) -> None:
        self._other[key] = position

    def __delitem__(self, key: Any) -> None:
        raise TypeError("the ids a stream has taken are never forgotten")

    def __iter__(self) -> Iterator[Any]:
        for first, _start, length in self._runs:
            yield from range(first, first + length)
        yield from self._other

    def __len__(self) -> int:
        return sum(length for _f, _s, length in self._runs) + len(self._other)

    def keys(self) -> KeysView[Any]:
        return _Keys(self)

    def update(self, other: Any = (), /, **kwargs: int) -> None:
        run = self._run_of(other) if isinstance(other, Mapping) and not kwargs else None
        if run is None:
            self._other.update(other, **kwargs)
            return
        first, start, n = run
        if self._runs:
            last = self._runs[-1]
            if last[0] + last[2] == first and last[1] + last[2] == start:
                last[2] += n
                return
        if len(self._runs) >= self.MAX_RUNS:
            self._other.update(other)
            return
        self._runs.append([first, start, n])

    def isdisjoint(self, ids: Iterable[Any]) -> bool:
        """No id of ``ids`` taken yet: in C but for a chunk that is not a run while runs
        are kept."""
        run = self._run_of(ids) if isinstance(ids, Mapping) else None
        if run is None:
            if not self._other.keys().isdisjoint(ids):
                return False
            return not self._runs or all(self._run_position(k) is None for k in ids)
        first, _start, n = run
        for r_first, _s, length in self._runs:
            if first < r_first + length and r_first < first + n:
                return False
        return self._other.keys().isdisjoint(range(first, first + n))


class _Keys(KeysView[Any]):
    """The keys view, whose ``isdisjoint`` does not walk every id taken."""

    _mapping: SeenIds

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        return self._mapping.isdisjoint(other)
