"""Validation of the engine's options, shared by the API and every CLI command."""

from __future__ import annotations

import math
import re
from typing import Any

from ._exceptions import ConfigError

__all__ = ["MAX_TIMEOUT", "validate_count", "validate_ray_address", "validate_timeout"]

MAX_TIMEOUT = 600.0


def validate_timeout(
    value: Any, name: str = "timeout", *, upper: float | None = MAX_TIMEOUT
) -> float:
    """Seconds, positive and at most ``upper`` (None: any finite number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"must be a number of seconds, got {value!r}", option=name, value=value)
    if upper is not None and not 0 < value <= upper:
        raise ConfigError(
            f"must be greater than 0 and at most {upper:g} seconds, got {value:g}",
            option=name,
            value=value,
        )
    if upper is None and not (0 < value < math.inf):
        raise ConfigError(
            f"must be a number of seconds greater than 0, got {value:g}",
            option=name,
            value=value,
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


_RAY_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9._-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}")


def _valid_address(value: str) -> bool:
    return bool(_RAY_ADDRESS.fullmatch(value)) and 0 < int(value.rsplit(":", 1)[1]) < 65536


def validate_ray_address(value: Any, name: str = "ray_address") -> str | None:
    """A Ray cluster: ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` (None: a local
    instance started and stopped by the engine)."""
    if value is None:
        return None
    if isinstance(value, str) and (value == "auto" or _valid_address(value)):
        return value
    raise ConfigError(
        f"must be 'auto' (the cluster `ray start --head` started on this machine), "
        f"'HOST:PORT' (a cluster's address) or 'ray://HOST:PORT' (Ray Client), got {value!r}; "
        "leave it unset for a local instance",
        option=name,
        value=value,
    )
