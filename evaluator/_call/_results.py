"""The records that cross boundaries: observations, results, error details.

All are msgspec Structs, so they encode to JSON Lines and pickle across processes.

``Result`` and its usage parts encode without the fields that hold their defaults
(``omit_defaults``: a field is left out only when it *is* the default object, so
nothing is lost, ``-0.0`` included); decoding fills them back, so a line reads back equal
to the result written, and a line with every field (a file from before) reads the same.
A score-only result line is a third of what it was, and three times faster to encode.

The per-example structs are ``gc=False``: a run holds hundreds of thousands of them, and
the cyclic garbage collector rescanning them all cost more than scoring an exact-match
metric. That is safe because none of them can be part of a reference cycle: their fields
hold numbers, strings, JSON-like dicts and the user's values (ids, outputs, extra info),
all built before the struct that holds them, so none can point back to it. (An object
that is not tracked is only ever treated as reachable, never freed early; code that
stores a mutable ``Result`` inside its own ``output`` would make a cycle that is never
collected: a leak, never a crash.)
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec.structs import astuple

from llm_client import TokenUsage


def example_key(example_id: Any) -> Any:
    """The one identity of an example id: a hashable key, equal for the same id and
    different for ids JSON tells apart (``1`` is not ``"1"``, nor ``True``, nor ``1.0``).

    The dataset's duplicate check, ``--resume``'s reading of a results file and the
    report's join of results to examples all match ids by it.
    """
    if isinstance(example_id, str):
        return example_id
    if isinstance(example_id, int) and not isinstance(example_id, bool):
        return (int, example_id)
    try:
        return ("json", msgspec.json.encode(example_id))
    except (TypeError, ValueError, UnicodeEncodeError):
        return ("repr", repr(example_id))


def repeat_of(result: Result) -> int:
    """The pass of a repeated run that made ``result``: 0 for the first (and only) one."""
    repeat = result.repeat
    return 0 if repeat is msgspec.UNSET else repeat


def result_key(result: Result) -> tuple[Any, int]:
    """A result's identity in a results file: its example's :func:`example_key` and the
    pass that made it (:func:`repeat_of`). A run without repeats has one per example."""
    return example_key(result.example_id), repeat_of(result)


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
    "budget_exhausted",
]
ERROR_KINDS: tuple[str, ...] = ErrorKind.__args__  # type: ignore[attr-defined]


class ErrorInfo(msgspec.Struct, frozen=True, gc=False):
    """Why an example has no valid score: the kind (see ``ERROR_KINDS``) and a message.

    Built only by :mod:`evaluator._call._failures`, the one place that words each kind.
    """

    kind: ErrorKind
    message: str


class Observation(TokenUsage, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """What the engine measured while the program ran on one example: the program's
    model tokens (a :class:`~llm_client.TokenUsage`, the same field names in the
    results file) and its time, cost and calls.

    Frozen: a metric sees it read-only through ``skynet.observation()``. A figure that
    could not be measured is ``None`` and ``notes`` says why.
    """

    duration_ms: float | None = None
    queued_ms: float = 0.0
    cost_usd: float | None = 0.0
    llm_calls: int = 0
    retries: int = 0
    rate_limited: int = 0
    notes: tuple[str, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its field values: msgspec's default for a kw_only struct goes
        # through a dict of names, several times slower both ways, and an observation
        # crosses to a worker process with every batch of calls.
        return (_rebuild_observation, astuple(self))

    @property
    def own_ms(self) -> float | None:
        """The program's own time: wall time minus the time spent queued on the engine."""
        if self.duration_ms is None:
            return None
        return max(0.0, self.duration_ms - self.queued_ms)


def _rebuild_observation(*values: Any) -> Observation:
    return Observation(**dict(zip(Observation.__struct_fields__, values, strict=True)))


class Usage(TokenUsage, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """Model usage of one stage (the judge's, for a metric), summed over its calls: its
    tokens (a :class:`~llm_client.TokenUsage`) and calls, cost and time."""

    llm_calls: int = 0
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


class Result(msgspec.Struct, gc=False, omit_defaults=True):
    """The one result of one example, whatever happened to it.

    Build it with keywords. (It is not ``kw_only`` only because the engine's hot loop
    builds it positionally, in field order, which is twice as fast.)
    """

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
    cached: bool = False
    """Taken from the result cache: the result of an earlier run of the same example,
    artifact, metric, program and models (its observation and judge usage are that
    run's: nothing was spent for it now)."""
    repeat: int | msgspec.UnsetType = msgspec.UNSET
    """Which pass of ``skynet-eval run --repeat K`` made it (1 to K-1; the first pass, and
    every run without repeats, leave it unset, so it is not written). Read it with
    :func:`repeat_of`."""

    @property
    def ok(self) -> bool:
        return self.error is None
