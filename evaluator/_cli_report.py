"""``skynet-eval report``: the arguments. The logic is ``evaluator._report_html._command``."""

from __future__ import annotations

import argparse

from ._cli_common import columns, user_errors

__all__ = ["add_parser", "run_report"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report",
        help="a run's report as one HTML page, optionally against a baseline run",
        description=(
            "Summarise a results file (written by `skynet-eval run --output`) in the terminal "
            "and as one self-contained HTML page: scores, errors, time and cost, every "
            "example; with --baseline, what changed, example by example."
        ),
    )
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
        help="score differences up to this count as the same (default 0; e.g. 0.01 for a "
        "reward whose speed and cost parts move a little every run)",
    )
    parser.add_argument("--title", help="the page's title")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when the run is worse than the baseline (the 95%% interval of the mean "
        "difference lies below 0) or misses examples the baseline has",
    )
    parser.set_defaults(handler=user_errors(run_report))


def run_report(args: argparse.Namespace) -> int:
    from ._report_html._command import report_command

    return report_command(
        results=args.results,
        baseline=args.baseline,
        html=args.html,
        no_html=args.no_html,
        data=args.data,
        input_cols=args.input_cols,
        output_cols=args.output_cols,
        tolerance=args.tolerance,
        title=args.title,
        json=args.json,
        fail_on_regression=args.fail_on_regression,
    )
