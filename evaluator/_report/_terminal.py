"""The report in a terminal, as rows of a table: ``run``'s (:func:`report_rows`, of a
:class:`Report`), ``skynet-eval report``'s (:func:`summary_rows`, of the same Report's
page view) and the comparison with a baseline's, and the failures'.

Rows are (label, value) pairs, built apart from their printing, so a test can read them
and ``--json`` can skip them; ``evaluator._cli._output`` prints them. The page's
formatting helpers load only for ``report``'s rows (``run`` never imports the page).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._summary import (
    CacheSummary,
    ClusterSummary,
    Distribution,
    Failure,
    RepeatSummary,
    Report,
)

if TYPE_CHECKING:
    from ._stats import RunSummary
    from .html._compare import Comparison

__all__ = ["comparison_rows", "failure_rows", "repeat_rows", "report_rows", "summary_rows"]


def _percentiles(d: Distribution) -> str:
    from .html._html import ms_

    return f"{ms_(d.p50)} / {ms_(d.p95)} / {ms_(d.p99)}"


def summary_rows(s: RunSummary) -> list[tuple[str, str]]:
    """One run's summary as (label, value) rows."""
    from .html._html import n_, score_

    rows = [("examples", n_(s.n)), ("ok", n_(s.ok))]
    rows += [(f"error: {kind}", f"{n_(count)} of {n_(s.n)}") for kind, count in s.errors.items()]
    at = " or ".join(f"{v:g}" for v in s.failure_scores[:3])
    rows.append(
        (f"mean score (all, errors at {at})" if at else "mean score (all)", score_(s.mean_score))
    )
    rows.append((f"mean score (ok, n={n_(s.ok)})", score_(s.mean_score_ok)))
    rows += [(f"  {m.name} (n={n_(m.count)})", score_(m.mean)) for m in s.named]
    if s.repeats is not None:
        rows += repeat_rows(s.repeats)
    if s.program_ms.count:
        rows.append(("program latency p50 / p95 / p99", _percentiles(s.program_ms)))
    if s.metric_ms.count:
        rows.append(("metric latency p50 / p95 / p99", _percentiles(s.metric_ms)))
    if s.program_ran:
        rows.append(
            ("program cost", _cost(s.program_cost_usd, s.program_cost_unmeasured, s.program_ran))
        )
    if s.judge_calls or s.judge_cost_unmeasured:
        rows.append(("judge cost", _cost(s.judge_cost_usd, s.judge_cost_unmeasured, s.n)))
    if s.wall_s is not None:
        rows.append(("wall time", f"{s.wall_s:,.2f} s"))
    if s.throughput is not None:
        rows.append(("throughput", f"{s.throughput:,.1f} examples/s"))
    if s.program_calls or s.judge_calls:
        rows.append(("model calls", f"{n_(s.program_calls)} program, {n_(s.judge_calls)} judge"))
        rows.append(("tokens in / out", f"{n_(s.input_tokens)} / {n_(s.output_tokens)}"))
        rows.append(("429s / retries", f"{n_(s.rate_limited)} / {n_(s.retries)}"))
    return rows


def _cost(value: float | None, unmeasured: int, of: int) -> str:
    from .html._html import n_, usd_

    if value is None:
        return f"unmeasured ({n_(unmeasured)} of {n_(of)} examples without a known price)"
    return usd_(value)


def comparison_rows(c: Comparison) -> list[tuple[str, str]]:
    """The comparison with a baseline as (label, value) rows."""
    from .html._html import delta_, n_, score_

    rows = [("examples in both runs", n_(c.matched))]
    d = c.difference
    if d is not None:
        level = f"{round(d.confidence * 100):g}%"
        rows.append(
            (
                f"mean difference [{level} CI]",
                f"{delta_(d.mean)} [{delta_(d.low)}, {delta_(d.high)}]",
            )
        )
        rows.append(
            ("mean, this run / baseline", f"{score_(c.mean_current)} / {score_(c.mean_baseline)}")
        )
    rows.append(("worse / better / same", f"{n_(c.worse)} / {n_(c.better)} / {n_(c.same)}"))
    rows.append(("newly failing / fixed", f"{n_(c.newly_failing)} / {n_(c.fixed)}"))
    rows.append(("missing here (baseline only)", n_(c.only_baseline)))
    rows.append(("new here (this run only)", n_(c.only_current)))
    # The row above names the interval; the verdict row says only what it means.
    rows.append(("verdict", c.verdict.replace(" of the mean difference", "")))
    return rows


