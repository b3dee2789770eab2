"""The ``skynet-eval`` command line: parser, dispatch, exit codes.

A command is its options struct (flags and checks, in ``_options``) and its module
(``_check``, ``_run``, ``_race``, ``_judges``, ``_simulator``) with ``execute(options) -> exit
code``. :func:`main` parses the words, builds the command's options struct once,
imports the command's module only then (so ``--help`` stays fast) and runs it.

This is the one place where a user's mistake becomes exit code 2 and one line,
``skynet-eval COMMAND: error: ...``, never a traceback; a ConfigError's option is
rendered by the command's own flag (``timeout`` -> ``--timeout``), read off the parser.

Exit codes: 0 success, 1 the job failed (a contract step, say), 2 a usage error, 130
interrupted by Ctrl-C (SIGINT), 143 stopped by SIGTERM: 128 + the signal's number, as a
shell reports a process that a signal ended, so that a supervisor or a CI script can tell
"stopped from outside" from "failed". Either way the command said what it had done first.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluator import ConfigError, EvaluationError

from ._loop import Interrupted
from ._options import (
    CacheOptions,
    CheckOptions,
    CommandOptions,
    JudgesOptions,
    RunOptions,
    SimulatorOptions,
)
from ._race import RaceOptions
from ._report import ReportOptions

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]

PROG = "skynet-eval"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its name, its options struct, and the module that runs it."""

    name: str
    options: type[CommandOptions]
    module: str


