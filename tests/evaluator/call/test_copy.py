"""Private copies of an example's data: nothing shared that can change, nothing new to fail."""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

import msgspec
import pytest

from evaluator._call._copy import private_artifact, private_copy, unread_arguments


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


def _exact(input: Any, output: Any, expected: Any = None) -> Any:
    want = expected["label"]
    return (1.0 if output == want else 0.0), {"feedback": f"{want!r} {output!r}"}


def _closes_over(input: Any, output: Any, expected: Any = None) -> Any:
    def later() -> Any:
        return input

    return 1.0, {"feedback": str(later)}


def _introspects(input: Any, output: Any, expected: Any = None) -> Any:
    return 1.0, {"feedback": str(sys._getframe().f_locals)}


def _helper_introspects(input: Any, output: Any, expected: Any = None) -> Any:
    def peek() -> Any:
        return sys._getframe(1).f_locals

    return 1.0, {"feedback": str(peek())}


def _rebinds(input: Any, output: Any) -> Any:
    input = {}
    return input


class _Callable:
    def __call__(self, input: Any, output: Any, expected: Any = None) -> Any:
        return 1.0, {"feedback": ""}


@functools.wraps(_exact)
def _wrapped(*args: Any) -> Any:
    return _exact(*args)


class TestUnreadArguments:
    def test_a_parameter_never_named_is_unread(self) -> None:
        """An exact-match metric reads output and expected, never input."""
        assert unread_arguments(_exact, 3) == (True, False, False)

    def test_a_closure_reads_what_it_closes_over(self) -> None:
        """A nested function that refers to a parameter reads it (and the rest are unread)."""
        assert unread_arguments(_closes_over, 3) == (False, True, True)

    @pytest.mark.parametrize("fn", [_introspects, _helper_introspects])
    def test_introspection_reads_everything(self, fn: Any) -> None:
        """A frame reached from the function, or from a function nested in it, reaches
        every argument."""
        assert unread_arguments(fn, 3) == (False, False, False)

    def test_reading_after_a_rebinding_counts_as_reading(self) -> None:
        """Any load of the name counts, even of the rebound name: no flow analysis."""
        assert unread_arguments(_rebinds, 2) == (False, True)

    @pytest.mark.parametrize("fn", [_Callable(), _wrapped, len])
    def test_what_is_not_a_plain_function_reads_everything(self, fn: Any) -> None:
        """A callable object, a wrapper (``*args``, ``__wrapped__``) and a builtin:
        their code is not the one that receives the arguments."""
        assert unread_arguments(fn, 3) == (False, False, False)