def failure_rows(
    failures: Iterable[Failure], *, width: int | None = None
) -> list[tuple[str, str, str]]:
    """Failures as (id, kind, message) rows; ``width`` puts each message on one line of
    at most that many characters (the terminal summary); None keeps it whole."""
    rows: list[tuple[str, str, str]] = []
    for f in failures:
        message = f.message.strip()
        if width is not None:
            message = " ".join(message.split())
            if len(message) > width:
                message = message[: width - 1] + "…"
        ident = f.example_id if isinstance(f.example_id, str) else repr(f.example_id)
        rows.append((ident, f.kind, message))
    return rows


Rows = list[tuple[str, str]]

#: How a stage is named in the report's rows.
_STAGE_NAMES = {"run": "program", "score": "metric"}


def report_rows(report: Report, *, option_flags: dict[str, str] | None = None) -> Rows:
    """The report as (label, value) rows for a table or plain text.

    ``option_flags`` maps an option's API name to the name its reader knows it by (the
    command line's ``--execution``), for the executor lines.
    """
    return [
        *_count_rows(report),
        *_latency_rows(report),
        *_cost_rows(report),
        *_cache_rows(report.cache),
        *_engine_rows(report, option_flags or {}),
    ]


def _count_rows(report: Report) -> Rows:
    def mean(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    resumed = f" ({report.resumed:,} from an earlier run)" if report.resumed else ""
    rows: Rows = [("examples", f"{report.n:,}{resumed}"), ("ok", f"{report.ok:,}")]
    for kind, count in report.errors.items():
        rows.append((f"error: {kind}", f"{count:,} of {report.n:,}"))
    rows.append((f"mean score (all, errors at {report.failure_score:g})", mean(report.mean_score)))
    rows.append((f"mean score (ok, n={report.ok:,})", mean(report.mean_score_ok)))
    for name, named in report.scores.items():
        rows.append((f"  {name} (n={named.count:,})", f"{named.mean:.4f}"))
    if report.repeats is not None:
        rows.extend(repeat_rows(report.repeats))
    return rows


def repeat_rows(summary: RepeatSummary) -> Rows:
    """The rows of ``run --repeat``'s variance figures (``run``'s and ``report``'s)."""
    left = f", {summary.incomplete:,} with fewer left out" if summary.incomplete else ""
    rows: Rows = [
        ("repeats", f"{summary.repeats} per example ({summary.examples:,} with all{left})")
    ]
    if summary.mean_std is None or summary.changed is None or summary.mean is None:
        return [*rows, ("score variance", "- (no example has a result from every repeat)")]
    rows.append(("score std dev per example (mean)", f"{summary.mean_std:.4f}"))
    rows.append(("examples whose score changed", f"{summary.changed:.1%}"))
    ci = summary.mean_ci
    interval = f" (95% CI {ci[0]:.4f} to {ci[1]:.4f} over examples)" if ci else ""
    rows.append(("mean score over repeats", f"{summary.mean:.4f}{interval}"))
    return rows


def _latency_rows(report: Report) -> Rows:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f} ms" if value >= 1 else f"{value:.3f} ms"

    rows: Rows = []
    for label, lat in (("program", report.program_latency), ("metric", report.metric_latency)):
        if lat.count:
            rows.append(
                (
                    f"{label} latency p50 / p95 / p99",
                    f"{ms(lat.p50_ms)} / {ms(lat.p95_ms)} / {ms(lat.p99_ms)}",
                )
            )
    rows.append(("wall time", f"{report.wall_s:,.2f} s"))
    if report.throughput is not None:
        rows.append(("throughput", f"{report.throughput:,.1f} examples/s"))
    return rows


