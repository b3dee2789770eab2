"""The reward's components and their weighted sum.

Every lower-is-better quantity ``x`` (milliseconds, dollars, or an error with a reference)
with reference ``r`` becomes ``r / (r + x)``: 1 at zero, 0.5 at the reference, towards 0
as ``x`` grows, and monotone, so there is always a reason to be faster or cheaper.
"""

from __future__ import annotations

import numbers
from typing import Any

import msgspec

from ._spec import RewardSpec

__all__ = ["Components", "combine", "components", "lower_is_better"]


class Components(msgspec.Struct, frozen=True):
    """The three components of a reward, each in [0, 1]."""

    accuracy: float
    speed: float
    cost: float


def _real(value: Any, what: str) -> float:
    """``value`` as a float that is not NaN, or a ValueError naming ``what``."""
    kind = type(value)
    if kind is float or kind is int:
        number = float(value)
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{what} must be a number, got a {kind.__name__} ({value!r:.40}); "
            + ("pass 1.0 or 0.0" if isinstance(value, bool) else "pass an int or a float")
        )
    else:
        number = float(value)
    if number != number:
        raise ValueError(f"{what} must be a number, got NaN; pass a real value")
    return number


def lower_is_better(x: float, reference: float) -> float:
    """``reference / (reference + x)``: 1.0 at ``x == 0``, 0.5 at the reference, to 0.

    ``x`` must be 0 or more (an infinity gives 0.0) and ``reference`` positive and finite.
    """
    value = _real(x, "the measured value")
    ref = _real(reference, "the reference")
    if value < 0.0:
        raise ValueError(f"the measured value must be 0 or more, got {value!r}")
    if not 0.0 < ref < float("inf"):
        raise ValueError(f"the reference must be a positive finite number, got {ref!r}")
    # 1 / (1 + x/r) rather than r / (r + x): r + x overflows for huge finite inputs, and
    # x/r == 1.0 exactly at the reference, so the midpoint is exactly 0.5.
    return 1.0 / (1.0 + value / ref)


def components(
    spec: RewardSpec, accuracy: float, own_ms: float | None, cost_usd: float | None
) -> Components:
    """The accuracy, speed and cost components of a reward.

    Without ``spec.accuracy_reference`` the accuracy is a score that must lie in [0, 1]
    (outside is an error, never clamped); with it, accuracy is an error of 0 or more,
    mapped like time and cost. A time or cost of ``None`` (not measured) gives 0.0.
    """
    acc = _real(accuracy, "the accuracy")
    reference = spec.accuracy_reference
    if reference is None:
        if not 0.0 <= acc <= 1.0:
            raise ValueError(
                f"the accuracy must be a score from 0 to 1, got {acc!r}; return a score in "
                'that range, or set REWARD_SPEC["accuracy"]["reference"] to pass an error '
                "(lower is better) instead"
            )
        accuracy_c = acc
    else:
        if acc < 0.0:
            raise ValueError(
                f"the accuracy is an error (REWARD_SPEC has an accuracy reference), so it "
                f"must be 0 or more, got {acc!r}"
            )
        accuracy_c = lower_is_better(acc, reference)
    speed_c = 0.0 if own_ms is None else lower_is_better(own_ms, spec.speed_reference_ms)
    cost_c = 0.0 if cost_usd is None else lower_is_better(cost_usd, spec.cost_reference_usd)
    return Components(accuracy_c, speed_c, cost_c)


def combine(spec: RewardSpec, components: Components) -> float:
    """The weighted sum of the components, in [0, 1]."""
    total = (
        spec.accuracy_weight * components.accuracy
        + spec.speed_weight * components.speed
        + spec.cost_weight * components.cost
    )
    # The weights sum to 1 only up to rounding; keep the result inside [0, 1] regardless.
    return min(1.0, max(0.0, total))
