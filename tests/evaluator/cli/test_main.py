"""The command line's frame: parsing, exit codes, and the one place a user's mistake
becomes one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator import ConfigError, DatasetError
from evaluator._cli import main
from evaluator._cli._main import render, user_mistake
from llm_client import LLMError, ModelConfigError

ROOT = Path(__file__).resolve().parents[3]


class TestMain:
    def test_help_exits_0(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--help prints every command and returns 0 (not SystemExit)."""
        assert main(["--help"]) == 0
        out = capsys.readouterr().out
        assert all(name in out for name in ("check", "run", "judges", "simulator"))

    def test_no_command_is_a_usage_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        """No command: exit 2 with argparse's usage line."""
        assert main([]) == 2
        assert "usage: skynet-eval" in capsys.readouterr().err

    def test_help_imports_no_command(self) -> None:
        """`skynet-eval --help` imports none of the commands' modules, nor rich: it
        stays fast however heavy the commands become."""
        code = (
            "import sys\n"
            "from evaluator._cli import main\n"
            "assert main(['run', '--help']) == 0\n"
            "heavy = ['_run', '_check', '_judges', '_simulator', '_serving', '_output',"
            " '_progress']\n"
            "print(sorted(m for m in sys.modules if m == 'rich'"
            " or m in {'evaluator._cli.' + h for h in heavy}))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == "[]"

    def test_console_script_and_module_run_the_same_main(self) -> None:
        """`python -m evaluator` runs evaluator._cli.main, which the console script names."""
        import tomllib

        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
        assert scripts["skynet-eval"] == "evaluator._cli:main"
        done = subprocess.run(
            [sys.executable, "-m", "evaluator", "check", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
        assert done.returncode == 0 and done.stdout.startswith("usage: skynet-eval check")


class TestRender:
    def test_option_rendered_as_the_flag(self) -> None:
        """An engine ConfigError about an option reads with the command's flag."""
        exc = ConfigError(
            "must be a positive number of seconds, got -1", option="program_timeout", value=-1
        )
        flags = {"program_timeout": "--program-timeout"}
        assert (
            render(exc, flags) == "--program-timeout must be a positive number of seconds, got -1"
        )

    def test_option_without_a_flag_keeps_its_api_name(self) -> None:
        """An option the command has no flag for is named as in the API, in backticks."""
        exc = ConfigError("must be a finite number, got nan", option="failure_score")
        assert render(exc, {}) == "`failure_score` must be a finite number, got nan"

    def test_other_errors_read_as_they_are(self) -> None:
        """Errors without an option are their own message."""
        assert render(DatasetError("d.jsonl", 3, "bad row"), {}) == "d.jsonl:3: bad row"


class TestUserMistake:
    @pytest.mark.parametrize(
        "exc",
        [
            ConfigError("x"),
            DatasetError(None, None, "x"),
            ModelConfigError("x"),
            FileNotFoundError("x"),
            IsADirectoryError("x"),
            PermissionError("x"),
        ],
    )
    def test_user_mistakes(self, exc: Exception) -> None:
        """Bad options, files and rows are the user's to fix: exit 2, one line."""
        assert user_mistake(exc) is exc

    def test_lone_mistake_in_a_group_is_unwrapped(self) -> None:
        """A task group's only failure, a user mistake, still reads as one line."""
        inner = ConfigError("x")
        group = ExceptionGroup("g", [ExceptionGroup("h", [inner])])
        assert user_mistake(group) is inner

    @pytest.mark.parametrize(
        "exc",
        [
            RuntimeError("bug"),
            LLMError("HTTP 500"),
            ExceptionGroup("g", [ConfigError("x"), ConfigError("y")]),
            ExceptionGroup("g", [RuntimeError("bug")]),
        ],
    )
    def test_everything_else_is_not(self, exc: Exception) -> None:
        """Bugs, failed calls and several failures at once are not turned into a usage
        error (they keep their traceback)."""
        assert user_mistake(exc) is None
