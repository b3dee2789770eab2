"""What to retry and how long to wait: status classification, server hints, backoff."""

from __future__ import annotations

import email.utils
import math
import random
import re
import time
from collections.abc import Mapping

import msgspec

__all__ = [
    "NEVER_RETRY",
    "RetryDetails",
    "backoff",
    "is_retryable_status",
    "parse_duration",
    "server_wait",
]

#: Statuses that a retry cannot fix: the request, the key or the model is wrong.
NEVER_RETRY = frozenset({400, 401, 403, 404, 422})
_RETRY = frozenset({408, 409, 429})

#: The longest server-suggested wait we honour as is; longer hints are clipped to this, so a
#: bogus "retry-after: 86400" cannot park a call for a day (the deadline still applies).
MAX_SERVER_WAIT_S = 120.0


class RetryDetails(msgspec.Struct, frozen=True, kw_only=True):
    """One retry about to happen, as handed to the ``on_retry`` hook."""

    model: str
    attempt: int  # the attempt that failed, 1-based
    status: int | None  # None: no response (connect error, timeout, dropped connection)
    reason: str
    wait_s: float  # how long until the next attempt may start
    shared_pause: bool  # True for a 429: every caller of this governor waits with it


def is_retryable_status(status: int) -> bool:
    """408, 409, 429 and every 5xx; never 400/401/403/404/422 or other 4xx."""
    return status in _RETRY or 500 <= status <= 599


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Seconds in an ``x-ratelimit-reset-*`` value: ``"1s"``, ``"6m0s"``, ``"20ms"``, ``"1.5"``."""
    text = text.strip().lower()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) and value >= 0 else None
    pos = 0
    total = 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            return None
        pos = match.end()
        number = float(match.group(1))
        unit = match.group(2)
        total += number * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
    return total if pos == len(text) and pos > 0 else None


def _get(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        value = headers.get(name.title())
    return value


def server_wait(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait the server asked for, in seconds, or None when it gave no usable hint.

    Tried in order: ``retry-after-ms``, ``retry-after`` (seconds or an HTTP date), then
    ``x-ratelimit-reset-requests`` / ``-tokens`` (the one whose ``remaining`` is 0, else the
    longer). Clipped to ``MAX_SERVER_WAIT_S``.
    """
    wait = _retry_after(headers, now)
    if wait is None:
        wait = _reset_hint(headers)
    if wait is None or not math.isfinite(wait):
        return None
    return min(max(wait, 0.0), MAX_SERVER_WAIT_S)


def _retry_after(headers: Mapping[str, str], now: float | None) -> float | None:
    """``retry-after-ms``, else ``retry-after`` (seconds or an HTTP date), in seconds."""
    raw = _get(headers, "retry-after-ms")
    if raw is not None:
        try:
            return float(raw) / 1000.0
        except ValueError:
            pass
    raw = _get(headers, "retry-after")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    return when.timestamp() - (time.time() if now is None else now)


def _reset_hint(headers: Mapping[str, str]) -> float | None:
    """``x-ratelimit-reset-*``: the exhausted limit's reset, else the longer one."""
    hints: list[float] = []
    exhausted: list[float] = []
    for kind in ("requests", "tokens"):
        raw = _get(headers, f"x-ratelimit-reset-{kind}")
        value = parse_duration(raw) if raw is not None else None
        if value is None:
            continue
        hints.append(value)
        if (_get(headers, f"x-ratelimit-remaining-{kind}") or "").strip() == "0":
            exhausted.append(value)
    if exhausted:
        return max(exhausted)
    return max(hints) if hints else None


def backoff(attempt: int, rng: random.Random, *, base: float = 0.25, cap: float = 20.0) -> float:
    """Exponential backoff with full jitter: uniform over [0, min(cap, base * 2**attempt)].

    Full jitter (rather than a fixed delay) spreads the retries of calls that failed
    together, which is what keeps a burst of 5xx from coming back as a synchronized burst.
    """
    return rng.uniform(0.0, min(cap, base * 2.0 ** max(0, attempt - 1)))
