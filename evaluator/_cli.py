"""The ``skynet-eval`` command: one subcommand per module (``_cli_check``, ``_cli_run``...).

Each subcommand module has ``add_parser(subparsers)``, which registers its parser and sets
``handler=`` to a function ``(args) -> exit code``. Exit codes: 0 success, 1 the job
failed (a contract step, say), 2 a usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

_SUBCOMMANDS = ("_cli_check", "_cli_run", "_cli_judges", "_cli_simulator", "_cli_report")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="skynet-eval",
        description="An async, high-throughput evaluation engine for optimizer loops.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(f"evaluator.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"evaluator.{name}":
                raise
            continue  # a subcommand that has not landed yet
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed: a code, not a raise
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
