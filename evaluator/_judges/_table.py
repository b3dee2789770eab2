"""The judges report as tables on the terminal: what ``skynet-eval judges`` prints.

Two tables: agreement (with the reference and, with repeats, with itself; where the
judge departs from the reference; cost per 1,000 calls and the Pareto front), then cost
and speed (with ``--project``, the projection). Notes follow: failed judges, unknown
costs, the tie rule when a tie happened, and what a projection rests on.
"""

from __future__ import annotations

import sys
from typing import Any

from ._report import JudgeRow, JudgesReport

__all__ = ["print_judges"]


def _fmt(value: float | None, spec: str, unknown: str = "–") -> str:
    return unknown if value is None else format(value, spec)


def _ci(ci: tuple[float, float] | None) -> str:
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci is not None else ""


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if seconds >= 1.5 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _usd(value: float | None, note: str | None, spec: str) -> str:
    return "unknown" if value is None and note else _fmt(value, spec)


def _console() -> Any:
    from rich.console import Console

    # Off a terminal (a pipe, a README) the tables get room instead of wrapping.
    width = None if sys.stdout.isatty() else 200
    return Console(highlight=False, soft_wrap=False, width=width)


def _agreement_table(report: JudgesReport) -> Any:
    from rich.table import Table

    verdicts = report.kind == "verdicts"
    repeats = report.repeats > 1
    against = report.reference or "nothing (no reference)"
    times = f" x {report.repeats} repeats" if repeats else ""
    table = Table(title=f"Judges on {report.examples} examples{times}; agreement against {against}")
    columns = ["model", "scored", "errors", "agreement [95% CI]"]
    columns += ["kappa", "false pass", "false fail"] if verdicts else ["pearson", "bias [95% CI]"]
    if repeats:
        columns += ["self: stable", "self: kappa [95% CI]" if verdicts else "self: ICC [95% CI]"]
    columns += ["$/1k calls", "front"]
    for name in columns:
        table.add_column(name, justify="left" if name == "model" else "right")
    for row in report.rows:
        cells = [row.label, str(row.scored), str(row.errors)]
        cells.append(_fmt(row.agreement, ".3f") + _ci(row.agreement_ci))
        if verdicts:
            c = row.confusion
            cells += [
                _fmt(row.kappa, ".3f"),
                str(c.false_pass) if c else "–",
                str(c.false_fail) if c else "–",
            ]
        else:
            cells += [_fmt(row.pearson, ".3f"), _fmt(row.bias, "+.3f") + _ci(row.bias_ci)]
        if repeats:
            s = row.self_agreement
            cells += [
                _fmt(s.stable if s else None, ".0%"),
                _fmt(s.kappa if s else None, ".3f") + _ci(s.kappa_ci if s else None),
            ]
        cells += [_usd(row.cost_per_1k_usd, row.cost_note, ".4f"), "★" if row.pareto else ""]
        table.add_row(*cells)
    return table


def _cost_table(report: JudgesReport) -> Any:
    from rich.table import Table

    table = Table(title="Cost and speed" + (" (simulated)" if _simulated(report.rows) else ""))
    columns = ["model", "provider", "$ total", "in tok/call", "out tok/call"]
    columns += ["p50 ms", "p95 ms", "429s", "retries"]
    if report.project is not None:
        n = f"{report.project:,}"
        columns += [f"$ for {n}", f"time for {n}", "limited by"]
    for name in columns:
        table.add_column(name, justify="left" if name in ("model", "provider") else "right")
    for row in report.rows:
        cells = [
            row.label,
            row.provider or row.base_url or "",
            _usd(row.cost_usd, row.cost_note, ".5f"),
            _fmt(row.input_tokens_per_example, ".0f"),
            _fmt(row.output_tokens_per_example, ".0f"),
            _fmt(row.latency_p50_ms, ".0f"),
            _fmt(row.latency_p95_ms, ".0f"),
            str(row.rate_limited),
            str(row.retries),
        ]
        p = row.projection
        if report.project is not None:
            cells += [
                _usd(p.cost_usd if p else None, row.cost_note, ",.2f"),
                _duration(p.wall_s if p else None),
                (p.limited_by or "–") if p else "–",
            ]
        table.add_row(*cells)
    return table


def _simulated(rows: list[JudgeRow]) -> bool:
    return bool(rows) and all(r.simulated for r in rows)


def _notes(report: JudgesReport) -> list[str]:
    """Lines in rich markup: whatever came from outside (labels, messages) is escaped."""
    from rich.markup import escape

    notes = []
    for row in report.rows:
        if row.failure:
            notes.append(f"[red]{escape(row.label)}[/red]: {escape(row.failure)}")
        elif row.cost_note and row.cost_usd is None:
            notes.append(escape(f"{row.label}: cost unknown: {row.cost_note}"))
    ties = sum(r.self_agreement.ties for r in report.rows if r.self_agreement is not None)
    if ties:
        notes.append(escape(f"{ties} majority tie(s): {report.tie_rule}; an odd --repeat has none"))
    if report.project is not None:
        notes.append(
            f"projection for {report.project:,} examples, one call each: measured cost per "
            "call, and the tightest of concurrency / mean service time, rpm and tpm as "
            "configured (a provider's own limits may bind first)"
        )
    return notes


def print_judges(report: JudgesReport, out: Any = None) -> None:
    """Print the report's tables and notes to ``out`` (a rich Console; default stdout)."""
    out = out if out is not None else _console()
    out.print(_agreement_table(report))
    out.print(_cost_table(report))
    for note in _notes(report):
        out.print(note, markup=True)
