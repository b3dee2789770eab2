"""``skynet-eval check``: the contract check of a metric on the first examples."""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio
import msgspec

from ._check import check_contract
from ._cli_common import add_dataset_args, console, print_steps, reserved_stdout, user_errors
from ._dataset import load_examples
from ._exceptions import ConfigError
from ._options import validate_timeout


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "check",
        help="run the metric contract check",
        description="Check a metric file against the contract on the first 3 examples.",
    )
    parser.add_argument("metric", metavar="METRIC", help="the metric file (defines `score`)")
    add_dataset_args(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="metric timeout in seconds (default 60, at most 600)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.set_defaults(handler=user_errors(run_check))


def run_check(args: argparse.Namespace) -> int:
    timeout = validate_timeout(args.timeout, "--timeout")
    if not Path(args.metric).is_file():
        raise ConfigError(f"metric file {args.metric!r} does not exist")
    examples = load_examples(args.data, input_cols=args.input_cols, output_cols=args.output_cols)
    with reserved_stdout(args.json) as stream:
        report = anyio.run(lambda: check_contract(args.metric, examples, timeout=timeout))
        if args.json:
            stream.write(msgspec.json.encode(report).decode() + "\n")
            return 0 if report.ok else 1
    out = console()
    print_steps(report, out)
    if report.ok:
        out.print(f"[green]Contract check passed[/green] on {Path(args.metric)}.")
    else:
        failed = report.failed
        out.print(f"[red]Contract check failed[/red] at step {failed.name if failed else '?'}.")
    return 0 if report.ok else 1
