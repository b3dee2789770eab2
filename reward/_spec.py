"""Parsing and validating a ``REWARD_SPEC`` into a :class:`RewardSpec`.

The rules are the contract's (``docs/contract.md``, "Accuracy, speed and cost"): four sections,
``weights`` with exactly ``accuracy``, ``speed`` and ``cost`` (each >= 0, not all 0,
scaled to sum to 1), positive references for speed (milliseconds) and cost (US dollars),
and an optional positive ``accuracy.reference`` that turns accuracy into an error.
"""

from __future__ import annotations

import difflib
import numbers
import reprlib
from collections.abc import Mapping
from typing import Any

import msgspec

from ._exceptions import RewardSpecError

__all__ = ["RewardSpec", "parse_spec"]

_SECTIONS = ("weights", "accuracy", "speed", "cost")
_WEIGHTS = ("accuracy", "speed", "cost")
_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "weights": _WEIGHTS,
    "accuracy": ("reference",),
    "speed": ("reference",),
    "cost": ("reference",),
}
_EXAMPLE = (
    '{"weights": {"accuracy": 0.7, "speed": 0.2, "cost": 0.1}, "accuracy": {}, '
    '"speed": {"reference": 2000}, "cost": {"reference": 0.01}}'
)

_repr = reprlib.Repr()
_repr.maxstring = 40
_repr.maxother = 40
_repr.maxdict = 4
_repr.maxlist = 4


class RewardSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A validated ``REWARD_SPEC``: weights scaled to sum to 1 and the references.

    Build it with :func:`parse_spec`, which enforces the rules; ``accuracy_reference`` is
    ``None`` when accuracy is a score from 0 to 1, and a positive error scale otherwise.
    """

    accuracy_weight: float
    speed_weight: float
    cost_weight: float
    speed_reference_ms: float
    cost_reference_usd: float
    accuracy_reference: float | None = None


def _key(key: Any) -> str:
    """One step of a key path, written the way the user writes it: ``["speed"]``."""
    if isinstance(key, str):
        return '["' + key.replace("\\", "\\\\").replace('"', '\\"') + '"]'
    return f"[{_repr.repr(key)}]"


def _got(value: Any) -> str:
    """The offending value for a message: ``0``, or ``a str ('2000')`` for non-numbers."""
    text = _repr.repr(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return text
    return f"a {type(value).__name__} ({text})"


def _names(keys: tuple[str, ...]) -> str:
    quoted = [f'"{k}"' for k in keys]
    if len(quoted) == 1:
        return quoted[0]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _check_keys(section: Mapping[Any, Any], allowed: tuple[str, ...], path: str) -> None:
    """Refuse keys outside ``allowed``, suggesting the closest allowed key."""
    for key in section:
        if key in allowed:
            continue
        hint = ""
        if isinstance(key, str):
            close = difflib.get_close_matches(key, allowed, n=1)
            if close:
                hint = f' (did you mean "{close[0]}"?)'
        raise RewardSpecError(
            path,
            f"has an unknown key {_key(key)[1:-1]}{hint}; "
            f"the keys it may hold are {_names(allowed)}",
        )


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is not a finite real number (or a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        as_float = float(value)
    except (TypeError, ValueError, OverflowError):  # e.g. an int beyond float range
        return None
    if as_float - as_float != 0.0:  # NaN or an infinity
        return None
    return as_float


def _positive(section: Mapping[Any, Any], path: str, what: str) -> float:
    """The section's ``reference``: a positive finite number of ``what``."""
    if "reference" not in section:
        raise RewardSpecError(
            path, f'has no "reference"; add "reference": <a positive number of {what}>'
        )
    value = section["reference"]
    number = _number(value)
    if number is None or number <= 0.0:
        raise RewardSpecError(
            path + '["reference"]', f"must be a positive number of {what}, got {_got(value)}"
        )
    return number


def _section(obj: Mapping[Any, Any], key: str, name: str) -> Mapping[Any, Any]:
    path = name + _key(key)
    section = obj[key]
    if not isinstance(section, Mapping):
        fix = "{}" if key == "accuracy" else "{...}"
        raise RewardSpecError(path, f"must be a dict, got {_got(section)}; write {fix}")
    _check_keys(section, _SECTION_KEYS[key], path)
    return section


def _normalised(
    accuracy: float, speed: float, cost: float, largest: float
) -> tuple[float, float, float]:
    """The weights scaled to sum to 1 (up to rounding); ``largest`` is their maximum, > 0."""
    # Divide by the largest first so that huge weights cannot overflow the sum.
    accuracy, speed, cost = accuracy / largest, speed / largest, cost / largest
    total = accuracy + speed + cost
    return accuracy / total, speed / total, cost / total


