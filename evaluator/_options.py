"""Validation of the engine's options, shared by the API and every CLI command."""

from __future__ import annotations

import math
from typing import Any

from ._exceptions import ConfigError

__all__ = ["MAX_TIMEOUT", "validate_count", "validate_timeout"]

MAX_TIMEOUT = 600.0


def validate_timeout(
    value: Any, name: str = "timeout", *, upper: float | None = MAX_TIMEOUT
) -> float:
    """Seconds, positive and at most ``upper`` (None: any finite number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"must be a number of seconds, got {value!r}", option=name, value=value)
    if upper is not None and not 0 < value <= upper:
        raise ConfigError(
            f"must be between 0 and {upper:g} seconds, got {value:g}", option=name, value=value
        )
    if upper is None and not (0 < value < math.inf):
        raise ConfigError(
            f"must be a positive number of seconds, got {value:g}", option=name, value=value
        )
    return float(value)


def validate_count(value: Any, name: str) -> int | None:
    """A positive integer, or None for the default."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"must be a positive integer or None, got {value!r}", option=name, value=value
        )
    return value
