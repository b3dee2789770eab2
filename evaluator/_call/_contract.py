"""The metric return-value rules of ``docs/contract.md``: one validator for every caller.

The contract check, every example of a full run (in whatever executor) and the DSPy
adapter all call :func:`validate_return`.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from typing import Any

import msgspec

from .._exceptions import InvalidReturn
from ._copy import private_copy
from ._results import Scored

__all__ = ["short_repr", "validate_return"]

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlong = 40
_repr.maxdict = 4
_repr.maxlist = 4
_repr.maxtuple = 4

_PAIR_HINT = 'return a pair: (score, {"feedback": "..."})'


def short_repr(value: Any) -> str:
    """A repr short enough for an error message."""
    try:
        text = _repr.repr(value)
    except Exception:  # a user object whose __repr__ raises
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= 120 else text[:117] + "..."


def _number_problem(value: Any) -> str | None:
    """Why ``value`` is not a contract number, or None when it is one."""
    if isinstance(value, bool):
        return f"is a bool ({value!r}); return 1.0 or 0.0 instead"
    if not isinstance(value, numbers.Real):
        return f"is a {type(value).__name__} ({short_repr(value)}); return a number"
    try:
        as_float = float(value)
    except (TypeError, ValueError, OverflowError):
        return f"is a {type(value).__name__} that does not convert to float; return a float"
    if math.isnan(as_float):
        return "is NaN; return a finite number (an optimizer cannot climb NaN)"
    if math.isinf(as_float):
        return f"is {as_float}; return a finite number"
    return None


def _to_number(value: Any, what: str, example_id: Any) -> float:
    # Fast path for the common case: a plain float or int.
    kind = type(value)
    if kind is float:
        if value - value == 0.0:  # false for NaN and infinities
            return value  # type: ignore[no-any-return]
    elif kind is int:
        return float(value)
    problem = _number_problem(value)
    if problem is not None:
        raise InvalidReturn(f"{what} {problem}", example_id=example_id)
    return float(value)


_extra_encoder = msgspec.json.Encoder(order="deterministic")
_ENCODE_ERRORS = (TypeError, ValueError, RecursionError, OverflowError)  # UnicodeEncodeError too


def _normalise_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """Extra info as it will read back from the results file, so results round-trip.

    JSON data, and the values JSON has a standard form for (tuples as lists, int keys as
    text, Structs and dataclasses as objects), are stored in that form now. A value JSON
    cannot hold (NaN, a complex number, an object of the metric's own class, text with a
    lone surrogate, nesting deeper than the encoder goes) is not the metric's failure:
    the extra is kept as returned (a private copy) and the results file stores it by its
    rule (``evaluator._storable``: a marker, and a note to the caller), never as a silent
    ``null`` nor as an error blamed on ``score``.
    """
    try:
        plain = msgspec.to_builtins(extra, str_keys=True)
        if _has_nonfinite(plain):  # msgspec would write NaN as null without a word
            return private_copy(extra)
        encoded = _extra_encoder.encode(plain)
    except _ENCODE_ERRORS:
        return private_copy(extra)
    decoded: dict[str, Any] = msgspec.json.decode(encoded)
    return decoded


def _has_nonfinite(value: Any) -> bool:
    """Whether plain data ``value`` (dicts, lists, numbers, text) holds a NaN or infinity."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def validate_return(value: Any, example_id: Any = None) -> Scored:
    """Check a metric's return value against the contract and return it as a ``Scored``.

    Raises :class:`InvalidReturn` naming the step, the example and the fix.
    """
    # The fast path, for the shape nearly every metric returns: (number, {"feedback": str}).
    # Exact type checks only; anything else (subclasses, named scores, extra keys, NaN, a
    # bool) takes the full validator below, which also words the errors. Every executor
    # and the contract check go through here: there is no second copy of these rules.
    if (type(value) is tuple or type(value) is list) and len(value) == 2:
        raw_score, info = value
        if type(info) is dict and len(info) == 1:
            feedback = info.get("feedback")
            if type(feedback) is str:
                kind = type(raw_score)
                if kind is float:
                    if raw_score - raw_score == 0.0:  # false for NaN and infinities
                        return Scored(raw_score, {}, feedback, {})
                elif kind is int:
                    return Scored(float(raw_score), {}, feedback, {})
    return _validate_slow(value, example_id)


def _validate_slow(value: Any, example_id: Any) -> Scored:
    """The full validator: every shape rule in turn, each rejection worded for the user."""
    raw_score, info = _pair(value, example_id)
    score = _to_number(raw_score, "the score", example_id)
    feedback = _feedback(info, example_id)
    scores: dict[str, float] = {}
    extra: dict[str, Any] = {}
    for key, item in info.items():
        if key == "feedback":
            continue
        if key == "scores":
            scores = _named_scores(item, example_id)
        elif not isinstance(key, str):
            raise InvalidReturn(
                f"the info dict has a key of type {type(key).__name__} ({short_repr(key)}); "
                "use str keys",
                example_id=example_id,
            )
        else:
            extra[key] = item
    if extra:
        extra = _normalise_extra(extra)
    return Scored(score, scores, str(feedback), extra)


def _pair(value: Any, example_id: Any) -> tuple[Any, Any]:
    """The two items of a pair (a tuple or a list, subclasses too), or why it is not one."""
    if value is None:
        raise InvalidReturn(
            f"returned None, not a pair; did you forget `return`? {_PAIR_HINT}",
            example_id=example_id,
        )
    if not isinstance(value, (tuple, list)):
        raise InvalidReturn(
            f"returned {short_repr(value)} ({type(value).__name__}), not a pair; {_PAIR_HINT}",
            example_id=example_id,
        )
    if len(value) != 2:
        raise InvalidReturn(
            f"returned a {type(value).__name__} of {len(value)} items "
            f"({short_repr(value)}); {_PAIR_HINT}",
            example_id=example_id,
        )
    raw_score, info = value
    return raw_score, info


def _feedback(info: Any, example_id: Any) -> str:
    """The feedback of an info dict, or why the info is not a dict with a str feedback."""
    if not isinstance(info, dict):
        raise InvalidReturn(
            f"the info is a {type(info).__name__} ({short_repr(info)}), not a dict; "
            'return (score, {"feedback": "..."})',
            example_id=example_id,
        )
    if "feedback" not in info:
        raise InvalidReturn(
            f"the info dict has no 'feedback' key ({short_repr(info)}); "
            'add {"feedback": "what is wrong and what the right result looks like"}',
            example_id=example_id,
        )
    feedback = info["feedback"]
    if not isinstance(feedback, str):
        raise InvalidReturn(
            f"the feedback is a {type(feedback).__name__} ({short_repr(feedback)}), not a str; "
            "return the feedback as text",
            example_id=example_id,
        )
    return feedback


def _named_scores(item: Any, example_id: Any) -> dict[str, float]:
    """The ``scores`` of an info dict: str names to numbers."""
    if not isinstance(item, dict):
        raise InvalidReturn(
            f"'scores' is a {type(item).__name__} ({short_repr(item)}), not a dict; "
            'return "scores": {"name": number, ...}',
            example_id=example_id,
        )
    scores: dict[str, float] = {}
    for name, named in item.items():
        if not isinstance(name, str):
            raise InvalidReturn(
                f"a key of 'scores' is a {type(name).__name__} ({short_repr(name)}); "
                "name each score with a str",
                example_id=example_id,
            )
        scores[name] = _to_number(named, f"the named score {name!r}", example_id)
    return scores
