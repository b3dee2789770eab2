"""The records that cross boundaries: observations, results, error details.

All are msgspec Structs, so they encode to JSON Lines and pickle across processes.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ErrorKind = Literal[
    "program_error",
    "program_timeout",
    "metric_error",
    "metric_timeout",
    "worker_crash",
    "invalid_return",
    "llm_error",
    "missing_output",
    "cancelled",
]
ERROR_KINDS: tuple[str, ...] = ErrorKind.__args__  # type: ignore[attr-defined]


class ErrorInfo(msgspec.Struct, frozen=True):
    """Why an example has no valid score: the kind (see ``ERROR_KINDS``) and a message."""

    kind: str
    message: str


class Observation(msgspec.Struct, frozen=True, kw_only=True):
    """What the engine measured while the program ran on one example.

    Frozen: a metric sees it read-only through ``skynet.observation()``. A figure that
    could not be measured is ``None`` and ``notes`` says why.
    """

    duration_ms: float | None = None
    queued_ms: float = 0.0
    cost_usd: float | None = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    llm_calls: int = 0
    retries: int = 0
    notes: tuple[str, ...] = ()

    @property
    def own_ms(self) -> float | None:
        """The program's own time: wall time minus the time spent queued on the engine."""
        if self.duration_ms is None:
            return None
        return max(0.0, self.duration_ms - self.queued_ms)


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Model usage of one stage (the judge's, for a metric), summed over its calls."""

    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = 0.0
    queued_ms: float = 0.0
    retries: int = 0
    rate_limited: int = 0
    notes: tuple[str, ...] = ()


class Scored(msgspec.Struct, frozen=True, gc=False):
    """A metric return value that passed the contract: score, named scores, feedback, extra."""

    score: float
    scores: dict[str, float]
    feedback: str
    extra: dict[str, Any] = {}


class Result(msgspec.Struct, kw_only=True):
    """The one result of one example, whatever happened to it."""

    example_id: Any
    score: float
    scores: dict[str, float] = {}
    feedback: str = ""
    error: ErrorInfo | None = None
    observation: Observation = Observation()
    judge: Usage = Usage()
    metric_ms: float | None = None
    output: Any = None
    extra: dict[str, Any] = {}

    @property
    def ok(self) -> bool:
        return self.error is None
