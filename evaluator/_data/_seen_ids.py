"""The one store of ids taken, for the duplicate checks: a
:class:`~evaluator._pipeline._flow.Source`'s (through
:func:`~evaluator._data._dataset.check_unique_ids`) and a dataset's rows' (``_Unique``).

:func:`~evaluator._data._dataset.check_unique_ids` keeps every id taken and its position,
so that a repeat names both positions. In a dict that is about 110 bytes an example (an
entry, and an int object for the position and, unless the caller keeps them, for the
id): streaming a million examples held 100 MB for it alone, the only state that grew
with the stream. :class:`SeenIds` is the same mapping, id -> position, kept as *runs*
where the ids are consecutive ints taken in order (rows without ids, whose positions
are their ids; ids 0..n-1): one run, three ints, for any number of examples. Other ids
(strings, shuffled ints) stay in a dict, in the order taken, their positions beside it
in an ``array('q')`` (8 bytes, not an int object's 32): the dict entry and the id remain,
about 45 bytes plus the id. A position is looked up only for the error a repeat raises,
by walking the dict.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, MutableMapping
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

    __slots__ = ("_last", "_other", "_positions", "_runs")

    #: Runs kept before the ids of a new run go to the dict (shuffled chunks would
    #: otherwise make every lookup walk many runs).
    MAX_RUNS = 64

    def __init__(self) -> None:
        self._runs: list[list[int]] = []  # [first id, its position, length]
        #: The other ids, in the order taken (values unused), and their positions.
        self._other: dict[Any, None] = {}
        self._positions = array("q")
        #: The chunk last asked about and whether it is a run: the check asks
        #: ``isdisjoint``, then ``update``s with the same, unchanged, chunk.
        self._last: tuple[Mapping[Any, int], tuple[int, int, int] | None] | None = None

    # -- the runs ----------------------------------------------------------------------

    def _run_of(self, fresh: Mapping[Any, int]) -> tuple[int, int, int] | None:
        """``(first id, first position, length)`` if ``fresh`` is one run, else None."""
        if self._last is not None and self._last[0] is fresh:
            return self._last[1]
        run = self._find_run(fresh)
        self._last = (fresh, run)
        return run

    @staticmethod
    def _find_run(fresh: Mapping[Any, int]) -> tuple[int, int, int] | None:
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

    def _other_index(self, key: Any) -> int:
        return next(i for i, taken in enumerate(self._other) if taken is key or taken == key)

    def _add_other(self, fresh: Mapping[Any, int]) -> None:
        before = len(self._other)
        self._other.update(dict.fromkeys(fresh))
        if len(self._other) - before == len(fresh):
            self._positions.extend(fresh.values())
            return
        # Some id was there already (not from the check, which adds only new ids).
        for key in list(self._other)[before:]:
            del self._other[key]
        for key, position in fresh.items():
            self[key] = position

    def __getitem__(self, key: Any) -> int:
        if key in self._other:
            return self._positions[self._other_index(key)]
        position = self._run_position(key) if self._runs else None
        if position is None:
            raise KeyError(key)
        return position

    def __contains__(self, key: object) -> bool:
        return key in self._other or (bool(self._runs) and self._run_position(key) is not None)

    def __setitem__(self, key: Any, position: int) -> None:
        if key in self._other:
            self._positions[self._other_index(key)] = position
            return
        self._other[key] = None
        self._positions.append(position)

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

    def items(self) -> ItemsView[Any, int]:
        return _Items(self)

    def update(self, other: Any = (), /, **kwargs: int) -> None:
        run = self._run_of(other) if isinstance(other, Mapping) and not kwargs else None
        self._last = None  # the chunk is taken: the next is a new dict
        if run is None:
            self._add_other(other if isinstance(other, Mapping) else dict(other, **kwargs))
            return
        first, start, n = run
        if self._runs:
            last = self._runs[-1]
            if last[0] + last[2] == first and last[1] + last[2] == start:
                last[2] += n
                return
        if len(self._runs) >= self.MAX_RUNS:
            self._add_other(other)
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


class _Items(ItemsView[Any, int]):
    """The items view, without a lookup an item."""

    _mapping: SeenIds

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        seen = self._mapping
        for first, start, length in seen._runs:
            yield from zip(range(first, first + length), range(start, start + length), strict=True)
        yield from zip(seen._other, seen._positions, strict=True)
