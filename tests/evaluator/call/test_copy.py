"""Private copies of an example's data: nothing shared that can change, nothing new to fail."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest

from evaluator._call._copy import private_artifact, private_copy


class Point:
    def __init__(self, items: list[int]) -> None:
        self.items = items


class TestPrivateCopy:
    @pytest.mark.parametrize("value", ["s", 1, 2.5, None, True, b"b", 1j, (1, "a")])
    def test_immutable_values_are_shared(self, value: Any) -> None:
        """Values that cannot change are not copied."""
        assert private_copy(value) is value

    def test_unset_output_keeps_its_identity(self) -> None:
        """The 'no output' marker stays the marker (the pipeline tests it with `is`)."""
        assert private_copy(msgspec.UNSET) is msgspec.UNSET

    @pytest.mark.parametrize(
        "value",
        [
            {"q": "a", "n": 1},
            {"q": ["a", {"b": [1, 2]}]},
            [[1], {"x": (1, [2])}],
            Point([1, 2]),
        ],
    )
    def test_nothing_mutable_is_shared(self, value: Any) -> None:
        """Changing anything inside the copy leaves the original as it was."""
        copy = private_copy(value)
        assert copy is not value
        if isinstance(copy, dict):
            copy["new"] = 1
            for item in copy.values():
                if isinstance(item, list):
                    item.append("changed")
            assert "new" not in value and "changed" not in str(value)
        elif isinstance(copy, list):
            copy[0].append("changed")
            assert "changed" not in str(value)
        else:
            copy.items.append(3)
            assert value.items == [1, 2]

    def test_cycles_are_copied(self) -> None:
        """A list that contains itself is copied whole."""
        loop: list[Any] = [1]
        loop.append(loop)
        copy = private_copy(loop)
        assert copy is not loop and copy[1] is copy

    def test_uncopyable_and_too_deep_values_are_shared(self) -> None:
        """What cannot be copied (a lock, nesting past the stack) is passed as it is."""
        holder = {"lock": threading.Lock()}
        assert private_copy(holder) is holder
        deep: Any = 0
        for _ in range(10_000):
            deep = [deep]
        assert private_copy(deep) is deep


class TestPrivateArtifact:
    def test_plain_data_is_copied_all_the_way_down(self) -> None:
        """A config artifact's dicts, lists and tuples are copied: editing them in a call
        leaves the candidate as it was."""
        artifact: dict[str, Any] = {"prompt": "p", "shots": [{"q": "a"}], "pair": ([1], 2)}
        copy = private_artifact(artifact)
        copy["shots"][0]["q"] = "changed"
        copy["pair"][0].append(3)
        assert artifact == {"prompt": "p", "shots": [{"q": "a"}], "pair": ([1], 2)}

    def test_objects_are_shared_not_copied(self) -> None:
        """An object artifact (a model, a client), and an object inside a config, is the
        caller's own: shared as it is, never deep-copied per call."""
        model = Point([1])
        assert private_artifact(model) is model
        copy = private_artifact({"model": model, "lock": threading.Lock()})
        assert copy["model"] is model

    def test_a_cycle_is_shared(self) -> None:
        """A list that contains itself cannot be copied this way: it is shared."""
        loop: list[Any] = [1]
        loop.append(loop)
        assert private_artifact(loop) is loop
