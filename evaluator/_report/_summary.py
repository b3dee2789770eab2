"""The summary of an evaluation, built incrementally from its results.

:class:`ReportBuilder` takes one :class:`Result` at a time (or a batch) and keeps
counters and each example's latencies (an array of doubles, for exact percentiles by
:func:`evaluator._stats.percentiles`, the offline report's method too), so a streamed
run of any length needs no list of its results. :meth:`ReportBuilder.build`
returns a frozen :class:`Report` at any moment.

Denominators are explicit: ``n`` = ``ok`` + the sum of ``errors``; the mean over all
examples counts each error at the failure score, and the mean over the ok ones says how
many it covers, so an error never silently vanishes from a mean.

A report also says how the engine ran: which executor each stage used, how many calls
it ran at once and why (:class:`StageExecution`), and the rate budget in force for each
model and where it came from (:class:`ModelBudget`), because throughput is read against
them.
"""

from __future__ import annotations

import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec

from llm_client import HedgeStatistics, TokenUsage

from .._call._results import ERROR_KINDS, Observation, Result, Usage, result_key
from .._stats import percentiles

__all__ = [
    "FAILURES_KEPT",
    "BudgetSummary",
    "CacheSummary",
    "ClusterSummary",
    "Detail",
    "Distribution",
    "ErrorGroup",
    "ErrorMessage",
    "Failure",
    "Latency",
    "ModelBudget",
    "NamedScore",
    "RepeatSummary",
    "Report",
    "ReportBuilder",
    "StageExecution",
    "budget_summary",
    "combine_clusters",
    "distribution",
    "error_groups",
    "repeat_summary",
    "result_cost",
    "stage_costs",
]

#: How many failures a report keeps to show (the first ones, in the order they came).
FAILURES_KEPT = 5


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    """Latency percentiles in milliseconds (None when nothing was measured)."""

    count: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


class NamedScore(msgspec.Struct, frozen=True):
    """The mean of one named score over the ok examples that returned it."""

    mean: float
    count: int


class StageExecution(msgspec.Struct, frozen=True, kw_only=True):
    """Where one stage's calls ran, how many at once, and why there."""

    stage: str
    """ "run" (the program) or "score" (the metric)."""
    kind: str
    """The executor: "async", "thread", "inline" or "process"."""
    parallelism: int
    """Calls it ran at once, as the executor itself says."""
    source: str
    """What chose it: "automatic", "EXECUTION" (the user's file) or "option"."""
    reason: str
    """Why, in words: "calls openai (model-bound)", "plain sync function (calls no model)"."""
    option: str | None = None
    """The option that chose it (its API name), when ``source`` is "option"."""

    def describe(self, option_flag: str | None = None) -> str:
        """``"thread x64: calls openai (model-bound)"``; ``option_flag`` names the option
        as the caller knows it (``--execution`` on the command line)."""
        reason = self.reason
        if self.source == "option" and option_flag is not None:
            reason = f"option {option_flag}"
        return f"{self.kind} x{self.parallelism}: {reason}"