def _plain(value: Any) -> float | None:
    """A finite float of 0 or more from a plain int or float, else None (for the fast path)."""
    kind = type(value)
    if kind is float or (kind is int and -(2**53) <= value <= 2**53):
        as_float = float(value)
        if as_float - as_float == 0.0 and as_float >= 0.0:
            return as_float
    return None


def _parse_plain(obj: Any) -> RewardSpec | None:
    """The common case, a well-formed spec of plain dicts and numbers, checked quickly.

    ``reward()`` parses its spec on every call, so this path costs a fraction of the full
    one. It returns None at the first surprise; the full path then finds the problem and
    words the error (or accepts what this path does not handle, e.g. a Mapping or a NumPy
    number).
    """
    if type(obj) is not dict or len(obj) != 4:
        return None
    weights = obj.get("weights")
    accuracy = obj.get("accuracy")
    speed = obj.get("speed")
    cost = obj.get("cost")
    if (
        type(weights) is not dict
        or type(accuracy) is not dict
        or type(speed) is not dict
        or type(cost) is not dict
        or len(weights) != 3
        or len(speed) != 1
        or len(cost) != 1
    ):
        return None
    accuracy_w = _plain(weights.get("accuracy"))
    speed_w = _plain(weights.get("speed"))
    cost_w = _plain(weights.get("cost"))
    speed_ref = _plain(speed.get("reference"))
    cost_ref = _plain(cost.get("reference"))
    if accuracy_w is None or speed_w is None or cost_w is None or not speed_ref or not cost_ref:
        return None
    accuracy_ref = None
    if accuracy:
        accuracy_ref = _plain(accuracy.get("reference"))
        if len(accuracy) != 1 or not accuracy_ref:
            return None
    largest = max(accuracy_w, speed_w, cost_w)
    if largest == 0.0:
        return None
    accuracy_w, speed_w, cost_w = _normalised(accuracy_w, speed_w, cost_w, largest)
    return RewardSpec(
        accuracy_weight=accuracy_w,
        speed_weight=speed_w,
        cost_weight=cost_w,
        speed_reference_ms=speed_ref,
        cost_reference_usd=cost_ref,
        accuracy_reference=accuracy_ref,
    )


def parse_spec(obj: Any, name: str = "REWARD_SPEC") -> RewardSpec:
    """Validate ``obj`` (a ``REWARD_SPEC`` dict) and return it as a :class:`RewardSpec`.

    ``name`` is how error messages spell the spec. A :class:`RewardSpec` is returned as it
    is. Raises :class:`RewardSpecError` naming the key path and the fix.
    """
    if type(obj) is RewardSpec:
        return obj
    fast = _parse_plain(obj)
    if fast is not None:
        return fast
    if not isinstance(obj, Mapping):
        raise RewardSpecError(name, f"must be a dict like {_EXAMPLE}, got {_got(obj)}")
    _check_keys(obj, _SECTIONS, name)
    for key in _SECTIONS:
        if key not in obj:
            raise RewardSpecError(
                name,
                f'has no "{key}" section; add "{key}": '
                + {
                    "weights": '{"accuracy": ..., "speed": ..., "cost": ...}',
                    "accuracy": '{} (or {"reference": ...} when accuracy is an error)',
                    "speed": '{"reference": <milliseconds>}',
                    "cost": '{"reference": <US dollars>}',
                }[key],
            )

    weights = _section(obj, "weights", name)
    raw: list[float] = []
    for key in _WEIGHTS:
        path = name + '["weights"]' + _key(key)
        if key not in weights:
            raise RewardSpecError(
                name + '["weights"]',
                f'has no "{key}" weight; give each of "accuracy", "speed" and "cost" a '
                "weight of 0 or more",
            )
        value = weights[key]
        number = _number(value)
        if number is None or number < 0.0:
            raise RewardSpecError(path, f"must be a number of 0 or more, got {_got(value)}")
        raw.append(number)
    largest = max(raw)
    if largest == 0.0:
        raise RewardSpecError(
            name + '["weights"]', "are all 0; give at least one weight a value above 0"
        )
    accuracy_w, speed_w, cost_w = _normalised(raw[0], raw[1], raw[2], largest)

    accuracy = _section(obj, "accuracy", name)
    accuracy_reference = None
    if "reference" in accuracy:
        accuracy_reference = _positive(
            accuracy,
            name + '["accuracy"]',
            "error units (or remove it to score accuracy from 0 to 1)",
        )
    speed_reference = _positive(_section(obj, "speed", name), name + '["speed"]', "milliseconds")
    cost_reference = _positive(_section(obj, "cost", name), name + '["cost"]', "US dollars")
    return RewardSpec(
        accuracy_weight=accuracy_w,
        speed_weight=speed_w,
        cost_weight=cost_w,
        speed_reference_ms=speed_reference,
        cost_reference_usd=cost_reference,
        accuracy_reference=accuracy_reference,
    )
