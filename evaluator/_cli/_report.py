"""``skynet-eval report``: its flags, read into one options struct; the logic is
``evaluator._report_html._command``. Cheap to import (``--help`` imports it): the
report's own modules load only in :func:`execute`.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import ClassVar, Self

from ._options import columns

__all__ = ["ReportOptions", "execute"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportOptions:
    """``skynet-eval report RESULTS [--baseline RESULTS] [--html OUT] ...``."""

    HELP: ClassVar[str] = "a run's report as one HTML page, optionally against a baseline run"
    DESCRIPTION: ClassVar[str] = (
        "Summarise a results file (written by `skynet-eval run --output`) in the terminal "
        "and as one self-contained HTML page: scores, errors, time and cost, every "
        "example; with --baseline, what changed, example by example."
    )

    results: str
    baseline: str | None = None
    html: str | None = None
    no_html: bool = False
    data: str | None = None
    input_cols: tuple[str, ...] | None = None
    output_cols: tuple[str, ...] | None = None
    tolerance: float = 0.0
    title: str | None = None
    json: bool = False
    fail_on_regression: bool = False
    failures: bool = False
    csv: str | None = None

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("results", metavar="RESULTS", help="the results file (JSON Lines)")
        parser.add_argument(
            "--baseline", metavar="RESULTS", help="an earlier run's results file to compare with"
        )
        where = parser.add_mutually_exclusive_group()
        where.add_argument(
            "--html", metavar="OUT", help="write the page here (default: RESULTS with .html)"
        )
        where.add_argument("--no-html", action="store_true", help="print the summary only")
        parser.add_argument(
            "--data",
            metavar="FILE",
            help="the run's dataset, to show each example's input and expected value",
        )
        parser.add_argument(
            "--input-cols", type=columns, action="extend", metavar="COLS", help="as for `run`"
        )
        parser.add_argument(
            "--output-cols", type=columns, action="extend", metavar="COLS", help="as for `run`"
        )
        parser.add_argument(
            "--tolerance",
            type=float,
            default=0.0,
            help="score differences up to this count as the same (default 0; e.g. 0.01 for "
            "a reward whose speed and cost parts move a little every run)",
        )
        parser.add_argument(
            "--failures",
            action="store_true",
            help="also list every failed example in the terminal: id, kind, message",
        )
        parser.add_argument(
            "--csv", metavar="OUT", help="also export every result to this CSV file"
        )
        parser.add_argument("--title", help="the page's title")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")
        parser.add_argument(
            "--fail-on-regression",
            action="store_true",
            help="exit 1 when the run is worse than the baseline (the 95%% interval of the "
            "mean difference lies below 0) or misses examples the baseline has",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        # The checks live with the command's logic (report_command), which a library
        # caller reaches without this struct; here the words only become a struct.
        return cls(
            results=args.results,
            baseline=args.baseline,
            html=args.html,
            no_html=args.no_html,
            data=args.data,
            input_cols=tuple(args.input_cols) if args.input_cols else None,
            output_cols=tuple(args.output_cols) if args.output_cols else None,
            tolerance=args.tolerance,
            title=args.title,
            json=args.json,
            fail_on_regression=args.fail_on_regression,
            failures=args.failures,
            csv=args.csv,
        )


def execute(options: ReportOptions) -> int:
    """Run the command; the exit code (0 done, 1 a regression with --fail-on-regression)."""
    from .._race import is_race_file
    from .._report_html._command import race_report_command, report_command

    if is_race_file(options.results):  # `skynet-eval race --output`: the race's page
        return race_report_command(**asdict(options))
    return report_command(**asdict(options))