def _cost_rows(report: Report) -> Rows:
    def usd(value: float | None, unmeasured: int) -> str:
        if value is None:
            return (
                f"unmeasured ({unmeasured} example(s) without a known price or with "
                "network traffic the engine did not meter; their notes say which)"
            )
        return f"${value:.6f}"

    cache = report.cache

    def headline(represented: str, now: float | None) -> str:
        # With results from the cache, the sums are what the results cost when they were
        # made: the headline is what was spent now, and that sum stands beside it.
        if cache is None or not cache.cached:
            return represented
        spent = "unmeasured" if now is None else f"${now:.6f}"
        return f"{spent} spent now (the results represent {represented})"

    rows: Rows = []
    if report.program_cost_measured or report.program_cost_unmeasured:
        represented = usd(report.program_cost_usd, report.program_cost_unmeasured)
        now = None if cache is None else cache.program_cost_spent_usd
        rows.append(("program cost", headline(represented, now)))
    if report.judge_llm_calls or report.judge_cost_unmeasured:
        represented = usd(report.judge_cost_usd, report.judge_cost_unmeasured)
        now = None if cache is None else cache.judge_cost_spent_usd
        rows.append(("judge cost", headline(represented, now)))
    if report.program_llm_calls or report.judge_llm_calls:
        calls = f"{report.program_llm_calls:,} program, {report.judge_llm_calls:,} judge"
        rows.append(("model calls", calls))
        rows.append(("tokens in / out", f"{report.input_tokens:,} / {report.output_tokens:,}"))
        rows.append(("429s / retries", f"{report.rate_limited:,} / {report.retries:,}"))
    if report.budget is not None:
        rows.append(("budget", report.budget.describe()))
    return rows


def _cache_rows(cache: CacheSummary | None) -> Rows:
    if cache is None:
        return []

    def usd(value: float | None) -> str:
        return "unmeasured" if value is None else f"${value:.6f}"

    tiers = ""
    if cache.memory_hits is not None and cache.disk_hits is not None:
        tiers = f" (memory {cache.memory_hits:,}, disk {cache.disk_hits:,}"
        if cache.shared:
            tiers += f", shared in flight {cache.shared:,}"
        tiers += ")"
    rows: Rows = [
        (
            "cache",
            f"{cache.cached:,} of {cache.requested:,} examples from the cache{tiers}, "
            f"{cache.executed:,} executed",
        ),
        (
            "cost now / represented",
            f"{usd(cache.cost_spent_usd)} spent / {usd(cache.cost_represented_usd)}; "
            f"saved {usd(cache.cost_saved_usd)}",
        ),
    ]
    if cache.measured_kept:
        rows.append(
            (
                "cached measurements",
                "the metric scores speed or cost: cached results keep the measurements "
                "they were scored with",
            )
        )
    return rows


def _engine_rows(report: Report, option_flags: dict[str, str]) -> Rows:
    rows: Rows = []
    for stage in report.executors:
        flag = None if stage.option is None else option_flags.get(stage.option)
        name = _STAGE_NAMES.get(stage.stage, stage.stage)
        rows.append((f"{name} executor", stage.describe(flag)))
    for budget in report.model_budgets:
        rows.append(
            (f"model budget: {budget.model} ({', '.join(budget.roles)})", budget.describe())
        )
    if report.abandoned_threads:
        rows.append(("abandoned threads", f"{report.abandoned_threads:,}"))
    if report.abandoned_tasks:
        rows.append(("abandoned async calls", f"{report.abandoned_tasks:,}"))
    if report.cluster is not None:
        rows += _cluster_rows(report.cluster)
    return rows


def _cluster_rows(cluster: ClusterSummary) -> list[tuple[str, str]]:
    lost = f" ({len(cluster.lost_nodes)} lost)" if cluster.lost_nodes else ""
    rows = [
        ("ray nodes", f"{cluster.nodes:,}{lost}"),
        ("ray actors", f"{cluster.actors:,} ({cluster.actors_lost:,} lost)"),
        ("ray batches / calls requeued", f"{cluster.batches:,} / {cluster.calls_requeued:,}"),
    ]
    rows += [(f"  {node}", f"{calls:,} calls") for node, calls in cluster.calls_by_node.items()]
    return rows
