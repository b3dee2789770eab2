"""The report in a terminal, as rows of a table: a :class:`Report`'s, by one builder
(``_rows``) for ``run`` (:func:`report_rows`) and ``skynet-eval report``
(:func:`summary_rows`, of the report its page view holds, in the page's number format),
and the comparison with a baseline's, and the failures'.

Rows are (label, value) pairs, built apart from their printing, so a test can read them
and ``--json`` can skip them; ``evaluator._cli._output`` prints them. The page's
formatting helpers load only for ``report``'s rows (``run`` never imports the page).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from ._summary import (
    CacheSummary,
    ClusterSummary,
    Failure,
    RepeatSummary,
    Report,
)

if TYPE_CHECKING:
    from ._stats import RunSummary
    from .html._compare import Comparison

__all__ = ["comparison_rows", "failure_rows", "repeat_rows", "report_rows", "summary_rows"]

Rows = list[tuple[str, str]]


def summary_rows(s: RunSummary) -> Rows:
    """``skynet-eval report``'s rows: :func:`report_rows` of the summary's report, in the
    page's number format, with the wall time and throughput the file recorded (none when
    it did not) and the scores its errors were recorded with."""
    report = s.report
    failure_scores = tuple(s.failure_scores[:3])
    return _rows(
        report,
        _PAGE,
        at=" or ".join(f"{v:g}" for v in failure_scores),
        wall_s=s.wall_s,
        throughput=s.throughput,
        cache=None,  # what a run spent "now" is the run's to say, not its file's
        option_flags={},
    )


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


#: How a stage is named in the report's rows.
_STAGE_NAMES = {"run": "program", "score": "metric"}


def report_rows(report: Report, *, option_flags: dict[str, str] | None = None) -> Rows:
    """The report as (label, value) rows for a table or plain text: ``run``'s, and, in
    the page's number format, ``skynet-eval report``'s (:func:`summary_rows`).

    ``option_flags`` maps an option's API name to the name its reader knows it by (the
    command line's ``--execution``), for the executor lines.
    """
    return _rows(
        report,
        _RUN,
        at=f"{report.failure_score:g}",
        wall_s=report.wall_s,
        throughput=report.throughput,
        cache=report.cache,
        option_flags=option_flags or {},
    )


class _Format(NamedTuple):
    """How a table writes a number: ``run``'s fixed decimals, or the page's."""

    score: Callable[[float | None], str]
    ms: Callable[[float | None], str]
    usd: Callable[[float], str]


def _run_score(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _run_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms" if value >= 1 else f"{value:.3f} ms"


def _run_usd(value: float) -> str:
    return f"${value:.6f}"


def _page_score(value: float | None) -> str:
    from .html._html import score_

    return score_(value)


def _page_ms(value: float | None) -> str:
    from .html._html import ms_

    return ms_(value)


def _page_usd(value: float) -> str:
    from .html._html import usd_

    return usd_(value)


_RUN = _Format(_run_score, _run_ms, _run_usd)
#: The page's formatting (its helpers load only for ``report``'s rows: ``run`` never
#: imports the page).
_PAGE = _Format(_page_score, _page_ms, _page_usd)


def _rows(
    report: Report,
    fmt: _Format,
    *,
    at: str,
    wall_s: float | None,
    throughput: float | None,
    cache: CacheSummary | None,
    option_flags: dict[str, str],
) -> Rows:
    """The one row builder: ``at`` names the scores errors count at (empty: there was no
    error to count), ``wall_s`` None leaves out the time it does not know."""
    return [
        *_count_rows(report, fmt, at),
        *_latency_rows(report, fmt, wall_s, throughput),
        *_cost_rows(report, fmt, cache),
        *_cache_rows(cache),
        *_engine_rows(report, option_flags),
    ]


def _count_rows(report: Report, fmt: _Format, at: str) -> Rows:
    resumed = f" ({report.resumed:,} from an earlier run)" if report.resumed else ""
    rows: Rows = [("examples", f"{report.n:,}{resumed}"), ("ok", f"{report.ok:,}")]
    for kind, count in report.errors.items():
        rows.append((f"error: {kind}", f"{count:,} of {report.n:,}"))
    all_label = f"mean score (all, errors at {at})" if at else "mean score (all)"
    rows.append((all_label, fmt.score(report.mean_score)))
    rows.append((f"mean score (ok, n={report.ok:,})", fmt.score(report.mean_score_ok)))
    for name, named in report.scores.items():
        rows.append((f"  {name} (n={named.count:,})", fmt.score(named.mean)))
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


def _latency_rows(
    report: Report, fmt: _Format, wall_s: float | None, throughput: float | None
) -> Rows:
    rows: Rows = []
    for label, lat in (("program", report.program_latency), ("metric", report.metric_latency)):
        if lat.count:
            rows.append(
                (
                    f"{label} latency p50 / p95 / p99",
                    f"{fmt.ms(lat.p50_ms)} / {fmt.ms(lat.p95_ms)} / {fmt.ms(lat.p99_ms)}",
                )
            )
    if wall_s is not None:
        rows.append(("wall time", f"{wall_s:,.2f} s"))
    if throughput is not None:
        rows.append(("throughput", f"{throughput:,.1f} examples/s"))
    return rows


def _cost_rows(report: Report, fmt: _Format, cache: CacheSummary | None) -> Rows:
    def cost(value: float | None, unmeasured: int, of: int) -> str:
        if value is None:
            return (
                f"unmeasured ({unmeasured:,} of {of:,} examples without a known price or with "
                "network traffic the engine did not meter; their notes say which)"
            )
        return fmt.usd(value)

    def headline(represented: str, now: float | None) -> str:
        # With results from the cache, the sums are what the results cost when they were
        # made: the headline is what was spent now, and that sum stands beside it.
        if cache is None or not cache.cached:
            return represented
        spent = "unmeasured" if now is None else fmt.usd(now)
        return f"{spent} spent now (the results represent {represented})"

    rows: Rows = []
    ran = report.program_cost_measured + report.program_cost_unmeasured
    if ran:
        represented = cost(report.program_cost_usd, report.program_cost_unmeasured, ran)
        now = None if cache is None else cache.program_cost_spent_usd
        rows.append(("program cost", headline(represented, now)))
    if report.judge_llm_calls or report.judge_cost_unmeasured:
        represented = cost(report.judge_cost_usd, report.judge_cost_unmeasured, report.n)
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
        return "unmeasured" if value is None else _run_usd(value)

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
