"""A new user's first hour (issue 26): check a judge metric, try a few rows, see what
failed, resume. Logic runs inline; model traffic goes to the simulator on 127.0.0.1."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main
from evaluator._cli._main import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[3]
JUDGES = ROOT / "examples" / "judges"
JUDGE_METRIC = JUDGES / "metric.py"
JUDGE_DATA = JUDGES / "data.jsonl"
SIMULATOR = JUDGES / "simulator.json"
ON_SIMULATOR = ("--metric-model", "judge-mini", "--simulator", str(SIMULATOR))
INLINE = ("--execution", "inline")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's own parser."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


def dataset(tmp_path: Path, n: int) -> Path:
    """The judges example's first ``n`` rows, as a file of the test's own."""
    rows = JUDGE_DATA.read_text().splitlines()[:n]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def results_ids(path: Path) -> list[Any]:
    """The example ids of a results file's result lines, in file order."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [row["example_id"] for row in rows if "example_id" in row]


def headers(path: Path) -> list[dict[str, object]]:
    """The header lines, but for the lines that record how a run ended."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [row for row in rows if "skynet_eval_results" in row and "ended" not in row]


class TestCheckAJudge:
    def test_check_calls_the_judge_on_the_simulator(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`check` takes run's --metric-model and --simulator: the judge metric passes."""
        argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), *ON_SIMULATOR, *INLINE]
        assert main([*argv, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] is True
        assert [s["name"] for s in report["steps"]][-2:] == ["Metric runs", "Metric return value"]

    def test_without_a_model_the_hint_names_a_flag_check_has(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without a model, Metric runs fails saying to set --metric-model, which `check`
        now accepts."""
        argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), *INLINE, "--json"]
        assert main(argv) == 1
        step = next(s for s in json.loads(capsys.readouterr().out)["steps"] if not s["ok"])
        assert step["name"] == "Metric runs" and "--metric-model" in step["message"]
        assert "--metric-model" in flags_of(subparsers()["check"])

    def test_check_and_run_share_the_model_options(self) -> None:
        """Every model, simulator and price flag of `run` is on `check`, with the same
        help and default (one definition)."""
        subs = subparsers()
        run = {a.dest: a for a in subs["run"]._actions}
        check = {a.dest: a for a in subs["check"]._actions}
        shared = [
            "model",
            "metric_model",
            "reflection_model",
            "base_url",
            "metric_base_url",
            "reflection_base_url",
            "api_key_env",
            "rpm",
            "tpm",
            "price_input",
            "price_output",
            "simulator",
            "timeout",
            "program_timeout",
            "execution",
            "program_execution",
            "program",
            "artifact",
            "artifact_text",
        ]
        for dest in shared:
            a, b = run[dest], check[dest]
            assert (a.option_strings, a.help, a.default) == (b.option_strings, b.help, b.default)

    def test_check_takes_metric_as_run_spells_it(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`check --metric FILE` works as `run --metric FILE` does."""
        argv = ["check", "--metric", str(JUDGE_METRIC), "--data", str(JUDGE_DATA)]
        assert main([*argv, *ON_SIMULATOR, *INLINE]) == 0
        assert "Contract check passed" in capsys.readouterr().out

    def test_a_missing_key_is_named_before_the_check(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A judge model without its key is a usage error naming --api-key-env."""
        monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
        argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), "--metric-model", "m"]
        assert main([*argv, "--api-key-env", "NO_SUCH_KEY_VAR"]) == 2
        assert "NO_SUCH_KEY_VAR" in capsys.readouterr().err


class TestResumeSkipsTheCheck:
    def test_unchanged_files_skip_the_check_and_say_so(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A resume whose header matches skips the 3-example check and says why; its
        results are whole (every example once)."""
        data = dataset(tmp_path, 6)
        out = tmp_path / "results.jsonl"
        argv = ["run", "--metric", str(JUDGE_METRIC), "--data", str(data), "--output", str(out)]
        argv += [*ON_SIMULATOR, *INLINE]
        assert main(argv) == 0
        lines = out.read_text().splitlines()
        out.write_text("\n".join(lines[:4]) + "\n")  # the header and 3 results: stopped early
        capsys.readouterr()
        assert main([*argv, "--resume"]) == 0
        printed = capsys.readouterr().out
        assert "contract check skipped" in printed and "✓ Metric runs" not in printed
        ids = results_ids(out)
        assert sorted(ids) == sorted(json.loads(r)["id"] for r in data.read_text().splitlines())

    def test_a_forced_resume_checks_again(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """When the metric changed (--force), the check runs again."""
        data = dataset(tmp_path, 4)
        metric = tmp_path / "metric.py"
        shutil.copy(JUDGE_METRIC, metric)
        out = tmp_path / "results.jsonl"
        argv = ["run", "--metric", str(metric), "--data", str(data), "--output", str(out)]
        argv += [*ON_SIMULATOR, *INLINE]
        assert main(argv) == 0
        out.write_text("\n".join(out.read_text().splitlines()[:2]) + "\n")
        metric.write_text(metric.read_text() + "\n# edited\n")
        capsys.readouterr()
        assert main([*argv, "--resume", "--force"]) == 0
        printed = capsys.readouterr().out
        assert "contract check skipped" not in printed and "✓ Metric runs" in printed


# -- every flag a hint names is a flag of the command that prints it ---------------------

_COMMAND_NAMES = tuple(c.name for c in COMMANDS)
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_CLI = ROOT / "evaluator" / "_cli"
#: The modules whose messages reach a user of the command line, by the commands that can
#: print them. `_options.py` is read apart: each struct's own flags and checks.
_PRINTERS = {
    _CLI / "_main.py": ("",),  # the top level's own flags (--version)
    _CLI / "_check.py": ("check",),
    _CLI / "_run.py": ("run",),
    _CLI / "_judges.py": ("judges",),
    _CLI / "_report.py": ("report",),
    _CLI / "_cache.py": ("cache",),
    _CLI / "_simulator.py": ("simulator",),
    _CLI / "_serving.py": ("run", "check"),
    _CLI / "_config.py": ("run", "check", "judges"),
    ROOT / "evaluator" / "_models.py": ("run", "check"),
    ROOT / "evaluator" / "_data" / "_dataset.py": ("run", "check", "judges", "report"),
    ROOT / "evaluator" / "_results_file" / "_store.py": ("run",),
    ROOT / "evaluator" / "_report" / "html" / "_command.py": ("report",),
    ROOT / "evaluator" / "_results_file" / "_load.py": ("report",),
    **{path: ("judges",) for path in (ROOT / "evaluator" / "_judges").glob("*.py")},
}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _texts(node: ast.AST, skip: set[int]) -> list[str]:
    """The text of every string in ``node`` (an f-string's literal parts joined)."""
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.JoinedStr):
            out.append("".join(str(v.value) for v in sub.values if isinstance(v, ast.Constant)))
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and id(sub) not in skip:
            out.append(sub.value)
    return out


def _options_texts() -> dict[str, list[str]]:
    """`_options.py`'s strings by the commands that can print them: a struct's methods,
    and every module function they call, however deep."""
    tree = ast.parse((_CLI / "_options.py").read_text())
    skip = _docstrings(tree)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    by_struct = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    texts: dict[str, list[str]] = {}
    for command in COMMANDS:
        struct = by_struct.get(command.options.__name__)
        if struct is None:  # defined elsewhere (report): read with its module
            continue
        seen: set[str] = set()
        todo: list[ast.AST] = [struct]
        found: list[str] = []
        while todo:
            node = todo.pop()
            found += _texts(node, skip)
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                    name = call.func.id
                    if name in functions and name not in seen:
                        seen.add(name)
                        todo.append(functions[name])
        texts[command.name] = found
    return texts


_QUOTED = re.compile(r"`([^`]*)`")
_QUOTED_COMMAND = re.compile(r"(?:skynet-eval )?(\S+)")


def _unknown(text: str, printers: tuple[str, ...], flags: dict[str, set[str]]) -> list[str]:
    """The flags ``text`` names that a command lacks. A flag quoted with its command
    (`` `run --cache DIR` ``, `` `ray start --head` ``) is that command's (another
    program's: not checked); any other, every printer's."""
    owned: list[tuple[str, tuple[str, ...]]] = []
    for quoted in _QUOTED.findall(text):
        word = _QUOTED_COMMAND.match(quoted)
        if word is not None and not word.group(1).startswith("--"):
            command = word.group(1)
            mine = (command,) if command in _COMMAND_NAMES else ()
            owned += [(flag, mine) for flag in _FLAG.findall(quoted)]
            text = text.replace(f"`{quoted}`", "")
    owned += [(flag, printers) for flag in _FLAG.findall(text)]
    return [
        f"{command}: {flag}"
        for flag, commands in owned
        for command in commands
        if flag not in flags[command] and flag != "--help"
    ]


class TestHintsNameFlagsTheCommandHas:
    def test_every_flag_named_exists_on_its_command(self) -> None:
        """Each `--flag` in a message or help text exists on every command that can
        print it (one quoted with its command, on that command)."""
        flags = {name: flags_of(parser) for name, parser in subparsers().items()}
        flags[""] = flags_of(build_parser())
        wrong: list[str] = []
        for command, texts in _options_texts().items():
            for text in texts:
                wrong += _unknown(text, (command,), flags)
        for path, printers in _PRINTERS.items():
            tree = ast.parse(path.read_text())
            for text in _texts(tree, _docstrings(tree)):
                wrong += _unknown(text, printers, flags)
        assert wrong == []

    def test_the_check_can_fail(self) -> None:
        """The check above reports a flag a command lacks (judges has no --price-input)."""
        flags = {name: flags_of(parser) for name, parser in subparsers().items()}
        assert _unknown("set --price-input/--price-output", ("judges",), flags) == [
            "judges: --price-input",
            "judges: --price-output",
        ]
        assert _unknown("as `skynet-eval run --output` wrote", ("report",), flags) == []
        assert _unknown("as `run --plot` wrote", ("report",), flags) == ["run: --plot"]


class TestUsage:
    @pytest.mark.parametrize("command", ["check", "run", "judges"])
    def test_an_unknown_flag_prints_the_subcommands_usage(
        self, command: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unknown flag on a subcommand: exit 2 and that subcommand's usage line."""
        assert main([command, "--metric", "m.py", "--data", "d.jsonl", "--no-such-flag"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"usage: skynet-eval {command} ")
        assert "unrecognized arguments: --no-such-flag" in err


class TestTryAFewRows:
    def run_argv(self, data: Path, out: Path, *extra: str) -> list[str]:
        return [
            "run",
            "--metric",
            str(JUDGE_METRIC),
            "--data",
            str(data),
            "--output",
            str(out),
            *ON_SIMULATOR,
            *INLINE,
            *extra,
        ]

    def test_limit_runs_the_first_rows_and_the_header_says_so(self, tmp_path: Path) -> None:
        """--limit 3 runs the dataset's first 3 examples; the header records it."""
        out = tmp_path / "r.jsonl"
        assert main(self.run_argv(JUDGE_DATA, out, "--limit", "3")) == 0
        assert results_ids(out) == ["cap01", "cap02", "cap03"]
        dataset_print = headers(out)[0]["dataset"]
        assert isinstance(dataset_print, dict) and dataset_print["selection"] == {"limit": 3}

    def test_a_sample_is_the_same_for_the_same_seed(self, tmp_path: Path) -> None:
        """--sample 4 --seed 5 picks the same 4 examples twice, in the dataset's order;
        another seed picks others."""
        picks = []
        for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
            out = tmp_path / f"{name}.jsonl"
            assert main(self.run_argv(JUDGE_DATA, out, "--sample", "4", "--seed", seed)) == 0
            picks.append(results_ids(out))
        everything = [json.loads(r)["id"] for r in JUDGE_DATA.read_text().splitlines()]
        assert picks[0] == picks[1] and len(picks[0]) == 4 and picks[0] != picks[2]
        assert picks[0] == [i for i in everything if i in picks[0]]

    def test_ids_pick_those_examples(self, tmp_path: Path) -> None:
        """--ids b,a runs exactly those examples."""
        out = tmp_path / "r.jsonl"
        assert main(self.run_argv(JUDGE_DATA, out, "--ids", "cap04,cap02")) == 0
        assert sorted(results_ids(out)) == ["cap02", "cap04"]

    def test_a_misspelt_id_is_named_with_a_guess(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An id no example has: exit 2, the id named, a close id suggested."""
        out = tmp_path / "r.jsonl"
        assert main(self.run_argv(JUDGE_DATA, out, "--ids", "cap01,cpa02")) == 2
        err = capsys.readouterr().err
        assert "--ids names ids no example has: 'cpa02'" in err and "'cap02'" in err
        assert not out.exists()

    def test_seed_without_sample_is_a_usage_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--seed alone says it belongs to --sample."""
        argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), "--seed", "3"]
        assert main(argv) == 2
        assert "--seed is the seed of --sample: add --sample N" in capsys.readouterr().err

    def test_resume_with_another_selection_keeps_the_overlap(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Resuming --limit 3 without a limit keeps the 3, runs the rest, says the
        selection changed and appends a header recording the new one."""
        out = tmp_path / "r.jsonl"
        assert main(self.run_argv(JUDGE_DATA, out, "--limit", "3")) == 0
        capsys.readouterr()
        assert main([*self.run_argv(JUDGE_DATA, out), "--resume"]) == 0
        err = capsys.readouterr().err
        assert "the selection changed: the first 3 examples then, every example now" in err
        everything = [json.loads(r)["id"] for r in JUDGE_DATA.read_text().splitlines()]
        assert sorted(results_ids(out)) == sorted(everything)
        last = headers(out)[-1]
        assert len(headers(out)) == 2 and "another selection" in str(last["note"])
        assert isinstance(last["dataset"], dict) and last["dataset"]["selection"] is None

    def test_the_cache_serves_a_tried_row_to_the_full_run(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A --limit 2 run with --cache, then the whole dataset: the 2 come from the cache."""
        cache = tmp_path / "cache"
        first = self.run_argv(JUDGE_DATA, tmp_path / "a.jsonl", "--limit", "2")
        assert main([*first, "--cache", str(cache), "--json"]) == 0
        capsys.readouterr()
        assert (
            main(
                [*self.run_argv(JUDGE_DATA, tmp_path / "b.jsonl"), "--cache", str(cache), "--json"]
            )
            == 0
        )
        report = json.loads(capsys.readouterr().out)
        n = len(JUDGE_DATA.read_text().splitlines())
        assert report["n"] == n and report["cache"]["cached"] == 2

    @pytest.mark.parametrize("command", ["check", "judges"])
    def test_check_and_judges_take_the_selection(
        self, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`check --ids` checks those examples; `judges --limit 2` judges 2."""
        if command == "check":
            argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), "--ids", "cap05"]
            assert main([*argv, *ON_SIMULATOR, *INLINE, "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["ok"] is True
            return
        out = tmp_path / "judges.json"
        argv = ["judges", "--metric", str(JUDGE_METRIC), "--data", str(JUDGE_DATA)]
        argv += ["--models", "judge-mini", "--simulator", str(SIMULATOR), "--limit", "2"]
        assert main([*argv, "--output", str(out)]) == 0
        assert json.loads(out.read_text())["examples"] == 2


FAILING_METRIC = """
def score(input, output, expected=None):
    if input["x"] % 3 == 0:
        raise ValueError(f"no multiples of three: {input['x']}")
    return 1.0, {"feedback": "ok"}
"""


def failing_run(tmp_path: Path, n: int = 20) -> tuple[Path, Path]:
    """A metric that fails on every x divisible by 3 (but the first three rows pass
    the check), and a dataset of x = 1..n but 3: ``n - 1`` rows."""
    metric = tmp_path / "picky.py"
    metric.write_text(FAILING_METRIC)
    data = tmp_path / "rows.jsonl"
    rows = [{"id": f"r{x}", "input": {"x": x}, "output": "a"} for x in (1, 2, 4, *range(5, n + 1))]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return metric, data


def run_failing(tmp_path: Path, n: int) -> Path:
    """A run of :func:`failing_run`'s files (inline), its results in ``r.jsonl``."""
    metric, data = failing_run(tmp_path, n)
    out = tmp_path / "r.jsonl"
    argv = ["run", "--metric", str(metric), "--data", str(data), "--output", str(out)]
    assert main([*argv, *INLINE]) == 0
    return out


class TestSomethingToLookAt:
    def test_a_run_without_output_keeps_its_results_under_runs(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """No --output: the results go to runs/<UTC time>-<metric>.jsonl in the working
        folder, and the path is printed at the end."""
        metric, data = failing_run(tmp_path, 8)
        monkeypatch.delenv("SKYNET_EVAL_RUNS_DIR")
        monkeypatch.chdir(tmp_path)
        assert main(["run", "--metric", str(metric), "--data", str(data), *INLINE]) == 0
        kept = list((tmp_path / "runs").glob("*-picky.jsonl"))
        assert len(kept) == 1 and re.fullmatch(r"\d{8}T\d{6}Z-picky\.jsonl", kept[0].name)
        printed = capsys.readouterr().out
        assert printed.rstrip().endswith(f"results: {Path('runs') / kept[0].name}")
        assert len(results_ids(kept[0])) == 7

    def test_two_runs_in_one_second_get_two_files(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The default path is claimed when it is chosen: two runs started in the same
        second (two processes, one cache directory, say) never share a results file."""
        import datetime

        from evaluator._cli._options import default_output

        monkeypatch.setenv("SKYNET_EVAL_RUNS_DIR", str(tmp_path / "runs"))
        now = datetime.datetime(2026, 12, 2, 7, 0, 0, tzinfo=datetime.UTC)
        first, second = default_output("m.py", now), default_output("m.py", now)
        assert first != second and Path(first).is_file() and Path(second).is_file()

    def test_with_json_the_default_path_is_said_on_stderr(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--json keeps stdout for the report: the default results path goes to stderr."""
        metric, data = failing_run(tmp_path, 6)
        assert main(["run", "--metric", str(metric), "--data", str(data), *INLINE, "--json"]) == 0
        captured = capsys.readouterr()
        json.loads(captured.out)
        said = [line for line in captured.err.splitlines() if "results: " in line]
        assert len(said) == 1 and Path(said[0].split("results: ")[1]).is_file()

    def test_the_repository_ignores_runs(self) -> None:
        """The checkout's .gitignore keeps runs/ out of version control."""
        assert "/runs/" in (ROOT / ".gitignore").read_text().splitlines()

    def test_the_report_lists_the_first_failures(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The run's terminal report names the first failures (id, kind, message) and
        the command that lists all of them."""
        out = run_failing(tmp_path, 30)
        printed = capsys.readouterr().out
        assert "First 5 of 9 failures" in printed
        assert "r6" in printed and "metric_error" in printed
        assert "no multiples of three: 6" in printed
        assert f"skynet-eval report {out} --failures" in printed

    def test_report_failures_and_csv(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`report --failures` lists every failure; `--csv` writes one row per result,
        with the error's kind and message."""
        out = run_failing(tmp_path, 30)
        capsys.readouterr()
        table = tmp_path / "r.csv"
        assert main(["report", str(out), "--no-html", "--failures", "--csv", str(table)]) == 0
        printed = capsys.readouterr().out
        assert "Failures (9 of 29)" in printed
        assert all(f"no multiples of three: {x}" in printed for x in range(6, 31, 3))
        import csv

        with table.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == 29 and rows[0].keys() >= {"id", "score", "error_kind"}
        failed = {r["id"]: r for r in rows if r["error_kind"]}
        assert sorted(failed) == sorted(f"r{x}" for x in range(6, 31, 3))
        assert failed["r9"]["error_message"].startswith("`score` raised ValueError")

    def test_csv_onto_the_results_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--csv naming the results file itself is a usage error; the file is unchanged."""
        out = run_failing(tmp_path, 8)
        before = out.read_bytes()
        assert main(["report", str(out), "--no-html", "--csv", str(out)]) == 2
        assert "is the RESULTS file itself" in capsys.readouterr().err
        assert out.read_bytes() == before

    def test_report_shows_the_wall_time_the_run_recorded(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The results file ends with the run's wall time and throughput; `report` shows
        them (terminal and page), not "not recorded"."""
        out = run_failing(tmp_path, 12)
        end = json.loads(out.read_text().splitlines()[-1])
        assert end["ended"]["examples"] == 11 and end["ended"]["wall_s"] > 0
        capsys.readouterr()
        page = tmp_path / "r.html"
        assert main(["report", str(out), "--html", str(page)]) == 0
        printed = capsys.readouterr().out
        assert "wall time" in printed and "throughput" in printed
        assert "not recorded" not in page.read_text()
        assert "more header line" not in printed  # the end line is not a second session


PASSING_METRIC = """
def score(input, output, expected=None):
    return (1.0 if output else 0.0), {"feedback": "ok"}
"""


class TestAForgottenReturn:
    def files(self, tmp_path: Path, program: str) -> tuple[Path, Path, Path]:
        metric = tmp_path / "metric.py"
        metric.write_text(PASSING_METRIC)
        prog = tmp_path / "program.py"
        prog.write_text(program)
        data = tmp_path / "data.jsonl"
        data.write_text(
            "".join(json.dumps({"id": f"q{i}", "input": {"x": i}}) + "\n" for i in range(5))
        )
        return metric, prog, data

    def test_a_program_returning_none_is_warned_of(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A program that returns None for every checked example passes the check with
        a warning that names the forgotten `return`."""
        metric, prog, data = self.files(tmp_path, "def run(artifact, input):\n    input['x'] * 2\n")
        argv = ["check", str(metric), "--program", str(prog), "--data", str(data), *INLINE]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert "returned None for all 3 checked examples; did you forget `return`" in printed
        assert main([*argv, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["warnings"] == [
            "the program returned None for all 3 checked examples; did you forget `return` "
            "in `run`?"
        ]

    def test_a_program_that_returns_is_not_warned_of(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A program returning a value gets no warning (the warning can be absent)."""
        metric, prog, data = self.files(tmp_path, "def run(artifact, input):\n    return 1\n")
        argv = ["check", str(metric), "--program", str(prog), "--data", str(data), *INLINE]
        assert main(argv) == 0
        assert "did you forget" not in capsys.readouterr().out

    def test_a_metric_returning_none_is_told_of_return(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A metric that returns None fails Metric return value, naming `return`."""
        metric, _, data = self.files(tmp_path, "")
        metric.write_text("def score(input, output, expected=None):\n    (1.0, {})\n")
        data.write_text(data.read_text().replace("}}", '}, "output": "a"}'))
        assert main(["check", str(metric), "--data", str(data), *INLINE, "--json"]) == 1
        step = next(s for s in json.loads(capsys.readouterr().out)["steps"] if not s["ok"])
        assert step["name"] == "Metric return value"
        assert "returned None, not a pair; did you forget `return`?" in step["message"]

    @pytest.mark.parametrize("command", ["check", "run"])
    def test_a_broken_program_file_is_a_program_step(
        self, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A syntax error in the program file is reported under Program file, with the
        program's path, never as Metric file."""
        metric, prog, data = self.files(tmp_path, "def run(artifact, input):\n    x = 1 +\n")
        if command == "check":
            argv = ["check", str(metric), "--program", str(prog), "--data", str(data)]
        else:
            argv = ["run", "--metric", str(metric), "--program", str(prog), "--data", str(data)]
        assert main([*argv, *INLINE]) == 1
        captured = capsys.readouterr()
        printed = captured.out + captured.err
        assert "Program file" in printed and "Metric file:" not in printed
        assert f"{prog.resolve()}:2" in printed or f"{prog}:2" in printed

    def test_a_program_without_run_is_a_program_file_step(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A program file that defines no `run` fails Program file, after the metric's
        steps passed."""
        metric, prog, data = self.files(tmp_path, "def main(artifact, input):\n    return 1\n")
        argv = ["check", str(metric), "--program", str(prog), "--data", str(data), *INLINE]
        assert main([*argv, "--json"]) == 1
        steps = json.loads(capsys.readouterr().out)["steps"]
        assert [(s["name"], s["ok"]) for s in steps] == [
            ("Metric file", True),
            ("Metric signature", True),
            ("Program file", False),
        ]
        assert "defines no `run`" in steps[-1]["message"]


class TestSmallerEdges:
    def test_version(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--version prints the installed version and exits 0."""
        from importlib.metadata import version

        assert main(["--version"]) == 0
        assert capsys.readouterr().out.strip() == f"skynet-eval {version('skynet-eval')}"

    def test_bare_command_prints_the_help(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`skynet-eval` alone prints the whole help (every command), not one usage line."""
        assert main([]) == 2
        err = capsys.readouterr().err
        assert "usage: skynet-eval" in err
        assert all(c.options.HELP in " ".join(err.split()) for c in COMMANDS)

    def test_one_error_is_singular(self) -> None:
        """The progress line says "1 error", "0 errors", "2 errors"."""
        from evaluator._cli._progress import plural

        assert [plural(n, "error") for n in (0, 1, 2, 1000)] == [
            "0 errors",
            "1 error",
            "2 errors",
            "1,000 errors",
        ]

    @pytest.mark.parametrize("command", ["check", "run", "judges"])
    def test_timeout_zero_says_greater_than_zero(
        self, command: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--timeout 0 is refused as "greater than 0", not "between 0 and 600"."""
        argv = [command, "--metric", str(JUDGE_METRIC), "--data", str(JUDGE_DATA)]
        assert main([*argv, "--timeout", "0"]) == 2
        err = capsys.readouterr().err
        assert "--timeout must be greater than 0 and at most 600 seconds, got 0" in err

    def test_cache_stats_names_the_path_it_looked_at(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`cache stats DIR` on a folder without a cache names the file it looked for."""
        assert main(["cache", "stats", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert str(tmp_path / "results.sqlite3") in err and "`directory`" not in err

    def test_id_col_gives_flat_rows_their_ids(self, tmp_path: Path) -> None:
        """--id-col qid: a CSV's qid column gives the ids (not 0, 1, 2)."""
        data = tmp_path / "flat.csv"
        data.write_text("qid,question,answer,output\nq1,hi,a,a\nq2,yo,b,a\nq3,x,c,c\n")
        metric = tmp_path / "m.py"
        metric.write_text(PASSING_METRIC)
        out = tmp_path / "r.jsonl"
        argv = ["run", "--metric", str(metric), "--data", str(data), "--output", str(out)]
        argv += ["--input-cols", "question", "--output-cols", "answer", "--id-col", "qid"]
        assert main([*argv, *INLINE]) == 0
        assert results_ids(out) == ["q1", "q2", "q3"]
        dataset_print = headers(out)[0]["dataset"]
        assert isinstance(dataset_print, dict) and dataset_print["id_col"] == "qid"

    @pytest.mark.parametrize(
        ("flags", "said"),
        [
            (["--input-cols", "questoin"], "did you mean 'question' for 'questoin'?"),
            (["--input-cols", "question", "--output-cols", "answr"], "'answer' for 'answr'"),
            (["--input-cols", "question", "--id-col", "qdi"], "'qid' for 'qdi'"),
        ],
    )
    def test_a_misspelt_column_gets_a_guess(
        self, flags: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A column no row has is named with the closest one the row has."""
        data = tmp_path / "flat.csv"
        data.write_text("qid,question,answer\nq1,hi,a\n")
        argv = ["check", str(JUDGE_METRIC), "--data", str(data), *flags]
        assert main(argv) == 2
        assert said in capsys.readouterr().err

    @pytest.mark.parametrize(
        ("rows", "flags", "warned"),
        [
            ('{"id": 1, "input": {"q": "a"}, "expected": {"label": "a"}, "output": "a"}', [], True),
            ('{"id": 1, "input": {"q": "a"}, "expected": "a", "output": "a"}', [], False),
            ("q,label,output\na,a,a\n", ["--input-cols", "q"], False),
        ],
        ids=["canonical", "canonical-wrapped", "flat"],
    )
    def test_output_cols_on_canonical_rows_is_warned_of(
        self,
        rows: str,
        flags: list[str],
        warned: bool,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """--output-cols on canonical rows, where it does nothing, is warned of; where it
        wraps a non-object 'expected', or names flat rows' columns, it is not."""
        data = tmp_path / ("d.csv" if flags else "d.jsonl")
        data.write_text(rows + "\n")
        metric = tmp_path / "m.py"
        metric.write_text(PASSING_METRIC)
        argv = ["run", "--metric", str(metric), "--data", str(data), *flags, *INLINE]
        argv += ["--output", str(tmp_path / "r.jsonl"), "--output-cols", "label"]
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert ("--output-cols label did nothing" in err) is warned, err

    def test_a_sleeping_sync_metric_is_not_called_cpu_bound(self, tmp_path: Path) -> None:
        """A plain sync metric that sleeps gets worker processes, and the reason says what
        is known (it calls no model), not that it is CPU-bound."""
        from evaluator import load_metric
        from evaluator._pipeline import choose_execution

        metric = tmp_path / "m.py"
        metric.write_text(
            "import time\n\ndef score(input, output, expected=None):\n"
            "    time.sleep(0.1)\n    return 1.0, {'feedback': ''}\n"
        )
        choice = choose_execution(load_metric(metric), None, option="execution")
        assert choice.kind == "process"
        assert choice.reason == "plain sync function (calls no model)"
        assert "CPU" not in choice.reason

    @pytest.mark.parametrize("with_program", [False, True])
    def test_a_score_only_run_says_a_rewards_speed_and_cost_are_not_measured(
        self, with_program: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A score-only run of a metric that reads measurements says they are not
        measured; with a program, which measures them, it does not."""
        metric = tmp_path / "m.py"
        metric.write_text(
            "from skynet import reward\n\nSPEC = {'weights': {'accuracy': 0.5, 'speed': 0.5, "
            "'cost': 0}, 'accuracy': {}, 'speed': {'reference': 100}, 'cost': {'reference': 1}}"
            "\n\ndef score(input, output, expected=None):\n    return reward(SPEC, 1.0)\n"
        )
        data = tmp_path / "d.jsonl"
        data.write_text('{"id": 1, "input": {"q": "a"}, "output": "a"}\n')
        argv = ["run", "--metric", str(metric), "--data", str(data), *INLINE]
        argv += ["--output", str(tmp_path / "r.jsonl")]
        if with_program:
            program = tmp_path / "p.py"
            program.write_text("def run(artifact, input):\n    return input['q']\n")
            argv += ["--program", str(program), "--program-execution", "inline"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        said = "a score-only run (no --program) measures no program time or cost" in out
        assert said is not with_program, out

    def test_a_cached_runs_headline_costs_are_spent_now(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Run twice with a cache: the second run's judge cost is what it spent now ($0),
        with what its results represent beside it (the first run's spend)."""
        data = dataset(tmp_path, 4)
        argv = ["run", "--metric", str(JUDGE_METRIC), "--data", str(data), *ON_SIMULATOR]
        argv += [*INLINE, "--cache", str(tmp_path / "cache"), "--json"]
        argv += ["--price-input", "1", "--price-output", "1"]
        assert main([*argv, "--output", str(tmp_path / "a.jsonl")]) == 0
        first = json.loads(capsys.readouterr().out)
        spent = first["judge_cost_usd"]
        assert spent > 0
        assert main([*argv, "--output", str(tmp_path / "b.jsonl")]) == 0
        second = json.loads(capsys.readouterr().out)
        assert second["cache"]["cached"] == 4
        assert second["cache"]["judge_cost_spent_usd"] == 0
        import msgspec

        from evaluator import Report
        from evaluator._report import report_rows

        rows = dict(report_rows(msgspec.convert(second, Report)))
        assert rows["judge cost"] == f"$0.000000 spent now (the results represent ${spent:.6f})"

    def test_id_col_needs_flat_rows(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--id-col without --input-cols says it is for flat rows."""
        argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), "--id-col", "qid"]
        assert main(argv) == 2
        assert "--id-col names the id column of flat rows" in capsys.readouterr().err


class TestAKeyErrorOnExpected:
    @pytest.mark.parametrize("execution", ["inline", "async"])
    def test_the_message_names_the_keys_expected_has(
        self, execution: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`expected["answr"]` on an expected of {"answer": ...}: the message names the
        keys `expected` has."""
        data = tmp_path / "flat.csv"
        data.write_text("qid,question,answer,output\nq1,hi,a,a\nq2,yo,b,a\nq3,x,c,c\n")
        metric = tmp_path / "m.py"
        body = 'float(output == expected["answr"]), {"feedback": ""}'
        if execution == "async":
            metric.write_text(
                f"async def score(input, output, expected=None):\n    return {body}\n"
            )
        else:
            metric.write_text(f"def score(input, output, expected=None):\n    return {body}\n")
        argv = ["check", str(metric), "--data", str(data), "--input-cols", "question"]
        argv += ["--output-cols", "answer", "--execution", execution, "--json"]
        assert main(argv) == 1
        step = next(s for s in json.loads(capsys.readouterr().out)["steps"] if not s["ok"])
        assert "KeyError: 'answr'" in step["message"]
        assert step["message"].endswith("`expected` has the keys 'answer'")

    def test_a_key_expected_has_adds_nothing(self) -> None:
        """A KeyError for a key `expected` has (raised elsewhere) gets no such note;
        an example without expected values says so."""
        from evaluator._call import _failures

        assert _failures._expected_keys(KeyError("answer"), {"answer": 1}) == ""
        assert "is None" in _failures._expected_keys(KeyError("answer"), None)


def run_file(folder: Path, body: str) -> Path:
    """A run.toml in ``folder`` beside a copy of the judges example's files."""
    folder.mkdir(parents=True, exist_ok=True)
    for source in (JUDGE_METRIC, JUDGE_DATA, SIMULATOR):
        shutil.copy(source, folder / source.name)
    path = folder / "run.toml"
    path.write_text(body)
    return path


RUN_TOML = """\
metric = "metric.py"
data = "data.jsonl"
metric-model = "judge-mini"
simulator = "simulator.json"
sample = 10
seed = 1
execution = "inline"
"""


class TestAConfigFile:
    def test_every_flag_is_a_key_and_paths_are_the_files(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`run --config run.toml` from another folder: the file's relative paths are
        its own folder's; 10 sampled rows run."""
        config = run_file(tmp_path / "project", RUN_TOML)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        out = tmp_path / "r.jsonl"
        assert main(["run", "--config", str(config), "--output", str(out)]) == 0
        assert len(results_ids(out)) == 10
        dataset_print = headers(out)[0]["dataset"]
        assert isinstance(dataset_print, dict)
        assert dataset_print["path"] == str(tmp_path / "project" / "data.jsonl")
        assert dataset_print["selection"] == {"sample": 10, "seed": 1}

    def test_the_command_line_wins(self, tmp_path: Path) -> None:
        """A flag on the command line overrides the file's key (and a one-of group's
        other members, and --sample's seed)."""
        config = run_file(tmp_path, RUN_TOML)
        out = tmp_path / "r.jsonl"
        assert main(["run", "--config", str(config), "--output", str(out), "--limit", "2"]) == 0
        assert results_ids(out) == ["cap01", "cap02"]

    def test_check_and_judges_read_it_too(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`check --config` and `judges --config` take the same file's keys."""
        config = run_file(tmp_path, RUN_TOML)
        assert main(["check", "--config", str(config), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["ok"] is True
        judges = run_file(
            tmp_path / "j",
            'metric = "metric.py"\ndata = "data.jsonl"\nmodels = "judge-mini,judge-nano"\n'
            'simulator = "simulator.json"\nlimit = 3\noutput = "judges.json"\n',
        )
        assert main(["judges", "--config", str(judges)]) == 0
        assert json.loads((tmp_path / "j" / "judges.json").read_text())["examples"] == 3

    @pytest.mark.parametrize(
        ("line", "said"),
        [
            ('metric-modle = "x"', "run.toml:7: metric-modle: no such key"),
            ('metric-modle = "x"', "did you mean 'metric-model'?"),
            ('timeout = "long"', "run.toml:7: timeout: must be a number, got 'long'"),
            ('json = "yes"', "run.toml:7: json: must be true or false"),
            ("limit = 2.5", "run.toml:7: limit: must be a whole number, got 2.5"),
            ('config = "other.toml"', "run.toml:7: config: a config file cannot name another"),
        ],
    )
    def test_errors_name_file_line_and_key(
        self, line: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A bad key or value: exit 2, one line naming the file, the line and the key."""
        config = run_file(tmp_path, RUN_TOML.replace("sample = 10\nseed = 1\n", "") + "\n" + line)
        assert main(["run", "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1

    def test_a_choice_gets_a_guess(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A value outside a flag's choices names them and the closest."""
        config = run_file(tmp_path, RUN_TOML.replace('"inline"', '"inlin"'))
        assert main(["run", "--config", str(config)]) == 2
        assert "did you mean 'inline'?" in capsys.readouterr().err

    def test_broken_toml_says_where(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A file that is not TOML names itself and the line."""
        config = run_file(tmp_path, RUN_TOML + "metric = \n")
        assert main(["run", "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert f"--config {config}: not TOML" in err and "line 8" in err


class TestDotEnv:
    def test_dotenv_sets_only_what_is_unset(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`.env` sets the variables the environment lacks and never overrides one."""
        from evaluator._cli._config import read_dotenv

        monkeypatch.setenv("FH_SET", "from the environment")
        monkeypatch.delenv("FH_UNSET", raising=False)
        monkeypatch.delenv("FH_QUOTED", raising=False)
        env = tmp_path / ".env"
        env.write_text(
            "# keys\nFH_SET=from the file\nexport FH_UNSET=abc  # a comment\n"
            "FH_QUOTED='a # b'\nnot a line\n"
        )
        try:
            assert read_dotenv(env) == ["FH_UNSET", "FH_QUOTED"]
            assert os.environ["FH_SET"] == "from the environment"
            assert os.environ["FH_UNSET"] == "abc" and os.environ["FH_QUOTED"] == "a # b"
        finally:
            os.environ.pop("FH_UNSET", None)
            os.environ.pop("FH_QUOTED", None)

    def test_check_reads_the_key_from_dotenv(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A key variable in ./.env is there for the key check: no 'not set' error."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("FH_JUDGE_KEY", raising=False)
        (tmp_path / ".env").write_text("FH_JUDGE_KEY=sk-test\n")
        argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), *ON_SIMULATOR, *INLINE]
        try:
            assert main([*argv, "--api-key-env", "FH_JUDGE_KEY", "--json"]) == 0
            assert os.environ["FH_JUDGE_KEY"] == "sk-test"
        finally:
            os.environ.pop("FH_JUDGE_KEY", None)


#: The user's pytest file for their metric, with ``skynet.testing``.
UNIT_TEST = """\
from skynet.testing import score_example


def test_a_pass_scores_one():
    result = score_example("metric.py", "Paris", input={{"question": "?"}}, replies="PASS. Yes.")
    assert result.score == 1.0 and result.feedback == "PASS. Yes."


def test_a_fail_scores_zero():
    assert score_example("metric.py", "Lyon", input={{"question": "?"}}, replies="FAIL.").score == 0


def test_the_broken_row_is_a_metric_error():
    result = score_example("metric.py", "x", input={question!r}, replies="PASS.")
    assert result.error.kind == "metric_error" and "this one is broken" in result.error.message
"""


@pytest.mark.slow
class TestTheFirstHour:
    def test_a_new_users_first_hour(self, tmp_path: Path) -> None:
        """Through the command line as a user runs it (a process, from the project's
        folder): check a judge metric on the simulator, run 10 sampled rows from a
        config file without --output, see the failures, open the report, resume; then
        score the same metric from a library script (the library guide's program) and
        unit-test it with ``skynet.testing`` under pytest."""
        import subprocess
        import sys

        from evaluator._data._dataset import Selection, load_examples

        picked = [e for e in Selection(sample=10, seed=1).select(lambda: load_examples(JUDGE_DATA))]
        failing = picked[3]  # one of the sampled rows fails, past the 3-example check
        project = tmp_path / "project"
        run_file(project, RUN_TOML)
        (project / "metric.py").write_text(
            JUDGE_METRIC.read_text().replace(
                "def score(input, output, expected=None):\n",
                "def score(input, output, expected=None):\n"
                f"    if input == {failing.input!r}:\n"
                "        raise ValueError('this one is broken')\n",
            )
        )
        env = {k: v for k, v in os.environ.items() if k != "SKYNET_EVAL_RUNS_DIR"}
        env["PYTHONPATH"] = str(ROOT)

        def in_project(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                argv,
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )

        def cli(*argv: str) -> subprocess.CompletedProcess[str]:
            return in_project(sys.executable, "-m", "evaluator", *argv)

        checked = cli("check", "--config", "run.toml")
        assert checked.returncode == 0, checked.stderr
        assert "Contract check passed" in checked.stdout

        ran = cli("run", "--config", "run.toml")
        assert ran.returncode == 0, ran.stderr
        kept = ran.stdout.strip().splitlines()[-1].removeprefix("results: ")
        results = project / kept
        assert kept.startswith("runs") and results.is_file()
        assert sorted(results_ids(results)) == sorted(e.id for e in picked)
        assert "Failures" in ran.stdout and failing.id in ran.stdout
        assert "this one is broken" in ran.stdout

        report = cli("report", kept, "--failures")
        assert report.returncode == 0, report.stderr
        assert "Failures (1 of 10)" in report.stdout and "this one is broken" in report.stdout
        page = results.with_suffix(".html")
        assert page.is_file() and "not recorded" not in page.read_text()

        lines = results.read_text().splitlines()
        results.write_text("\n".join(lines[:6]) + "\n")  # stopped after 5 results
        resumed = cli("run", "--config", "run.toml", "--output", kept, "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert "contract check skipped" in resumed.stdout
        assert sorted(results_ids(results)) == sorted(e.id for e in picked)

        # The same metric from a library script: the guide's program on the user's files.
        guide = (ROOT / "docs" / "guide" / "library.md").read_text()
        (program,) = [
            b
            for b in re.findall(r"^```python\n(.*?)^```$", guide, flags=re.M | re.S)
            if "# prints" in b
        ]
        script = program.replace("examples/judges/", "")
        assert script != program
        (project / "library.py").write_text(script)
        scripted = in_project(sys.executable, "library.py")
        assert scripted.returncode == 0, scripted.stderr
        # 40 rows, each with one judge call but the broken one, which raises before it.
        assert re.fullmatch(r"\d+ of 40 passed, 39 judge calls\n", scripted.stdout), scripted.stdout

        # Unit-test the metric with the helper, under pytest, as the user's own test file.
        (project / "test_metric.py").write_text(UNIT_TEST.format(question=failing.input))
        tested = in_project(
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_metric.py"
        )
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "3 passed" in tested.stdout


class TestWhatAStopKept:
    def test_nothing_written_claims_nothing(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A stop before any result was written says nothing was kept."""
        from evaluator._cli._options import DataOptions, RunOptions
        from evaluator._cli._run import _Plan, _say_what_was_kept

        options = RunOptions(metric="m.py", data=DataOptions(path="d.jsonl"), output="r.jsonl")
        _say_what_was_kept(options, _Plan(total=200, first=[]), 0)
        err = capsys.readouterr().err
        assert "nothing was kept" in err and "have results" not in err

    def test_a_default_path_is_named_in_the_resume_hint(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A stopped run without --output says "56 of 200" and to resume with the path
        it chose."""
        from evaluator._cli._options import DataOptions, RunOptions
        from evaluator._cli._run import _Plan, _say_what_was_kept

        options = RunOptions(
            metric="m.py",
            data=DataOptions(path="d.jsonl"),
            output="runs/x-m.jsonl",
            output_defaulted=True,
        )
        _say_what_was_kept(options, _Plan(total=200, first=[]), 56)
        err = capsys.readouterr().err
        assert "56 of 200 examples have results in runs/x-m.jsonl" in err
        assert "--output runs/x-m.jsonl --resume" in err


class TestLitellmNames:
    def test_a_prefixed_judge_is_served_by_its_own_name(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`--metric-model openai/judge-mini` calls `judge-mini` (on the simulator)."""
        argv = ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), *INLINE, "--json"]
        argv += ["--metric-model", "openai/judge-mini", "--simulator", str(SIMULATOR)]
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out)["ok"] is True

    def test_the_provider_gives_the_url_and_the_key_variable(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`groq/...` without --base-url: Groq's URL, and its key variable is the one the
        key check names."""
        from evaluator._cli._main import build_parser
        from evaluator._cli._options import RunOptions

        monkeypatch.delenv("GROQ_API_KEY", raising=False)
        monkeypatch.delenv("GROQ_API_BASE", raising=False)
        argv = ["run", "--metric", str(JUDGE_METRIC), "--data", str(JUDGE_DATA)]
        got = RunOptions.from_args(build_parser().parse_args([*argv, "--model", "groq/llama"]))
        (request,) = got.serving.models
        assert (request.model, request.base_url) == ("llama", "https://api.groq.com/openai/v1")
        assert (
            main(
                ["check", str(JUDGE_METRIC), "--data", str(JUDGE_DATA), "--metric-model", "groq/x"]
            )
            == 2
        )
        assert "GROQ_API_KEY" in capsys.readouterr().err

    def test_a_base_url_keeps_the_name_as_given(self) -> None:
        """With --base-url (an OpenRouter-style server) the name is sent as given."""
        from evaluator._cli._main import build_parser
        from evaluator._cli._options import RunOptions

        argv = ["run", "--metric", str(JUDGE_METRIC), "--data", str(JUDGE_DATA)]
        argv += ["--model", "openai/gpt-4o", "--base-url", "http://127.0.0.1:9/v1"]
        (request,) = RunOptions.from_args(build_parser().parse_args(argv)).serving.models
        assert request.model == "openai/gpt-4o"


class TestTheCheckIsNotInstant:
    def test_throughput_counts_only_what_the_clock_timed(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The check's 3 examples ran before the run's clock: throughput is the other
        examples over the wall time, not all of them."""
        metric, data = failing_run(tmp_path, 12)  # 11 rows
        argv = ["run", "--metric", str(metric), "--data", str(data), *INLINE, "--json"]
        assert main([*argv, "--output", str(tmp_path / "r.jsonl")]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["n"] == 11
        assert report["throughput"] * report["wall_s"] == pytest.approx(8)

    def test_a_run_the_check_covered_has_no_rate(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Three examples, all run by the check: no throughput is claimed, by the run
        or by `report` reading its file."""
        metric, data = failing_run(tmp_path, 4)  # 3 rows: 1, 2, 4
        out = tmp_path / "r.jsonl"
        argv = ["run", "--metric", str(metric), "--data", str(data), *INLINE, "--json"]
        assert main([*argv, "--output", str(out)]) == 0
        assert json.loads(capsys.readouterr().out)["throughput"] is None
        assert main(["report", str(out), "--no-html", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)["summary"]
        assert summary["throughput"] is None and summary["wall_s"] is not None


class TestOneNameForOneFigure:
    def test_run_and_report_name_percentiles_alike(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The run's table and `report`'s name the metric's percentiles the same way."""
        out = run_failing(tmp_path, 8)
        run_text = capsys.readouterr().out
        assert main(["report", str(out), "--no-html"]) == 0
        report_text = capsys.readouterr().out
        label = "metric latency p50 / p95 / p99"
        assert label in run_text and label in report_text
        assert "time p50" not in run_text + report_text
