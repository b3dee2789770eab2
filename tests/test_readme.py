"""Every snippet of the README runs as written (issue 26).

The console blocks' commands run through the installed ``skynet-eval``, exactly as the
README writes them, from the repository's root; what they print is compared on its
stable lines only (the check marks and messages, the report rows that do not depend on
the machine: examples, ok, the mean scores), never on times. The library example runs
as a file with ``python``, and prints what its comment says. The metric shown is the
shipped example's file. The two set-up commands are kept exactly as CI and reviewers run
them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

SETUP_RUN = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && skynet-eval run"
    " --metric examples/classify/metric.py --program examples/classify/program.py"
    " --artifact examples/classify/prompt.txt --data examples/classify/data.jsonl"
)
SETUP_TEST = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest"

#: Report rows whose value does not depend on the machine or the moment.
STABLE_ROWS = ("examples", "ok", "mean score (all", "mean score (ok")


def blocks(kind: str) -> list[str]:
    """The README's fenced blocks of one kind (``console``, ``python``, ``bash``)."""
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"^```{kind}\n(.*?)^```$", text, flags=re.M | re.S)


def sessions(block: str) -> list[tuple[str, list[str]]]:
    """(command, output lines) of each ``$ `` command of a console block."""
    out: list[tuple[str, list[str]]] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        assert line.startswith("$ "), f"a console block's first line is a command: {line!r}"
        command = line[2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + lines[i].strip()
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        out.append((command.strip(), shown))
    return out


def stable(lines: list[str]) -> list[str]:
    """The lines that must be the same on every machine, table rows as ``label = value``
    (a race's are too: its order of examples is seeded, its candidates deterministic)."""
    out = []
    for line in lines:
        if "│" in line:
            cells = [c.strip() for c in line.strip("│ ").split("│")]
            if len(cells) == 2 and cells[0].startswith(STABLE_ROWS):
                out.append(f"{cells[0]} = {cells[1]}")
        elif line.startswith(("✓", "✗", "    example ", "Contract check ", "winner: ", "spent: ")):
            out.append(line.rstrip())
    return out


def run_as_user(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` from the repository's root, with this checkout's engine and console script."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


CONSOLE = [s for block in blocks("console") for s in sessions(block)]


def test_the_readme_has_its_snippets() -> None:
    """The README still shows the shipped example's run and both checks, one library
    example and the metric (a test that finds nothing to run would pass on nothing)."""
    commands = [c for c, _ in CONSOLE]
    assert sum(c.startswith("skynet-eval run ") for c in commands) == 1, commands
    assert sum(c.startswith("skynet-eval check ") for c in commands) == 2, commands
    assert len(blocks("python")) == 2


def test_the_setup_commands_are_kept_verbatim() -> None:
    """The two set-up commands, character for character: CI and reviewers run them."""
    assert blocks("bash") == [SETUP_RUN + "\n", SETUP_TEST + "\n"]


def test_the_metric_shown_is_the_shipped_one() -> None:
    """The metric in the README is examples/classify/metric.py, which the run scores with."""
    metric = blocks("python")[0]
    assert metric == (ROOT / "examples" / "classify" / "metric.py").read_text(encoding="utf-8")


@pytest.mark.parametrize(("command", "shown"), CONSOLE, ids=[c[:60] for c, _ in CONSOLE])
def test_a_console_command_prints_what_the_readme_shows(command: str, shown: list[str]) -> None:
    """The command, as written, exits as its output says (0, or 1 for a failed check) and
    prints the README's stable lines, in order."""
    assert command.startswith("skynet-eval "), command
    done = run_as_user(shlex.split(command))
    failed = any(line.startswith("Contract check failed") for line in shown)
    assert done.returncode == (1 if failed else 0), done.stdout + done.stderr
    expected = stable(shown)
    assert expected, f"nothing stable to compare in the README's output of {command!r}"
    assert stable(done.stdout.splitlines()) == expected, done.stdout


def test_the_library_example_runs_as_a_file(tmp_path: Path) -> None:
    """The library example, saved as a file and run with python from the repository's
    root, prints what its comment says."""
    example = blocks("python")[1]
    promised = re.search(r"# prints (.+)$", example, flags=re.M)
    assert promised, "the library example says what it prints"
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    done = run_as_user([sys.executable, str(script)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == promised.group(1).strip()


def test_the_library_guides_judge_program_runs_as_a_file(tmp_path: Path) -> None:
    """docs/guide/library.md's judge program (a model on the simulator, ``evaluate_many``
    in the running loop), saved as a file and run with python, prints what it says."""
    guide = (ROOT / "docs" / "guide" / "library.md").read_text(encoding="utf-8")
    programs = [
        b
        for b in re.findall(r"^```python\n(.*?)^```$", guide, flags=re.M | re.S)
        if "# prints" in b
    ]
    assert len(programs) == 1, "the guide shows one complete program"
    promised = re.search(r"# prints (.+)$", programs[0], flags=re.M)
    assert promised is not None
    script = tmp_path / "judge.py"
    script.write_text(programs[0], encoding="utf-8")
    done = run_as_user([sys.executable, str(script)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == promised.group(1).strip()