class ModelBudget(msgspec.Struct, frozen=True, kw_only=True):
    """The rate budget in force for one model, and where it came from."""

    model: str
    roles: tuple[str, ...]
    """What the model served: "program", "judge" (one model may serve both)."""
    max_concurrency: int
    """The cap on requests in flight (the model's ``max_concurrency``)."""
    rpm: float | None
    tpm: float | None
    source: str
    """ "configured", "learned from headers", "adaptive (429s)" or "none" (no rpm/tpm)."""
    in_flight_start: int | None = None
    """The in-flight limit the model started with (None: not known)."""
    in_flight_limit: int | None = None
    """The in-flight limit at the end: the budget's rate times the measured latency, or
    what adaptive growth and back-off reached (``in_flight_source`` says which)."""
    in_flight_min: int | None = None
    in_flight_max: int | None = None
    in_flight_source: str | None = None
    """ "start", "rate x latency", "adaptive (latency)" or "adaptive (429s)"."""
    in_flight_history: tuple[tuple[float, int], ...] = ()
    """(seconds since the model's client opened, limit) at its changes, thinned to a few."""
    hedging: HedgeStatistics | None = None
    """Hedged calls (the model's ``hedge``): copies sent and won, the extra calls and spend."""

    def describe(self) -> str:
        """``"64 → 124 in flight (lowest 64, highest 124, cap 1024: rate x latency),
        3000 rpm, no tpm limit (learned from headers)"``."""
        if self.rpm is None and self.tpm is None:
            limits = "no rpm/tpm limit"
        else:
            rpm = "no rpm limit" if self.rpm is None else f"{self.rpm:g} rpm"
            tpm = "no tpm limit" if self.tpm is None else f"{self.tpm:g} tpm"
            limits = f"{rpm}, {tpm}"
        hedged = "" if self.hedging is None else f"; {self.hedging.describe()}"
        return f"{self.describe_in_flight()}, {limits} ({self.source}){hedged}"

    def describe_in_flight(self) -> str:
        """How the in-flight limit moved: ``"64 → 124 in flight (lowest 64, highest 124,
        cap 1024: rate x latency)"``, or ``"64 in flight (cap 1024)"`` when it stayed."""
        start, end = self.in_flight_start, self.in_flight_limit
        cap = self.max_concurrency
        if start is None or end is None:
            return f"{cap} in flight"
        low = self.in_flight_min if self.in_flight_min is not None else min(start, end)
        high = self.in_flight_max if self.in_flight_max is not None else max(start, end)
        if low == high:
            return f"{end} in flight (cap {cap})"
        why = f": {self.in_flight_source}" if self.in_flight_source else ""
        return f"{start} → {end} in flight (lowest {low}, highest {high}, cap {cap}{why})"


class BudgetSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A spending budget against what was spent under it (``llm_client/_spend.py``).

    ``usd``/``calls``/``seconds`` are the limits (None: none); ``spent_usd`` is at most
    ``usd``, and counts ``unmeasured_calls`` (attempts whose cost was not known: no
    reply or no usage) at their reserved worst case. ``refused``: model calls not sent
    because they did not fit; ``exhausted``: why it ran out (None: it did not).
    """

    usd: float | None
    calls: int | None
    seconds: float | None
    spent_usd: float
    calls_made: int
    elapsed_s: float
    unmeasured_calls: int = 0
    refused: int = 0
    exhausted: str | None = None

    def describe(self) -> str:
        from llm_client._spend import spent_words

        parts = [
            spent_words(
                self.usd,
                self.spent_usd,
                self.calls,
                self.calls_made,
                self.seconds,
                self.elapsed_s,
            )
            + " spent"
        ]
        if self.unmeasured_calls:
            parts.append(
                f"{self.unmeasured_calls:,} call(s) of unknown cost counted at their worst case"
            )
        if self.exhausted is not None:
            parts.append(f"ran out: {self.refused:,} call(s) not sent")
        return "; ".join(parts)


def budget_summary(spend: Any) -> BudgetSummary:
    """The summary of a spending ledger (an ``llm_client.Spend``)."""
    spend.stop_reason()  # a time limit passed is exhausted now, not at the next call
    return BudgetSummary(
        usd=spend.usd,
        calls=spend.calls,
        seconds=spend.seconds,
        spent_usd=spend.spent_usd,
        calls_made=spend.calls_made,
        elapsed_s=spend.elapsed(),
        unmeasured_calls=spend.unmeasured_calls,
        refused=spend.refused,
        exhausted=spend.exhausted,
    )


class ClusterSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Where a run on a Ray cluster ran (``execution="ray"``), counted by its executors."""

    nodes: int
    """Nodes whose actors ran calls."""
    actors: int
    """Node actors started (one per node and stage, and each replacement)."""
    actors_lost: int
    """Actors that died or failed; their unfinished calls were requeued."""
    lost_nodes: list[str]
    """Nodes that left the cluster during the run."""
    batches: int
    calls_requeued: int
    calls_by_node: dict[str, int]


def combine_clusters(*summaries: ClusterSummary | None) -> ClusterSummary | None:
    """One summary for the stages that ran on Ray (None: none did)."""
    present = [s for s in summaries if s is not None]
    if not present:
        return None
    by_node: dict[str, int] = {}
    for summary in present:
        for node, calls in summary.calls_by_node.items():
            by_node[node] = by_node.get(node, 0) + calls
    return ClusterSummary(
        nodes=sum(1 for calls in by_node.values() if calls),
        actors=sum(s.actors for s in present),
        actors_lost=sum(s.actors_lost for s in present),
        lost_nodes=sorted({node for s in present for node in s.lost_nodes}),
        batches=sum(s.batches for s in present),
        calls_requeued=sum(s.calls_requeued for s in present),
        calls_by_node=dict(sorted(by_node.items())),
    )


class CacheSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What the result cache saved in one evaluation.

    ``requested`` examples were asked for (resumed ones aside); ``executed`` of them ran
    now and ``cached`` came from the cache. Costs are the program's and the judge's
    together: ``cost_spent_usd`` is what the executed examples cost now,
    ``cost_represented_usd`` what all the results cost when they were made, and
    ``cost_saved_usd`` the difference (what the cached results cost then). Each is None
    when some of its results' cost was not measured. ``measured_kept``: the metric's
    scores depend on measured speed or cost, and cached results keep the measurements
    they were scored with. The tier counts come from the Evaluator's cache, when known.
    """

    requested: int
    executed: int
    cached: int
    cost_spent_usd: float | None
    cost_represented_usd: float | None
    cost_saved_usd: float | None
    program_cost_spent_usd: float | None = None
    """The program's part of ``cost_spent_usd`` (None: some of it was not measured)."""
    judge_cost_spent_usd: float | None = None
    """The judge's part of ``cost_spent_usd`` (None: some of it was not measured)."""
    measured_kept: bool = False
    memory_hits: int | None = None
    disk_hits: int | None = None
    stored: int | None = None
    uncacheable: int | None = None
    disk: str | None = None
    damaged: int | None = None
    """Stored values that failed their check (cut short, changed, from another version):
    run again and replaced."""
    shared: int | None = None
    """Examples whose key another evaluation (or run on the same cache) was paying for at
    the same time: they waited for its result instead of paying again."""
    taken_over: int | None = None
    """Of those waits, the ones whose owner failed, was cancelled or crashed: run here."""


def stage_costs(result: Result) -> tuple[float | None, float | None]:
    """What ``result``'s program and judge cost (a program that did not run cost
    nothing); None for a part that was unmeasured."""
    obs = result.observation
    return (0.0 if obs.duration_ms is None else obs.cost_usd), result.judge.cost_usd


def result_cost(result: Result) -> float | None:
    """What ``result`` cost, program and judge; None when either part was unmeasured."""
    program, judge = stage_costs(result)
    return None if program is None or judge is None else program + judge


class _CacheTally:
    """The cache's part of a ReportBuilder: results from the cache, and what they cost."""

    __slots__ = (
        "cached",
        "executed",
        "judge_spent",
        "judge_unmeasured",
        "program_spent",
        "program_unmeasured",
        "saved",
        "saved_unmeasured",
        "spent",
        "spent_unmeasured",
    )

    def __init__(self) -> None:
        self.cached = self.executed = self.spent_unmeasured = self.saved_unmeasured = 0
        self.spent = self.saved = 0.0
        # What the executed examples cost now, per stage (the report's headline costs).
        self.program_spent = self.judge_spent = 0.0
        self.program_unmeasured = self.judge_unmeasured = 0

    def add(self, result: Result) -> None:
        program, judge = stage_costs(result)
        cost = None if program is None or judge is None else program + judge
        if result.cached:
            self.cached += 1
            if cost is None:
                self.saved_unmeasured += 1
            else:
                self.saved += cost
        else:
            self.executed += 1
            if cost is None:
                self.spent_unmeasured += 1
            else:
                self.spent += cost
            if program is None:
                self.program_unmeasured += 1
            else:
                self.program_spent += program
            if judge is None:
                self.judge_unmeasured += 1
            else:
                self.judge_spent += judge

    def summary(self, stats: Any) -> CacheSummary | None:
        if stats is None and not self.cached:
            return None
        spent = None if self.spent_unmeasured else self.spent
        saved = None if self.saved_unmeasured else self.saved
        return CacheSummary(
            requested=self.cached + self.executed,
            executed=self.executed,
            cached=self.cached,
            cost_spent_usd=spent,
            cost_represented_usd=None if spent is None or saved is None else spent + saved,
            cost_saved_usd=saved,
            program_cost_spent_usd=None if self.program_unmeasured else self.program_spent,
            judge_cost_spent_usd=None if self.judge_unmeasured else self.judge_spent,
            measured_kept=bool(getattr(stats, "measured", False)) and self.cached > 0,
            memory_hits=getattr(stats, "memory_hits", None),
            disk_hits=getattr(stats, "disk_hits", None),
            stored=getattr(stats, "stored", None),
            uncacheable=getattr(stats, "uncacheable", None),
            disk=getattr(stats, "disk", None),
            damaged=getattr(stats, "damaged", None),
            shared=getattr(stats, "shared", None),
            taken_over=getattr(stats, "taken_over", None),
        )


