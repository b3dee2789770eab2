"""The simulator's rate limits: a sliding window of accepted requests and their tokens.

A real provider enforces ``rpm``/``tpm`` over some window and answers 429 with
``retry-after`` and ``x-ratelimit-*`` headers; the client's governor must keep under such a
limit without seeing it. Here the limit is exact and strict, so that a benchmark can say
how close to it a client got: at most ``rpm * window_s / 60`` requests (and ``tpm * window_s
/ 60`` tokens) are accepted in any ``window_s`` seconds. Refused requests do not count.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["RateLimits", "Refusal", "Window", "reset_text"]


def reset_text(seconds: float) -> str:
    """A duration the way OpenAI writes ``x-ratelimit-reset-*``: "20ms", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s"


class Window:
    """Accepted requests (time, tokens) within the last ``window`` seconds."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.entries: deque[tuple[float, int]] = deque()
        self.tokens = 0

    def purge(self, now: float) -> None:
        edge = now - self.window
        entries = self.entries
        while entries and entries[0][0] <= edge:
            self.tokens -= entries.popleft()[1]

    def add(self, now: float, tokens: int) -> None:
        self.entries.append((now, tokens))
        self.tokens += tokens

    def wait_for_requests(self, now: float, limit: float) -> float:
        """Seconds until one more request fits under ``limit``."""
        excess = len(self.entries) + 1 - math.floor(limit)
        if excess <= 0:
            return 0.0
        return max(0.0, self.entries[excess - 1][0] + self.window - now)

    def wait_for_tokens(self, now: float, limit: float, need: int) -> float:
        """Seconds until ``need`` more tokens fit under ``limit``."""
        freed = 0
        over = self.tokens + need - limit
        for stamp, tokens in self.entries:
            freed += tokens
            if freed >= over:
                return max(0.0, stamp + self.window - now)
        return self.window


class Refusal:
    """Why a request was refused: the 429's message, and the wait (None: never fits)."""

    __slots__ = ("message", "wait")

    def __init__(self, message: str, wait: float | None) -> None:
        self.message = message
        self.wait = wait


class RateLimits:
    """``rpm``/``tpm`` (None: unlimited) over a sliding window of ``window_s`` seconds."""

    def __init__(self, rpm: float | None, tpm: float | None, window_s: float) -> None:
        self.enabled = rpm is not None or tpm is not None
        self._rpm = rpm
        self._tpm = tpm
        self._window = Window(window_s)
        # Per window, computed as the limits were always computed (a float rounding away
        # from rpm * window_s / 60 would move the floor by one request).
        self._requests = None if rpm is None else rpm * window_s / 60.0
        self._tokens = None if tpm is None else tpm * window_s / 60.0

    def admit(self, now: float, tokens: int) -> Refusal | None:
        """Accept a request of ``tokens`` now (None), or say why not."""
        window = self._window
        window.purge(now)
        if not self.enabled:
            return None
        wait = 0.0
        what = ""
        if self._requests is not None:
            limit = self._requests
            wait = window.wait_for_requests(now, limit)
            what = (
                f"requests per window (RPM): Limit {math.floor(limit)}, Used {len(window.entries)}"
            )
        if self._tokens is not None and not wait:
            limit = self._tokens
            if tokens > limit:
                return Refusal(
                    f"Request too large: Limit {math.floor(limit)}, Requested {tokens}.", None
                )
            if window.tokens + tokens > limit:
                wait = window.wait_for_tokens(now, limit, tokens)
                what = (
                    f"tokens per window (TPM): Limit {math.floor(limit)}, "
                    f"Used {window.tokens}, Requested {tokens}"
                )
        if wait > 0:
            return Refusal(
                f"Rate limit reached for {what}. Please try again in {reset_text(wait)}.", wait
            )
        window.add(now, tokens)
        return None

    def headers(self, now: float) -> str:
        """The ``x-ratelimit-*`` header lines (each ending in CRLF) for the current window.

        As OpenAI writes them: ``limit`` is the rate per minute (what a client paces to);
        ``remaining`` what is left in the current window, ``reset`` when one more fits.
        """
        window = self._window
        lines = ""
        if self._requests is not None:
            limit = self._requests
            assert self._rpm is not None
            lines += (
                f"x-ratelimit-limit-requests: {math.floor(self._rpm)}\r\n"
                f"x-ratelimit-remaining-requests: "
                f"{max(0, math.floor(limit) - len(window.entries))}\r\n"
                f"x-ratelimit-reset-requests: "
                f"{reset_text(window.wait_for_requests(now, limit))}\r\n"
            )
        if self._tokens is not None:
            limit = self._tokens
            assert self._tpm is not None
            lines += (
                f"x-ratelimit-limit-tokens: {math.floor(self._tpm)}\r\n"
                f"x-ratelimit-remaining-tokens: {max(0, math.floor(limit - window.tokens))}\r\n"
                f"x-ratelimit-reset-tokens: {reset_text(window.wait_for_tokens(now, limit, 1))}\r\n"
            )
        return lines

    def retry_headers(self, now: float, wait: float) -> str:
        """The header lines of a 429: the window's state and when to come back."""
        return (
            f"{self.headers(now)}"
            f"retry-after-ms: {max(1, math.ceil(wait * 1000))}\r\n"
            f"retry-after: {max(1, math.ceil(wait))}\r\n"
        )
