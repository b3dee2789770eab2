"""What the commands print: the console, standard output kept for ``--json``, the tables.

Reports are data (``Report``, ``ContractReport``, ``JudgesReport``); this module is the
one place that turns them into text, so the commands only decide what to show.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

    from evaluator import ContractReport, Report
    from evaluator._report import Failure
    from evaluator._report.html import BuiltReport

__all__ = [
    "console",
    "print_built_report",
    "print_failures",
    "print_report",
    "print_rows",
    "print_steps",
    "reserved_stdout",
    "write_json",
]


def console(stderr: bool = False, *, wide: bool = False) -> Console:
    """A rich console; ``wide`` gives tables room when the output is not a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or not wide else 200
    return Console(stderr=stderr, highlight=False, soft_wrap=not wide, width=width)


@contextmanager
def reserved_stdout(reserve: bool = True) -> Iterator[TextIO]:
    """Keep standard output for the engine's own JSON: while inside, everything else
    written to fd 1 (user code printing, in this process or a worker process started
    here) goes to standard error. Yields a stream on the real standard output."""
    if not reserve:
        yield sys.stdout
        return
    original = sys.stdout
    original.flush()
    try:
        on_fd1 = original.fileno() == 1
    except (AttributeError, OSError, ValueError):  # replaced by a capture or a StringIO
        on_fd1 = False
    saved = os.dup(1)
    real: TextIO = os.fdopen(saved, "w", encoding="utf-8", closefd=False) if on_fd1 else original
    os.dup2(2, 1)
    try:
        with redirect_stdout(sys.stderr):
            yield real
    finally:
        real.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        if on_fd1:
            real.close()
        os.close(saved)


def write_json(stream: TextIO, value: Any) -> None:
    """One JSON document on one line of ``stream``."""
    import msgspec

    stream.write(msgspec.json.encode(value).decode() + "\n")
    stream.flush()


def print_steps(report: ContractReport, out: Console) -> None:
    """The contract check's steps, one line each; the reason under a failed one; then
    its warnings."""
    from rich.markup import escape

    for step in report.steps:
        mark = "[green]✓[/green]" if step.ok else "[red]✗[/red]"
        out.print(f"{mark} {step.name}")
        if not step.ok:
            where = f"example {step.example_id!r}: " if step.example_id is not None else ""
            out.print(f"    {where}{step.message}", markup=False)
    for warning in report.warnings:
        out.print(f"[yellow]![/yellow] {escape(warning)}")


def print_rows(rows: Iterable[tuple[str, str]], out: Console, *, title: str) -> None:
    """(label, value) rows as a two-column table: how every summary is printed (``run``'s
    report, ``report``'s summary and its comparison)."""
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for label, value in rows:
        table.add_row(label, value)
    out.print(table)


def print_report(report: Report, out: Console, *, interrupted: bool, output: str | None) -> None:
    """The run's report as a table, and where its results are."""
    from evaluator._report import report_rows

    title = "Report (interrupted: partial)" if interrupted else "Report"
    # The options that chose an executor, named as their flags (`execution` is
    # --execution): the same mapping from an option's name to its flag as errors use.
    flags = {s.option: "--" + s.option.replace("_", "-") for s in report.executors if s.option}
    print_rows(report_rows(report, option_flags=flags), out, title=title)
    if report.failures:
        shown = len(report.failures)
        failed = report.n - report.ok
        title = f"First {shown} of {failed:,} failures" if failed > shown else "Failures"
        print_failures(report.failures, out, title=title, width=FAILURE_WIDTH)
        if failed > shown and output:
            listing = f"all failures: skynet-eval report {output} --failures"
            out.print(listing, markup=False, soft_wrap=True)
    if output:
        out.print(f"results: {output}", markup=False, soft_wrap=True)


def print_built_report(
    built: BuiltReport, out: Console, *, results: str, baseline: str | None
) -> None:
    """``report``'s summary (and its comparison with the baseline) as tables."""
    from evaluator._report._terminal import comparison_rows, summary_rows
    from evaluator._report.html._html import delta_

    print_rows(summary_rows(built.summary), out, title=f"Report: {results}")
    for warning in built.warnings:
        out.print(f"! {warning}", markup=False, highlight=False, soft_wrap=True)
    if built.comparison is not None and baseline is not None:
        rows = comparison_rows(built.comparison)
        print_rows(rows, out, title=f"Against the baseline: {baseline}")
        if built.regressions:
            worst = ", ".join(f"{ident} {delta_(delta)}" for ident, delta in built.regressions[:5])
            line = f"largest regressions: {worst}"
            out.print(line, markup=False, highlight=False, soft_wrap=True)


#: How much of a failure's message the run's summary shows (its first line).
FAILURE_WIDTH = 160


def print_failures(
    failures: Iterable[Failure], out: Console, *, title: str, width: int | None = None
) -> None:
    """Failed examples as a table of id, kind and message (``run``'s first few, every
    one for ``report --failures``)."""
    from rich.table import Table

    from evaluator._report import failure_rows

    table = Table(title=title, title_justify="left")
    table.add_column("id", overflow="fold")
    table.add_column("kind")
    table.add_column("message", overflow="fold")
    for row in failure_rows(failures, width=width):
        table.add_row(*row)
    out.print(table)


def _fmt(value: float | None, spec: str, unknown: str = "–") -> str:
    return unknown if value is None else format(value, spec)