class Failure(msgspec.Struct, frozen=True):
    """One failed example as a report lists it: its id, the error's kind and message."""

    example_id: Any
    kind: str
    message: str

    @classmethod
    def of(cls, result: Result) -> Failure | None:
        """The failure of ``result``, or None when it scored."""
        error = result.error
        return None if error is None else cls(result.example_id, error.kind, error.message)


class RepeatSummary(msgspec.Struct, frozen=True, kw_only=True):
    """How far each example's score varies over the K passes of ``run --repeat K``.

    Measured on the ``examples`` that every pass scored (``incomplete``: those left out,
    with fewer than K results: a stopped run). A failed example counts at the failure
    score, as in the report's mean over all. ``mean_std``: the mean over examples of the
    sample standard deviation of an example's K scores
    (:func:`evaluator._judges._agreement.within_std`); ``changed``: the share of examples whose
    score was not the same in every pass; ``mean``: the mean over examples of each
    example's mean score, with ``mean_ci`` its 95% bootstrap interval over examples
    (:func:`evaluator._stats.bootstrap_mean_ci`, seed 0). None where no example was
    scored by every pass.
    """

    repeats: int
    examples: int
    incomplete: int = 0
    mean_std: float | None = None
    changed: float | None = None
    mean: float | None = None
    mean_ci: tuple[float, float] | None = None


def repeat_summary(scores: Iterable[dict[int, float]], repeats: int) -> RepeatSummary:
    """The :class:`RepeatSummary` of ``scores`` (one ``{pass: score}`` per example)."""
    from .._judges._agreement import stable_share, within_std
    from .._stats import bootstrap_mean_ci

    rows: list[list[float]] = []
    incomplete = 0
    for by_pass in scores:
        if len(by_pass) == repeats:
            rows.append([by_pass[r] for r in range(repeats)])
        else:
            incomplete += 1
    if not rows or repeats < 2:
        return RepeatSummary(repeats=repeats, examples=len(rows), incomplete=incomplete)
    means = [sum(row) / repeats for row in rows]
    return RepeatSummary(
        repeats=repeats,
        examples=len(rows),
        incomplete=incomplete,
        mean_std=within_std(rows),
        changed=1.0 - stable_share(rows),
        mean=sum(means) / len(means),
        mean_ci=bootstrap_mean_ci(means),
    )


class Distribution(msgspec.Struct, frozen=True, kw_only=True):
    """One measured quantity over the examples that have it; None where nothing was."""

    count: int = 0
    missing: int = 0
    total: float | None = None
    mean: float | None = None
    min: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


def distribution(values: Sequence[float | None], total: float | None = None) -> Distribution:
    """Count, total, mean, min, p50/p95/p99 and max of the values that are not None
    (``total``: their sum as the caller kept it, so that a report's cost and its
    distribution's total are one number)."""
    measured: Sequence[float] = [v for v in values if v is not None]
    missing = len(values) - len(measured)
    if not measured:
        return Distribution(missing=missing)
    p50, p95, p99 = percentiles(measured, [0.5, 0.95, 0.99])
    if total is None:
        total = sum(measured)
    return Distribution(
        count=len(measured),
        missing=missing,
        total=total,
        mean=total / len(measured),
        min=float(min(measured)),
        p50=p50,
        p95=p95,
        p99=p99,
        max=float(max(measured)),
    )


class ErrorMessage(msgspec.Struct, frozen=True):
    """One distinct error message (its first line) of a kind: how often, and where first."""

    message: str
    count: int
    rows: list[int]  # indices of the results in the order they were added, the first few


