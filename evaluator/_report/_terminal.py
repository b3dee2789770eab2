"""The report's summary in a terminal: the same numbers as the page, as rows of a table.

Rows are (label, value) pairs, built apart from their printing, so a test can read them
and ``--json`` can skip them; ``evaluator._cli._output`` prints them, as it prints
``run``'s.
"""

from __future__ import annotations

from ._stats import Distribution, RunSummary
from ._summary import repeat_rows
from .html._compare import Comparison
from .html._html import delta_, ms_, n_, score_, usd_

__all__ = ["comparison_rows", "summary_rows"]


def _percentiles(d: Distribution) -> str:
    return f"{ms_(d.p50)} / {ms_(d.p95)} / {ms_(d.p99)}"


def summary_rows(s: RunSummary) -> list[tuple[str, str]]:
    """One run's summary as (label, value) rows."""
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
    if value is None:
        return f"unmeasured ({n_(unmeasured)} of {n_(of)} examples without a known price)"
    return usd_(value)


def comparison_rows(c: Comparison) -> list[tuple[str, str]]:
    """The comparison with a baseline as (label, value) rows."""
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
