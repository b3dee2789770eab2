"""Pieces shared by the CLI subcommands: dataset flags, user-error reporting, the console."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ._exceptions import EvaluationError

__all__ = ["add_dataset_args", "columns", "user_errors"]


def columns(text: str) -> list[str]:
    """``a,b`` or ``a`` -> a list of column names (repeatable flags are appended)."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected one or more column names, e.g. question,context")
    return names


def add_dataset_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", required=True, metavar="FILE", help="dataset: .jsonl, .json or .csv"
    )
    parser.add_argument(
        "--input-cols",
        type=columns,
        action="extend",
        metavar="COLS",
        help="flat rows: the input column(s), comma separated or repeated",
    )
    parser.add_argument(
        "--output-cols",
        type=columns,
        action="extend",
        metavar="COLS",
        help="flat rows: the expected-output column(s); `expected` is keyed by these names",
    )


def user_errors(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """Turn a user's mistake (a bad file, option or row) into one clear line and exit 2."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (EvaluationError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            print(f"skynet-eval {args.command}: error: {exc}", file=sys.stderr)
            return 2

    return wrapped


def console(stderr: bool = False, *, wide: bool = False) -> Any:
    """A rich console; ``wide`` gives tables room when the output is not a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or not wide else 200
    return Console(stderr=stderr, highlight=False, soft_wrap=not wide, width=width)