class ErrorGroup(msgspec.Struct, frozen=True):
    """The errors of one kind: their count, and their commonest messages."""

    kind: str
    count: int
    messages: list[ErrorMessage]
    other_messages: int  # distinct messages beyond those listed


class Detail(msgspec.Struct, frozen=True, kw_only=True):
    """What a report's page shows beyond the counts (``ReportBuilder(detail=True)``): each
    measured quantity's distribution, the errors grouped by message, why costs went
    unmeasured, and the scores errors were recorded with."""

    program_ms: Distribution
    program_own_ms: Distribution
    metric_ms: Distribution
    program_cost: Distribution
    """Per example, over the examples whose program ran and whose cost was measured."""
    judge_cost: Distribution
    error_groups: tuple[ErrorGroup, ...]
    cost_notes: tuple[tuple[str, int], ...]
    """Why costs were not measured, the commonest three, with counts."""
    failure_scores: tuple[float, ...]
    """The distinct scores errors were recorded with."""


_TOP_MESSAGES = 5
_FIRST_EXAMPLES = 5
_MESSAGE_CHARS = 240


def _first_line(message: str) -> str:
    line = message.strip().split("\n", 1)[0].strip()
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"


def error_groups(results: Iterable[Result]) -> list[ErrorGroup]:
    """Errors by kind (in the engine's order of kinds), each with its commonest messages
    and the first examples that gave each (what a detailed :class:`Report` holds)."""
    builder = ReportBuilder(detail=True)
    builder.add_many(results)
    return list(builder._detail.groups())  # type: ignore[union-attr]


class _DetailTally:
    """The detail part of a ReportBuilder: per-example costs, messages, notes."""

    __slots__ = ("by_kind", "failure_scores", "judge_cost", "notes", "program_cost")

    def __init__(self) -> None:
        self.program_cost = _Latencies()
        self.judge_cost = _Latencies()
        self.by_kind: dict[str, dict[str, list[int]]] = {}
        self.notes: Counter[str] = Counter()
        self.failure_scores: set[float] = set()

    def add_error(self, index: int, kind: str, message: str, score: float) -> None:
        self.failure_scores.add(score)
        rows = self.by_kind.setdefault(kind, {}).setdefault(_first_line(message), [])
        rows.append(index)

    def groups(self) -> tuple[ErrorGroup, ...]:
        kinds = [k for k in ERROR_KINDS if k in self.by_kind]
        kinds += sorted(k for k in self.by_kind if k not in ERROR_KINDS)
        out = []
        for kind in kinds:
            by_message = self.by_kind[kind]
            messages = sorted(by_message.items(), key=lambda item: (-len(item[1]), item[1][0]))
            out.append(
                ErrorGroup(
                    kind=kind,
                    count=sum(len(rows) for rows in by_message.values()),
                    messages=[
                        ErrorMessage(message, len(rows), rows[:_FIRST_EXAMPLES])
                        for message, rows in messages[:_TOP_MESSAGES]
                    ],
                    other_messages=max(0, len(messages) - _TOP_MESSAGES),
                )
            )
        return tuple(out)


class Report(TokenUsage, frozen=True, kw_only=True, gc=True):
    """Counts, means, latency, throughput and cost of one evaluation.

    Its token counts, the program's and the judge's together, are its
    :class:`~llm_client.TokenUsage` (``input_tokens``, ``output_tokens``, ``cached_tokens``,
    ``reasoning_tokens``: ``.tokens`` holds them alone), so ``--json`` has the same flat
    names as a result's observation and usage.
    """

    n: int
    ok: int
    errors: dict[str, int]
    failure_score: float
    mean_score: float | None
    mean_score_ok: float | None
    scores: dict[str, NamedScore]
    program_latency: Latency
    program_own_latency: Latency
    metric_latency: Latency
    wall_s: float
    throughput: float | None
    # None when any example's cost was unmeasured, or no program ran (score-only).
    program_cost_usd: float | None
    program_cost_measured: int
    program_cost_unmeasured: int
    judge_cost_usd: float | None
    judge_cost_unmeasured: int
    program_llm_calls: int
    judge_llm_calls: int
    rate_limited: int
    retries: int
    abandoned_threads: int = 0
    abandoned_tasks: int = 0
    """Async calls given up after ignoring their cancellation past the timeout."""
    resumed: int = 0
    executors: tuple[StageExecution, ...] = ()
    model_budgets: tuple[ModelBudget, ...] = ()
    cluster: ClusterSummary | None = None
    """The Ray cluster's part, for a run with a stage on ``execution="ray"``."""
    cache: CacheSummary | None = None
    """Requested vs executed examples and the cost the cache saved (None: no cache)."""
    failures: tuple[Failure, ...] = ()
    """The first failed examples (at most ``FAILURES_KEPT``), in the order they came."""
    budget: BudgetSummary | None = None
    """The spending budget against what was spent (None: no budget)."""
    repeats: RepeatSummary | None = None
    """Each example's score variance over the passes of ``run --repeat K`` (None: one
    pass)."""
    detail: Detail | None = None
    """Distributions, error groups and cost notes (``ReportBuilder(detail=True)``: the
    report of a results file, and a run that writes its page)."""

    @property
    def error_count(self) -> int:
        return self.n - self.ok