COMMANDS = (
    Command("check", CheckOptions, "evaluator._cli._check"),
    Command("run", RunOptions, "evaluator._cli._run"),
    Command("race", RaceOptions, "evaluator._cli._race"),
    Command("judges", JudgesOptions, "evaluator._cli._judges"),
    Command("report", ReportOptions, "evaluator._cli._report"),
    Command("simulator", SimulatorOptions, "evaluator._cli._simulator"),
    Command("cache", CacheOptions, "evaluator._cli._cache"),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's ``dest`` -> its long flag (``program_timeout`` -> ``--program-timeout``)."""
    names: dict[str, str] = {}
    for action in parser._actions:
        long = [s for s in action.option_strings if s.startswith("--")]
        if long:
            names[action.dest] = long[0]
    return names


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand's parser knows its command and flags."""
    parser = _Parser(
        prog=PROG,
        description="An async, high-throughput evaluation engine for optimizer loops.",
    )
    parser.add_argument("--version", action="version", version=f"skynet-eval {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        sub = subparsers.add_parser(
            command.name, help=command.options.HELP, description=command.options.DESCRIPTION
        )
        command.options.add_arguments(sub)
        sub.set_defaults(cli_command=command, cli_flags=flag_names(sub), cli_parser=sub)
    return parser


def _version() -> str:
    """The installed distribution's version (``unknown`` when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("skynet-eval")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The words as a namespace; a word no flag takes is the subcommand's usage error
    (its usage printed, not the top level's, which lists the commands). No words at all:
    the whole help (on stderr, exit 2: no command ran)."""
    words = sys.argv[1:] if argv is None else list(argv)
    if not words:
        parser.print_help(sys.stderr)
        parser.exit(EXIT_USAGE)
    words = _with_config(parser, words)
    args, extra = parser.parse_known_args(words)
    if extra:
        sub: argparse.ArgumentParser = getattr(args, "cli_parser", parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _with_config(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """``words`` with a ``--config FILE``'s flags put in just after the command (before
    the command line's own, which win); a bad file is the command's usage error."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    at = next((i for i, w in enumerate(words) if w in subs.choices), None)
    if at is None:
        return words
    from ._config import FLAG, config_words

    rest = words[at + 1 :]
    path = None
    for i, word in enumerate(rest):
        if word == FLAG and i + 1 < len(rest):
            path = rest[i + 1]
        elif word.startswith(FLAG + "="):
            path = word.split("=", 1)[1]
    sub = subs.choices[words[at]]
    if path is None or "config" not in flag_names(sub):
        return words

    try:
        extra = config_words(path, sub, rest)
    except ConfigError as exc:
        sub.exit(EXIT_USAGE, f"{sub.prog}: error: {exc}\n")
    return [*words[: at + 1], *extra, *rest]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); the exit code.

    As the program itself (``skynet-eval``, ``python -m evaluator``), the process ends
    when the command has, even if user code left threads running (see
    :func:`_end_without_user_threads`)."""
    if not _is_the_program():
        return _main(argv)
    try:
        code = _main(argv)
    except BaseException:
        if not _user_threads():
            raise
        sys.excepthook(*sys.exc_info())
        code = EXIT_FAILED
    _end_without_user_threads(code)
    return code


def _is_the_program() -> bool:
    """Whether this process is the command line itself, not a caller of :func:`main`
    (a test, a script): only then may the end of the command end the process."""
    program = sys.modules.get("__main__")
    spec = getattr(program, "__spec__", None)
    if spec is not None and spec.name in ("evaluator", "evaluator.__main__"):
        return True
    return Path(getattr(program, "__file__", None) or "").name.removesuffix(".exe") == PROG


def _user_threads() -> list[threading.Thread]:
    """Threads that would keep the process alive: non-daemonic ones still running. The
    engine's own have ended with the command, so these are the user's code's (one a
    metric file started when the engine imported it, say)."""
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def _end_without_user_threads(code: int) -> None:
    """End the process now if user code left non-daemonic threads running: Python would
    wait for them at exit, and a thread a metric starts at import (a heartbeat, a
    watcher) would keep ``run`` and ``check`` from ever ending. The command is done and
    its output written: the ``atexit`` hooks run (flushing logs, stopping a
    ``multiprocessing`` pool's children), the streams are flushed, and the process ends
    with the command's exit code, the threads cut off, as a daemon thread would be."""
    threads = _user_threads()
    if not threads:
        return
    names = ", ".join(sorted({t.name for t in threads}))
    print(
        f"{PROG}: note: not waiting for {len(threads)} thread(s) the user's code left "
        f"running ({names}); they end with the process",
        file=sys.stderr,
    )
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = _parse(build_parser(), argv)
    except SystemExit as exc:  # --help, or a usage error already printed: a code, not a raise
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    command: Command = args.cli_command
    try:
        return _execute(command, args)
    except Interrupted as exc:
        print(exc.note, file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:  # before the loop started, or a second Ctrl-C
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        mistake = user_mistake(exc)
        if mistake is None:
            raise
        message = render(mistake, args.cli_flags)
        print(f"skynet-eval {command.name}: error: {message}", file=sys.stderr)
        return EXIT_USAGE


#: The commands that call models: ``.env`` is read for their keys first.
_READS_DOTENV = frozenset({"check", "run", "judges"})


def _execute(command: Command, args: argparse.Namespace) -> int:
    if command.name in _READS_DOTENV:
        from ._config import read_dotenv

        read_dotenv()  # never over a variable already set
    options = command.options.from_args(args)
    module = importlib.import_module(command.module)
    with _one_line_warnings(command.name):
        code: int = module.execute(options)
    return code


@contextlib.contextmanager
def _one_line_warnings(name: str) -> Iterator[None]:
    """The result cache's warnings as one line each (``skynet-eval run: warning: ...``),
    not Python's two, with a file and a line of the engine's; others as they were."""
    from evaluator._cache import CacheWarning

    original = warnings.showwarning

    def show(message: Any, category: Any, *rest: Any, **options: Any) -> None:
        if isinstance(category, type) and issubclass(category, CacheWarning):
            print(f"skynet-eval {name}: warning: {message}", file=sys.stderr)
        else:
            original(message, category, *rest, **options)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = original


def user_mistake(exc: BaseException) -> BaseException | None:
    """The user's mistake ``exc`` is (or, in a task group, its only cause), else None."""
    from llm_client import ModelConfigError

    if isinstance(exc, BaseExceptionGroup):
        leaves = _leaves(exc)
        return user_mistake(leaves[0]) if len(leaves) == 1 else None
    mistakes = (
        EvaluationError,
        ModelConfigError,
        FileNotFoundError,
        IsADirectoryError,
        PermissionError,
    )
    return exc if isinstance(exc, mistakes) else None


def render(exc: BaseException, flags: Mapping[str, str]) -> str:
    """The one-line message; a ConfigError names its option by the command's flag."""
    if isinstance(exc, ConfigError) and exc.option is not None:
        return exc.render(flags.get(exc.option))
    return str(exc)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
