"""`skynet-eval race` end to end (its ``main``, in this process), inline: the verdict, the race
file, the page, the cache, and each usage error as one line and exit 2."""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main

PROGRAM = """
import hashlib

def run(artifact, input):
    key = f"{artifact['name']}:{input['n']}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
    return (input["u"] < artifact["rate"]) != (draw < artifact.get("noise", 0.0))
"""
METRIC = """
def score(input, output, expected=None):
    return (1.0 if output else 0.0), {"feedback": "pass" if output else "fail"}
"""
RATES = {"weak": 0.3, "strong": 0.85, "middle": 0.55}


@pytest.fixture
def race_dir(tmp_path: Path) -> Path:
    (tmp_path / "p.py").write_text(PROGRAM)
    (tmp_path / "m.py").write_text(METRIC)
    rng = random.Random(0)
    with (tmp_path / "d.jsonl").open("w") as fh:
        for i in range(400):
            fh.write(json.dumps({"id": f"e{i}", "input": {"n": i, "u": rng.random()}}) + "\n")
    for name, rate in RATES.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"name": name, "rate": rate}))
    return tmp_path


def cli(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The command line's ``main`` in this process, in ``folder``: its exit code and
    what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def race(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``skynet-eval race`` with inline executors (nothing to start), in ``folder``."""
    base = ["--metric", "m.py", "--program", "p.py", "--data", "d.jsonl"]
    inline = ["--execution", "inline", "--program-execution", "inline"]
    return cli(folder, "race", *base, *inline, *args)


ARTIFACTS = ("--artifact", "weak.json", "--artifact", "strong.json", "--artifact", "middle.json")


def read(path: Path) -> dict[str, Any]:
    race: dict[str, Any] = json.loads(path.read_text())["race"]
    return race


@pytest.mark.slow
class TestRace:
    def test_the_strong_candidate_wins_and_the_race_is_written(self, race_dir: Path) -> None:
        """Three artifacts: exit 0, the strong one wins, the others are dropped with a
        reason, the race file and the page are written, and it spent less than all."""
        done = race(race_dir, *ARTIFACTS, "--output", "race.json", "--report", "race.html")
        assert done.returncode == 0, done.stderr
        assert "winner: strong.json" in done.stdout
        assert "dropped weak.json: behind strong.json" in done.stdout
        result = read(race_dir / "race.json")
        assert result["outcome"] == "winner" and result["winners"] == [1]
        labels = [c["label"] for c in result["candidates"]]
        assert labels == ["weak.json", "strong.json", "middle.json"]
        assert result["spend"]["evaluations"] < result["spend"]["full_evaluations"] == 1200
        assert (race_dir / "race.html").read_text().startswith("<!doctype html>")

    def test_json_prints_the_race(self, race_dir: Path) -> None:
        """--json: one JSON object on stdout, the same race."""
        done = race(race_dir, *ARTIFACTS, "--json", "--label", "w", "--label", "s", "--label", "m")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["winners"] == [1] and result["candidates"][1]["label"] == "s"

    def test_report_renders_a_race_file(self, race_dir: Path) -> None:
        """`skynet-eval report race.json --html` draws the race's page, and prints it."""
        assert race(race_dir, *ARTIFACTS, "--output", "race.json").returncode == 0
        done = cli(race_dir, "report", "race.json", "--html", "page.html")
        assert done.returncode == 0, done.stderr
        assert "winner: strong.json" in done.stdout
        assert 'id="race-matrix"' in (race_dir / "page.html").read_text()
        refused = cli(race_dir, "report", "race.json", "--baseline", "race.json")
        assert refused.returncode == 2 and "--baseline" in refused.stderr
        assert "Traceback" not in refused.stderr

    def test_errors_are_counted_and_said(self, race_dir: Path) -> None:
        """A metric that raises: every result is an error, counted per candidate and
        warned about, never a silent tie of zeros."""
        (race_dir / "m.py").write_text("def score(input, output, expected=None):\n    1 / 0\n")
        done = race(race_dir, *ARTIFACTS, "--output", "race.json")
        assert done.returncode == 0, done.stderr
        assert "results were errors" in done.stdout
        assert all(c["errors"] == c["examples"] for c in read(race_dir / "race.json")["candidates"])

    def test_a_second_race_on_the_cache_evaluates_nothing(self, race_dir: Path) -> None:
        """--cache DIR: the same race again takes every result from the cache."""
        first = race(race_dir, *ARTIFACTS, "--cache", "c", "--output", "one.json")
        second = race(race_dir, *ARTIFACTS, "--cache", "c", "--output", "two.json")
        assert first.returncode == 0 and second.returncode == 0, second.stderr
        one, two = read(race_dir / "one.json"), read(race_dir / "two.json")
        assert one["spend"]["evaluations"] > 0
        assert two["spend"]["evaluations"] == 0
        assert two["spend"]["cached"] == one["spend"]["evaluations"]
        assert "from the cache" in second.stdout

    def test_max_evaluations_reports_the_standing(self, race_dir: Path) -> None:
        """--max-evaluations 30: stopped by the budget, at most 30 evaluations."""
        same = ("--artifact", "middle.json", "--artifact-text", "x", "--max-evaluations", "30")
        (race_dir / "p.py").write_text("def run(artifact, input):\n    return input['n'] % 2\n")
        done = race(race_dir, *same, "--output", "race.json")
        assert done.returncode == 0, done.stderr
        result = read(race_dir / "race.json")
        assert result["outcome"] == "budget" and result["spend"]["evaluations"] <= 30
        assert "stopped by the budget" in done.stdout


JUDGE = """
from skynet import llm


def score(input, output, expected=None):
    verdict = llm(
        "Answer PASS or FAIL, then give one sentence of reasons.",
        input=f"Ticket {input['n']}\\nAnswer: {output}\\nExpected: True",
    )
    return (1.0 if str(verdict).startswith("PASS") else 0.0), {"feedback": str(verdict)}
"""


@pytest.mark.slow
class TestRaceWithAJudge:
    def test_money_and_calls_are_counted_against_everything(self, race_dir: Path) -> None:
        """A judge on the simulator over real HTTP (priced as gpt-4o-mini): one model
        call per evaluation, a measured cost, and the full cost estimated above it."""
        (race_dir / "m.py").write_text(JUDGE)
        (race_dir / "sim.json").write_text(json.dumps({"models": {"gpt-4o-mini": {}}}))
        judged = ("--metric-model", "gpt-4o-mini", "--simulator", "sim.json")
        base = ["--metric", "m.py", "--program", "p.py", "--data", "d.jsonl", *ARTIFACTS]
        done = subprocess.run(
            [sys.executable, "-m", "evaluator", "race", *base, *judged, "--output", "r.json"],
            cwd=race_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        result = read(race_dir / "r.json")
        spend = result["spend"]
        assert result["winners"] == [1]
        assert spend["model_calls"] == spend["evaluations"] > 0
        assert spend["full_model_calls"] == 1200
        assert 0 < spend["cost_usd"] < spend["full_cost_usd"]

    def test_a_dollar_budget_stops_the_race_and_reports_the_standing(self, race_dir: Path) -> None:
        """--max-cost on a judged race (the simulator over real HTTP): the race stops on
        the budget, spent at most it, the cut cells budget_exhausted, the standing and
        the spend against the budget printed and written."""
        (race_dir / "m.py").write_text(JUDGE)
        (race_dir / "sim.json").write_text(json.dumps({"models": {"gpt-4o-mini": {}}}))
        # Twins (the same verdicts): only the budget can end their race.
        (race_dir / "twin.json").write_text((race_dir / "middle.json").read_text())
        judged = ("--metric-model", "gpt-4o-mini", "--simulator", "sim.json")
        twins = ("--artifact", "middle.json", "--artifact", "twin.json")
        base = ["--metric", "m.py", "--program", "p.py", "--data", "d.jsonl", *twins]
        files = ("--output", "r.json", "--report", "r.html")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "evaluator",
                "race",
                *base,
                *judged,
                "--max-cost",
                "0.01",
                *files,
            ],
            cwd=race_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        result = read(race_dir / "r.json")
        assert result["outcome"] == "budget"
        assert result["budget"]["usd"] == 0.01
        assert 0 < result["spend"]["cost_usd"] <= 0.01
        assert result["budget"]["spent_usd"] <= 0.01
        assert "stopped by the budget" in done.stdout and "budget: $" in done.stdout
        assert "of $0.01" in done.stdout
        page = (race_dir / "r.html").read_text()
        assert 'data-stat="budget"' in page and "budget_exhausted" in page


@pytest.mark.slow
class TestRaceUsage:
    @pytest.mark.parametrize(
        ("args", "words"),
        [
            (("--artifact", "weak.json"), "at least 2 candidates"),
            ((*ARTIFACTS, "--ties", "first"), "--ties"),
            ((*ARTIFACTS, "--confidence", "2"), "--confidence"),
            ((*ARTIFACTS, "--score-range", "1,0"), "--score-range"),
            ((*ARTIFACTS, "--label", "only-one"), "--label"),
            ((*ARTIFACTS, "--output", "d.jsonl"), "--output"),
            ((*ARTIFACTS, "--output", "."), "--output"),
            ((*ARTIFACTS, "--max-calls", "-1"), "--max-calls"),
        ],
    )
    def test_a_mistake_is_one_line_and_exit_2(
        self, race_dir: Path, args: tuple[str, ...], words: str
    ) -> None:
        """Each mistake: exit 2, one error line naming the flag, no traceback."""
        done = race(race_dir, *args)
        assert done.returncode == 2, done.stderr
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1 and words in errors[0], done.stderr
        assert "Traceback" not in done.stderr

    def test_a_score_outside_the_range_is_one_line(self, race_dir: Path) -> None:
        """A metric scoring 5 with the default range: exit 2, naming --score-range."""
        (race_dir / "m.py").write_text(
            "def score(input, output, expected=None):\n    return 5.0, {'feedback': 'x'}\n"
        )
        done = race(race_dir, *ARTIFACTS)
        assert done.returncode == 2
        assert "--score-range" in done.stderr and "Traceback" not in done.stderr