class _Latencies:
    """Every latency added, in ms: the percentiles are exact (:func:`_stats.percentiles`,
    the report's own method). An array of doubles: 8 bytes a value (800 KB per 100,000
    examples), where a list of floats would take 32."""

    __slots__ = ("total", "values")

    def __init__(self) -> None:
        self.values = array("d")
        self.total = 0.0

    def add(self, ms: float) -> None:
        self.values.append(ms)
        self.total += ms

    def distribution(self, missing: int = 0) -> Distribution:
        values = self.values
        if not values:
            return Distribution(missing=missing)
        d = distribution(values, self.total)
        return d if not missing else msgspec.structs.replace(d, missing=missing)

    def latency(self) -> Latency:
        d = self.distribution()
        return Latency(
            count=d.count, mean_ms=d.mean, p50_ms=d.p50, p95_ms=d.p95, p99_ms=d.p99, max_ms=d.max
        )


def _quiet_observation(obs: Observation) -> bool:
    """An observation :meth:`ReportBuilder.add` counts nothing of (a score-only result's)."""
    return obs.duration_ms is None and not (obs.llm_calls or obs.retries or obs.rate_limited)


def _quiet_usage(judge: Usage) -> bool:
    """A judge usage that adds no calls, retries or cost, measured as $0."""
    return judge.cost_usd == 0.0 and not (judge.llm_calls or judge.retries or judge.rate_limited)


