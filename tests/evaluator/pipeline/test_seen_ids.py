"""The duplicate check's store of ids taken (``SeenIds``): the same answers as a dict,
runs of consecutive int ids in O(1) memory, through the one check, ``check_unique_ids``."""

from __future__ import annotations

from typing import Any, cast

import pytest

from evaluator import DatasetError
from evaluator._data._dataset import Example, check_unique_ids
from evaluator._data._seen_ids import SeenIds
from evaluator._pipeline._flow import Source


def chunk(ids: list[Any]) -> list[Example]:
    return [Example(id=i, input={}, expected=None, output="a") for i in ids]


def take(seen: SeenIds | dict[Any, int], chunks: list[list[Any]]) -> str | None:
    """Feeds ``chunks`` to the check as a Source does; the error's message, if any."""
    start = 0
    try:
        for ids in chunks:
            check_unique_ids(cast(dict[Any, int], seen), chunk(ids), start)
            start += len(ids)
    except DatasetError as error:
        return str(error)
    return None


# Streams of chunks, each checked against a plain dict, the reference.
CASES: dict[str, list[list[Any]]] = {
    "positions as ids": [list(range(0, 4)), list(range(4, 9)), list(range(9, 20))],
    "ids that run from 100": [list(range(100, 110)), list(range(110, 130))],
    "a far repeat": [list(range(0, 50)), list(range(50, 90)), [17]],
    "a repeat inside a chunk": [list(range(0, 5)), [5, 6, 5]],
    "an int meeting a run": [list(range(0, 10)), ["a", 3]],
    "a run meeting an earlier int": [["a", 12], list(range(10, 20))],
    "2.0 is 2 as a dict key": [list(range(0, 5)), [2.0]],
    "True is 1 as a dict key": [[True], list(range(1, 4))],
    "runs that do not touch": [list(range(0, 5)), list(range(50, 55)), list(range(5, 9))],
    "overlapping runs": [list(range(0, 5)), list(range(20, 25)), list(range(3, 8))],
    "strings": [["a", "b"], ["c", "a"]],
    "a run, then strings, then a run": [list(range(0, 3)), ["x"], list(range(4, 9))],
}


class TestSameAsADict:
    @pytest.mark.parametrize("name", list(CASES))
    def test_the_check_says_what_it_says_with_a_dict(self, name: str) -> None:
        """Each stream is refused (with the same message: id, both positions) or taken,
        exactly as with the dict the check was written for."""
        seen, reference = SeenIds(), dict[Any, int]()
        message = take(seen, CASES[name])
        assert message == take(reference, CASES[name])
        if message is None:
            assert dict(seen) == reference and len(seen) == len(reference)

    def test_positions_as_ids_keep_one_run(self) -> None:
        """A million ids taken in order are one run: no dict entry, no int kept."""
        seen = SeenIds()
        start = 0
        for size in (1, 7, 4096, 995_896):
            seen.update({i: i for i in range(start, start + size)})
            start += size
        assert seen._runs == [[0, 0, 1_000_000]] and seen._other == {}
        assert len(seen) == 1_000_000 and seen[999_999] == 999_999 and 10**6 not in seen

    def test_ids_offset_from_positions(self) -> None:
        """Ids 100.. at positions 0..: the position of an id is found in its run."""
        seen = SeenIds()
        assert take(seen, [list(range(100, 110)), list(range(110, 130))]) is None
        assert seen._runs == [[100, 0, 30]] and seen[125] == 25
        assert take(seen, [[105]]) is not None

    def test_too_many_runs_go_to_the_dict(self) -> None:
        """Past MAX_RUNS, new runs go to the dict: lookups never walk many runs."""
        seen = SeenIds()
        chunks = [list(range(i * 10, i * 10 + 5)) for i in range(SeenIds.MAX_RUNS + 3)]
        assert take(seen, chunks) is None
        assert len(seen._runs) == SeenIds.MAX_RUNS and len(seen._other) == 15
        assert take(seen, [[(SeenIds.MAX_RUNS + 1) * 10 + 2]]) is not None

    def test_other_ids_keep_their_positions_beside_the_dict(self) -> None:
        """Ids that do not run keep no int object for their position: an array beside
        the dict, in the order taken; a lookup (only for a repeat's error) finds it."""
        seen = SeenIds()
        assert take(seen, [["a", "b"], [7, 3], ["c"]]) is None
        assert list(seen._other) == ["a", "b", 7, 3, "c"]
        assert list(seen._positions) == list(range(5))
        assert seen["c"] == 4 and seen[3] == 3 and dict(seen.items()) == dict(seen)

    def test_an_update_over_ids_taken_is_a_dicts(self) -> None:
        """``update`` and item assignment over ids already there change their positions,
        as a dict's (the check never does; the mapping stays a mapping)."""
        seen, reference = SeenIds(), dict[Any, int]()
        for mapping in (seen, reference):
            mapping.update({"a": 0, "b": 1})
            mapping.update({"b": 5, "c": 6})
            mapping["a"] = 9
        assert dict(seen) == reference and list(seen) == list(reference)


class TestASource:
    async def test_rows_without_ids_keep_one_run(self) -> None:
        """A stream of rows without ids (positions as ids) keeps one run whatever its
        length: what lets streaming hold its memory flat (bench_pipeline section 2)."""
        rows = ({"input": {"q": i}, "output": "a"} for i in range(10_000))
        source = Source(rows)
        sizes = [len(await source.take(n)) for n in (1, 999, 4096, 4096, 4096)]
        assert sizes == [1, 999, 4096, 4096, 808]
        assert isinstance(source._ids, SeenIds)
        assert source._ids._runs == [[0, 0, 10_000]] and not source._ids._other

    async def test_a_repeat_after_a_run_is_refused(self) -> None:
        """The run still refuses a repeat, naming both positions."""
        source = Source(
            [
                *({"id": i, "input": {}, "output": "a"} for i in range(50)),
                {"id": 7, "input": {}, "output": "a"},
            ]
        )
        await source.take(50)
        with pytest.raises(DatasetError, match="id 7 twice, at positions 7 and 50"):
            await source.take(10)
