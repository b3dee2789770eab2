"""Pieces shared by the CLI subcommands: dataset flags, user-error reporting, the console."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any, TextIO

from ._exceptions import ConfigError, EvaluationError

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


def key_env(value: str | None) -> str | None:
    """``--api-key-env``: a variable name, or ``none`` for a server that takes no key."""
    return None if value is None or value.lower() == "none" else value


def cli_key_error(exc: Exception) -> ConfigError:
    """A missing-key error worded for the command line."""
    return ConfigError(str(exc).replace("pass api_key_env=None", "pass --api-key-env none"))


def load_artifact(path: str | None, text: str | None = None) -> Any:
    """The artifact: ``--artifact-text``, or ``--artifact FILE`` (.json parsed, else text)."""
    import json
    from pathlib import Path

    if text is not None:
        return text
    if path is None:
        return None
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--artifact: no such file {str(file)!r}")
    content = file.read_text(encoding="utf-8")
    if file.suffix.lower() == ".json":
        try:
            return json.loads(content)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--artifact {file}:{exc.lineno}: broken JSON ({exc.msg}); fix it, or give "
                "the file another extension to pass it as text"
            ) from None
    return content


def print_steps(report: Any, out: Any) -> None:
    """The contract check's steps, one line each; the reason under a failed one."""
    for step in report.steps:
        mark = "[green]✓[/green]" if step.ok else "[red]✗[/red]"
        out.print(f"{mark} {step.name}")
        if not step.ok:
            where = f"example {step.example_id!r}: " if step.example_id is not None else ""
            out.print(f"    {where}{step.message}", markup=False)


def load_simulator_config(path: str) -> Any:
    """The ``--simulator`` file: a JSON ``llm_client.SimulatorConfig``."""
    from pathlib import Path

    import msgspec

    from llm_client import SimulatorConfig

    if not Path(path).is_file():
        raise ConfigError(f"--simulator {path!r} does not exist")
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=SimulatorConfig)
    except (msgspec.MsgspecError, ValueError) as exc:
        raise ConfigError(f"--simulator {path}: {exc}") from None


def add_simulator_arg(parser: Any) -> None:
    parser.add_argument(
        "--simulator",
        metavar="CONFIG",
        help="serve every model from a local simulator on 127.0.0.1 (a JSON SimulatorConfig); "
        "no key, no network",
    )


def user_errors(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """Turn a user's mistake (a bad file, option or row) into one clear line and exit 2."""

    def wrapped(args: argparse.Namespace) -> int:
        from llm_client import ModelConfigError

        user = (
            EvaluationError,
            ModelConfigError,
            FileNotFoundError,
            IsADirectoryError,
            PermissionError,
        )
        try:
            return handler(args)
        except BaseExceptionGroup as group:
            # A user's mistake met inside a task group arrives wrapped; unwrap it when it is
            # the only cause, so it still reads as one line.
            leaves = _leaves(group)
            if len(leaves) != 1 or not isinstance(leaves[0], user):
                raise
            print(f"skynet-eval {args.command}: error: {leaves[0]}", file=sys.stderr)
            return 2
        except user as exc:
            print(f"skynet-eval {args.command}: error: {exc}", file=sys.stderr)
            return 2

    return wrapped


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def console(stderr: bool = False, *, wide: bool = False) -> Any:
    """A rich console; ``wide`` gives tables room when the output is not a terminal."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or not wide else 200
    return Console(stderr=stderr, highlight=False, soft_wrap=not wide, width=width)
