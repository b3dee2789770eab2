"""``skynet-eval report``: the command's logic, apart from its argument parsing.

Reads the results (and the baseline), builds the page, writes it (to ``--html``, by
default beside the results file with the suffix ``.html``), and prints the same summary.
Exit codes: 0 done; 1 with ``--fail-on-regression`` when this run is worse than the
baseline (the whole interval of the mean difference lies below 0) or misses examples the
baseline has; 2 a usage error (a bad file or option: one line, never a traceback).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..._exceptions import ConfigError
from ..._outpath import check_output_path
from ..._results_file._load import load_results_file
from ._build import build_report, write_file

__all__ = ["default_html_path", "race_report_command", "regression_reasons", "report_command"]


def default_html_path(results: str) -> Path:
    """Where the page goes without ``--html``: beside the results, ``.html`` for its suffix."""
    path = Path(results)
    return (
        path.with_name(path.stem + ".html") if path.suffix else path.with_name(path.name + ".html")
    )


def regression_reasons(built: Any) -> list[str]:
    """Why ``--fail-on-regression`` fails this run (an empty list when it does not)."""
    c = built.comparison
    if c is None:
        return []
    reasons = []
    d = c.difference
    if d is not None and d.high < 0:
        reasons.append(
            f"the mean score fell by {-d.mean:.4f} (95% CI of the difference "
            f"[{d.low:+.4f}, {d.high:+.4f}], wholly below 0)"
        )
    if c.only_baseline:
        reasons.append(f"{c.only_baseline:,} example(s) of the baseline are missing from this run")
    return reasons


def _check(results: str, baseline: str | None, html: Path | None, tolerance: float) -> None:
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ConfigError(f"--tolerance must be 0 or more, got {tolerance:g}")
    if html is None:
        return
    for flag, path in (("RESULTS", results), ("--baseline", baseline)):
        if path is not None and Path(path).resolve() == html.resolve():
            raise ConfigError(
                f"--html {html} is the {flag} file itself: writing the page there would destroy "
                "the results; choose another --html path"
            )
    if html.exists() and html.is_dir():
        raise ConfigError(f"--html {html} is a directory; give a file name such as report.html")
    check_output_path(html, option="html")


def _check_csv(csv: str | None, results: str, baseline: str | None) -> None:
    """``--csv``: a file that can be written, and neither of the results files."""
    if csv is None:
        return
    for flag, path in (("RESULTS", results), ("--baseline", baseline)):
        if path is not None and Path(path).resolve() == Path(csv).resolve():
            raise ConfigError(
                f"--csv {csv} is the {flag} file itself: exporting there would destroy the "
                "results; choose another --csv path, e.g. results.csv"
            )
    from ..._exceptions import OutputPathError
    from ..._outpath import check_output_path

    try:
        check_output_path(csv)
    except OutputPathError as exc:
        raise ConfigError(f"--csv {exc}") from None


def _print_failures(results: Sequence[Any], console: Any) -> None:
    """Every failed example, as ``run`` lists its first few."""
    from ..._cli._output import print_failures
    from .._summary import Failure

    failed = [f for f in map(Failure.of, results) if f is not None]
    if not failed:
        console.print("failures: none", markup=False)
        return
    print_failures(failed, console, title=f"Failures ({len(failed):,} of {len(results):,})")


def report_command(
    *,
    results: str,
    baseline: str | None = None,
    html: str | None = None,
    no_html: bool = False,
    data: str | None = None,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    tolerance: float = 0.0,
    title: str | None = None,
    json: bool = False,
    fail_on_regression: bool = False,
    failures: bool = False,
    csv: str | None = None,
    console: Any = None,
) -> int:
    """Run ``skynet-eval report``; returns the exit code. User errors raise
    :class:`evaluator.EvaluationError` subclasses (the CLI turns them into one line)."""
    if fail_on_regression and baseline is None:
        raise ConfigError("--fail-on-regression compares with a baseline: add --baseline FILE")
    if (input_cols or output_cols) and data is None:
        raise ConfigError("--input-cols/--output-cols describe --data: add --data DATASET")
    if data is not None and not Path(data).is_file():
        raise ConfigError(f"--data {data}: no such file (the dataset the run used)")
    target = None if no_html else Path(html) if html else default_html_path(results)
    _check(results, baseline, target, tolerance)
    _check_csv(csv, results, baseline)
    current = load_results_file(results)
    base = load_results_file(baseline) if baseline is not None else None
    built = build_report(
        current,
        baseline=base,
        data=data,
        input_cols=input_cols,
        output_cols=output_cols,
        title=title,
        tolerance=tolerance,
    )
    if target is not None:
        write_file(built.html, target, option="html")
        built.path = target
    if csv is not None:
        from ._rows import write_csv

        write_csv(current.results, csv)
    reasons = regression_reasons(built) if fail_on_regression else []
    if json:
        payload = {
            "summary": built.summary.fields(),
            "baseline_summary": (
                built.baseline_summary.fields() if built.baseline_summary is not None else None
            ),
            "comparison": built.comparison,
            "regressions": [{"example_id": i, "difference": d} for i, d in built.regressions],
            "warnings": built.warnings,
            "html": str(target) if target is not None else None,
            "failed": reasons,
        }
        sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
    else:
        from ..._cli._output import print_built_report

        if console is None:
            from rich.console import Console

            console = Console(highlight=False)
        print_built_report(built, console, results=results, baseline=baseline)
        if failures:
            _print_failures(current.results, console)
        if csv is not None:
            console.print(f"csv: {csv}", markup=False, soft_wrap=True)
        if target is not None:
            size = built.size_bytes
            shown = f"{size / 1e6:,.1f} MB" if size >= 1e6 else f"{size / 1e3:,.0f} kB"
            # soft_wrap: a path cut across lines cannot be copied or clicked.
            console.print(f"report: {target} ({shown})", markup=False, soft_wrap=True)
    for reason in reasons:
        print(f"skynet-eval report: regression: {reason}", file=sys.stderr)
    return 1 if reasons else 0


def race_report_command(
    *,
    results: str,
    html: str | None = None,
    no_html: bool = False,
    title: str | None = None,
    json: bool = False,
    console: Any = None,
    **others: Any,
) -> int:
    """``skynet-eval report RACE.json``: a race file (``skynet-eval race --output``) as
    its own page, the candidates-by-examples matrix, and the same table in the terminal.
    ``others``: the report's other options, refused when given (a race has none of them)."""
    from ..._race import read_race_file
    from ._race import print_race, write_race_page

    given = sorted(k for k, v in others.items() if v not in (None, False, 0.0, ()))
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ConfigError(
            f"{results} is a race file (`skynet-eval race --output`): it has its own page, "
            f"without {flags}; drop them"
        )
    target = None if no_html else Path(html) if html else default_html_path(results)
    _check(results, None, target, 0.0)
    race = read_race_file(results)
    if target is not None:
        write_race_page(race, target, title=title)
    if json:
        payload = {"race": race, "html": str(target) if target is not None else None}
        sys.stdout.write(msgspec.json.encode(payload).decode() + "\n")
        return 0
    if console is None:
        from rich.console import Console

        console = Console(highlight=False)
    print_race(race, console)
    if target is not None:
        console.print(f"report: {target}", markup=False, soft_wrap=True)
    return 0