class ReportBuilder:
    """Feed results with :meth:`add` (or :meth:`add_many`); :meth:`build` at any time."""

    def __init__(
        self, *, failure_score: float = 0.0, repeats: int = 1, detail: bool = False
    ) -> None:
        self.failure_score = failure_score
        #: ``detail``: keep what the page shows too (:class:`Detail`): each example's
        #: costs, the errors' messages, why costs went unmeasured.
        self._detail: _DetailTally | None = _DetailTally() if detail else None
        #: ``run --repeat K``: each example's score in each pass, keyed by its id's
        #: example_key (None with one pass: nothing per example is kept then).
        self.repeats = repeats
        self._by_example: dict[Any, dict[int, float]] | None = {} if repeats > 1 else None
        self.n = 0
        self.ok = 0
        self.errors: dict[str, int] = {}
        self._sum_all = 0.0
        self._sum_ok = 0.0
        self._named: dict[str, list[float]] = {}  # name -> [sum, count]
        self._program = _Latencies()
        self._own = _Latencies()
        self._metric = _Latencies()
        self.program_cost: float = 0.0
        self.program_cost_measured = 0
        self.program_cost_unmeasured = 0
        self.judge_cost: float = 0.0
        self.judge_cost_unmeasured = 0
        self.program_llm_calls = 0
        self.judge_llm_calls = 0
        # The program's and the judge's tokens, summed as the four counts of a TokenUsage
        # (the report's, made at build: not a struct made at every add).
        self._input = self._output = self._cached = self._reasoning = 0
        self.rate_limited = 0
        self.retries = 0
        self.resumed = 0
        self._started = 0.0
        self.restart_clock()
        self._first_new: float | None = None
        self._new = 0
        self._cache = _CacheTally()
        self._failures: list[Failure] = []

    def add(self, result: Result, *, resumed: bool = False, timed: bool = True) -> None:
        """Count one result. ``resumed``: it came from an earlier run (not in throughput);
        ``timed`` False: made before the clock started (the contract check's examples),
        so counted but not in throughput either."""
        if self._by_example is not None:
            self._note_repeat(result)
        index = self.n
        self.n += 1
        if resumed:
            self.resumed += 1
        else:
            self._new += timed
            self._cache.add(result)
        error = result.error
        if error is None:
            self.ok += 1
            score = result.score
            self._sum_all += score
            self._sum_ok += score
            if result.scores:
                self._add_named(result.scores)
        else:
            self._sum_all += result.score
            self.errors[error.kind] = self.errors.get(error.kind, 0) + 1
            if self._detail is not None:
                self._detail.add_error(index, error.kind, error.message, result.score)
            if len(self._failures) < FAILURES_KEPT:
                self._failures.append(Failure(result.example_id, error.kind, error.message))
        self._add_program(result.observation)
        if result.metric_ms is not None:
            self._metric.add(result.metric_ms)
        self._add_judge(result.judge)

    def _note_repeat(self, result: Result) -> None:
        key, repeat = result_key(result)
        assert self._by_example is not None
        self._by_example.setdefault(key, {})[repeat] = result.score

    def _add_named(self, scores: dict[str, float]) -> None:
        named = self._named
        for name, value in scores.items():
            entry = named.get(name)
            if entry is None:
                named[name] = [value, 1.0]
            else:
                entry[0] += value
                entry[1] += 1.0

    def _add_program(self, obs: Observation) -> None:
        if obs.duration_ms is not None:
            self._program.add(obs.duration_ms)
            self._own.add(max(0.0, obs.duration_ms - obs.queued_ms))
            if obs.cost_usd is None:
                self.program_cost_unmeasured += 1
                if self._detail is not None:
                    notes = [f"program: {n}" for n in obs.notes] or ["program: no reason recorded"]
                    self._detail.notes.update(notes)
            else:
                self.program_cost_measured += 1
                self.program_cost += obs.cost_usd
                if self._detail is not None:
                    self._detail.program_cost.add(obs.cost_usd)
        # Retries and 429s count even for a call that was given up (no llm_calls then).
        if obs.llm_calls:
            self.program_llm_calls += obs.llm_calls
            self._input += obs.input_tokens
            self._output += obs.output_tokens
            self._cached += obs.cached_tokens
            self._reasoning += obs.reasoning_tokens
        self.retries += obs.retries
        self.rate_limited += obs.rate_limited

    def _add_judge(self, judge: Usage) -> None:
        if judge.llm_calls:
            self.judge_llm_calls += judge.llm_calls
            self._input += judge.input_tokens
            self._output += judge.output_tokens
            self._cached += judge.cached_tokens
            self._reasoning += judge.reasoning_tokens
        self.retries += judge.retries
        self.rate_limited += judge.rate_limited
        if judge.cost_usd is None:
            self.judge_cost_unmeasured += 1
            if self._detail is not None:
                notes = [f"judge: {n}" for n in judge.notes] or ["judge: no reason recorded"]
                self._detail.notes.update(notes)
        else:
            self.judge_cost += judge.cost_usd
            if self._detail is not None:
                self._detail.judge_cost.add(judge.cost_usd)

    def add_many(
        self, results: Iterable[Result], *, resumed: bool = False, timed: bool = True
    ) -> None:
        """Count results as :meth:`add` does. The hot loop of a cheap metric: a result
        with a score and nothing else to count (no error, no named scores, not cached,
        an observation and a judge usage with no time, calls, retries or cost, mostly the
        one shared object each) is counted in place, the rest by :meth:`add`."""
        add = self.add
        if resumed or self._by_example is not None or self._detail is not None:
            for result in results:
                add(result, resumed=resumed, timed=timed)
            return
        metric_add = self._metric.add
        quiet_obs: Observation | None = None  # the last objects known to add nothing
        quiet_judge: Usage | None = None
        plain = 0
        sum_all, sum_ok = self._sum_all, self._sum_ok
        for result in results:
            obs, judge = result.observation, result.judge
            if (
                result.error is not None
                or result.cached
                or result.scores
                or (obs is not quiet_obs and not _quiet_observation(obs))
                or (judge is not quiet_judge and not _quiet_usage(judge))
            ):
                self._sum_all, self._sum_ok = sum_all, sum_ok
                add(result, timed=timed)
                sum_all, sum_ok = self._sum_all, self._sum_ok
                continue
            quiet_obs, quiet_judge = obs, judge
            plain += 1
            score = result.score
            sum_all += score  # in order, as add() sums: the same float either way
            sum_ok += score
            if result.metric_ms is not None:
                metric_add(result.metric_ms)
        self._sum_all, self._sum_ok = sum_all, sum_ok
        self.n += plain
        self.ok += plain
        self._new += plain if timed else 0
        self._cache.executed += plain

    # The clock is a default argument, bound when the engine is imported: user code in the
    # engine's process that patches time.perf_counter does not change a run's wall time.

    def restart_clock(self, clock: Callable[[], float] = time.perf_counter) -> None:
        """Measure wall time and throughput from now (after a contract check, say)."""
        self._started = clock()

    def build(
        self,
        *,
        abandoned_threads: int = 0,
        abandoned_tasks: int = 0,
        wall_s: float | None = None,
        executors: tuple[StageExecution, ...] = (),
        model_budgets: tuple[ModelBudget, ...] = (),
        cluster: ClusterSummary | None = None,
        cache: Any = None,
        budget: BudgetSummary | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> Report:
        """The report of what was added so far; ``executors`` and ``model_budgets`` say
        how the engine ran, ``cache`` the result cache's statistics
        (``Evaluator.build_report`` passes them)."""
        wall = clock() - self._started if wall_s is None else wall_s
        named = {
            name: NamedScore(total / count, int(count))
            for name, (total, count) in sorted(self._named.items())
        }
        errors = {kind: self.errors[kind] for kind in ERROR_KINDS if kind in self.errors}
        errors.update({k: v for k, v in self.errors.items() if k not in errors})
        return Report(
            n=self.n,
            ok=self.ok,
            errors=errors,
            failure_score=self.failure_score,
            mean_score=self._sum_all / self.n if self.n else None,
            mean_score_ok=self._sum_ok / self.ok if self.ok else None,
            scores=named,
            program_latency=self._program.latency(),
            program_own_latency=self._own.latency(),
            metric_latency=self._metric.latency(),
            wall_s=wall,
            throughput=self._new / wall if wall > 0 and self._new else None,
            program_cost_usd=(
                self.program_cost
                if self.program_cost_measured and not self.program_cost_unmeasured
                else None
            ),
            program_cost_measured=self.program_cost_measured,
            program_cost_unmeasured=self.program_cost_unmeasured,
            judge_cost_usd=None if self.judge_cost_unmeasured else self.judge_cost,
            judge_cost_unmeasured=self.judge_cost_unmeasured,
            program_llm_calls=self.program_llm_calls,
            judge_llm_calls=self.judge_llm_calls,
            input_tokens=self._input,
            output_tokens=self._output,
            cached_tokens=self._cached,
            reasoning_tokens=self._reasoning,
            rate_limited=self.rate_limited,
            retries=self.retries,
            abandoned_threads=abandoned_threads,
            abandoned_tasks=abandoned_tasks,
            resumed=self.resumed,
            executors=executors,
            model_budgets=model_budgets,
            cluster=cluster,
            cache=self._cache.summary(cache),
            failures=tuple(self._failures),
            budget=budget,
            repeats=(
                None
                if self._by_example is None
                else repeat_summary(self._by_example.values(), self.repeats)
            ),
            detail=self._build_detail(),
        )

    def _build_detail(self) -> Detail | None:
        tally = self._detail
        if tally is None:
            return None
        return Detail(
            program_ms=self._program.distribution(),
            program_own_ms=self._own.distribution(),
            metric_ms=self._metric.distribution(self.n - len(self._metric.values)),
            program_cost=tally.program_cost.distribution(self.program_cost_unmeasured),
            judge_cost=tally.judge_cost.distribution(self.judge_cost_unmeasured),
            error_groups=tally.groups(),
            cost_notes=tuple(tally.notes.most_common(3)),
            failure_scores=tuple(sorted(tally.failure_scores)),
        )
