"""`skynet-eval run`: the main command, its exit codes, --output and --resume, and the
product page's judge and reward metrics, verbatim, through it."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main
from llm_client import Simulator, SimulatorConfig
from tests._helpers import PROCESS, result_rows

ROOT = Path(__file__).resolve().parents[3]
CLASSIFY = ROOT / "examples" / "classify"
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
JUDGES = ROOT / "examples" / "judges"

SLOW_METRIC = """
import time
EXECUTION = "inline"

def score(input, output, expected=None):
    time.sleep(0.004)
    return float(output == expected["label"]), {"feedback": "ok"}
"""


def _dataset(path: Path, n: int) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            row = {"id": f"r{i}", "input": {"n": i}, "expected": {"label": "a"}, "output": "a"}
            fh.write(json.dumps(row) + "\n")
    return path


HEADER_KEY = "skynet_eval_results"


def lines_of(path: Path) -> list[dict[str, Any]]:
    """Every line of a results file, headers included."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def results(path: Path) -> list[dict[str, Any]]:
    """The result lines of a results file (header lines skipped), every field filled."""
    return result_rows(path)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evaluator", "run", *args]


class TestRun:
    def test_readme_command_on_the_classify_example(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The README's main command runs the shipped example and exits 0 (accuracy 0.6)."""
        code = main(
            [
                "run",
                "--metric", str(CLASSIFY / "metric.py"),
                "--program", str(CLASSIFY / "program.py"),
                "--artifact", str(CLASSIFY / "prompt.txt"),
                "--data", str(CLASSIFY / "data.jsonl"),
                "--json",
            ]
        )  # fmt: skip
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        assert report["n"] == 30 and report["ok"] == 30
        assert report["mean_score"] == pytest.approx(0.6)

    def test_readme_command_on_the_openai_example(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The README's own-SDK command: the openai client's calls are served by the
        simulator and metered, the program's cost measured."""
        monkeypatch.setenv("OPENAI_API_KEY", "sk-simulated")
        example = ROOT / "examples" / "openai"
        code = main(
            [
                "run",
                "--program", str(example / "program.py"),
                "--metric", str(example / "metric.py"),
                "--artifact", str(example / "prompt.txt"),
                "--data", str(example / "data.jsonl"),
                "--simulator", str(example / "simulator.json"),
                "--json",
            ]
        )  # fmt: skip
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        assert report["n"] == report["ok"] == 24
        assert report["program_llm_calls"] == 24
        assert report["program_cost_usd"] > 0 and report["program_cost_unmeasured"] == 0

    def test_table_and_output_file(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without --json the report is a table; --output gets one line per example."""
        out = tmp_path / "results.jsonl"
        code = main(
            [
                "run",
                "--metric", str(CLASSIFY / "metric.py"),
                "--program", str(CLASSIFY / "program.py"),
                "--artifact-text", "refund -> billing",
                "--data", str(CLASSIFY / "data.jsonl"),
                "--output", str(out),
                "--execution", "inline",
                "--program-execution", "inline",
            ]
        )  # fmt: skip
        assert code == 0
        text = capsys.readouterr().out
        assert "Metric return value" in text and "mean score" in text
        header, *rows, end = lines_of(out)
        assert header[HEADER_KEY] == 1 and header["metric"]["path"] == str(CLASSIFY / "metric.py")
        assert sorted(row["example_id"] for row in rows) == [f"t{i:02d}" for i in range(1, 31)]
        assert end[HEADER_KEY] == 1 and end["ended"]["examples"] == 30  # the run's wall time

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ["--timeout", "900"],
                "--timeout must be greater than 0 and at most 600 seconds, got 900",
            ),
            (["--data", "nope.jsonl"], "nope.jsonl: no such file"),
            (["--metric", "missing.py"], "--metric: no such file 'missing.py'"),
            (["--resume"], "--resume needs --output"),
        ],
    )
    def test_usage_errors_exit_2_with_one_line(
        self, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A user's mistake is one clear line on stderr and exit code 2, no traceback."""
        base = {
            "--metric": str(CLASSIFY / "metric.py"),
            "--data": str(CLASSIFY / "data.jsonl"),
        }
        for flag, value in zip(args[::2], args[1::2], strict=False):
            base[flag] = value
        argv = ["run"]
        for flag, value in base.items():
            argv += [flag, value]
        if args == ["--resume"]:
            argv.append("--resume")
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1

    def test_failed_contract_check_exits_1(self, tmp_path: Path) -> None:
        """A metric that breaks the contract stops the run before it starts (exit 1)."""
        metric = tmp_path / "bad.py"
        metric.write_text("def score(i, o, e=None):\n    return 0.5\n")
        data = _dataset(tmp_path / "d.jsonl", 5)
        out = tmp_path / "r.jsonl"
        argv = ["run", "--metric", str(metric), "--data", str(data), "--output", str(out)]
        code = main([*argv, "--execution", "inline"])
        assert code == 1
        assert not out.exists()  # nothing written: no file left behind


class TestResume:
    @pytest.mark.process
    def test_kill_then_resume_gives_each_id_once(self, tmp_path: Path) -> None:
        """After SIGKILL mid-run, --resume completes the file: every id exactly once, and
        the lines written before the kill are kept as they were (none redone)."""
        metric = tmp_path / "slow.py"
        metric.write_text(textwrap.dedent(SLOW_METRIC))
        data = _dataset(tmp_path / "d.jsonl", 600)
        out = tmp_path / "r.jsonl"
        args = _cli("--metric", str(metric), "--data", str(data), "--output", str(out))
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if out.exists() and out.read_bytes().count(b"\n") >= 100:
                    break
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(10)
        kept = out.read_bytes()
        whole = kept[: kept.rfind(b"\n") + 1]
        assert 100 <= whole.count(b"\n") < 600
        out.write_bytes(whole + b'{"example_id": "r599", "sc')  # a torn last line as well
        resumed = subprocess.run(
            [*args, "--resume", "--json"], capture_output=True, text=True, timeout=90
        )
        assert resumed.returncode == 0, resumed.stderr
        final = out.read_bytes()
        assert final.startswith(whole)
        ids = [row["example_id"] for row in results(out)]
        assert sorted(ids) == sorted(f"r{i}" for i in range(600))
        report = json.loads(resumed.stdout)
        assert report["n"] == 600 and report["resumed"] == whole.count(b"\n") - 1  # a header
        assert "incomplete last line" in resumed.stderr

    def test_existing_output_needs_resume(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An --output that already holds results is not overwritten without --resume."""
        data = _dataset(tmp_path / "d.jsonl", 5)
        out = tmp_path / "r.jsonl"
        argv = ["run", "--metric", str(CLASSIFY / "metric.py"), "--data", str(data)]
        argv += ["--execution", "inline"]
        assert main([*argv, "--output", str(out), "--json"]) == 0
        capsys.readouterr()
        before = out.read_bytes()
        assert main([*argv, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert "already holds 5 result(s); resume to go on from them (--resume;" in err
        assert out.read_bytes() == before

    @pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
    def test_ctrl_c_prints_the_partial_report_and_exits_130(self, tmp_path: Path) -> None:
        """SIGINT mid-run: the report of what was done is printed (and, with --report,
        written as a page marked interrupted), results kept, exit 130."""
        metric = tmp_path / "slow.py"
        metric.write_text(textwrap.dedent(SLOW_METRIC))
        data = _dataset(tmp_path / "d.jsonl", 3000)
        out = tmp_path / "r.jsonl"
        page = tmp_path / "page.html"
        argv = ["--metric", str(metric), "--data", str(data), "--output", str(out), "--json"]
        proc = subprocess.Popen(
            _cli(*argv, "--report", str(page)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and out.read_bytes().count(b"\n") >= 51:  # a header, 50 results
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 130, stderr
        report = json.loads(stdout)
        lines = results(out)
        assert report["n"] == len(lines) and 50 <= len(lines) < 3000
        assert "interrupted" in stderr
        assert f"stopped: {report['n']:,} of 3,000 examples have results in {out}" in stderr
        assert "run the same command with --resume" in stderr
        assert "interrupted" in page.read_text()


class TestJudgeMetric:
    @pytest.mark.parametrize("execution", ["thread", PROCESS])
    def test_page_judge_on_the_simulator(self, tmp_path: Path, execution: str) -> None:
        """The page's judge runs unchanged in threads (its default) and forced into worker
        processes (calls relayed to the engine): same verdicts, one metered call each."""
        out = tmp_path / "r.jsonl"
        args = [
            "run",
            "--metric",
            str(JUDGE),
            "--data",
            str(JUDGES / "data.jsonl"),
            "--metric-model",
            "judge-mini",
            "--simulator",
            str(JUDGES / "simulator.json"),
            "--price-input",
            "0.15",
            "--price-output",
            "0.6",
            "--output",
            str(out),
            "--json",
        ]
        if execution == "process":
            args += ["--execution", "process"]
        assert main(args) == 0
        rows = results(out)
        assert len(rows) == 40 and all(r["error"] is None for r in rows)
        assert all(r["judge"]["llm_calls"] == 1 and r["judge"]["cost_usd"] > 0 for r in rows)
        assert {r["score"] for r in rows} == {0.0, 1.0}
        assert all(r["feedback"].startswith(("PASS", "FAIL")) for r in rows)

    @pytest.mark.slow  # a CLI run against a heavy-tailed simulator
    def test_hedge_on_the_metric_model(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--hedge Q against a simulator with a heavy tail: the model budget row shows the
        hedges, each hedged example counts two calls, and its cost is unmeasured with the
        reason when a copy was cancelled in flight (it may be billed), never a partial sum."""
        sim = tmp_path / "sim.json"
        sim.write_text(
            json.dumps({"seed": 5, "latency_ms": 20, "tail_share": 0.3, "tail_factor": 20})
        )
        out = tmp_path / "r.jsonl"
        args = [
            "run", "--metric", str(JUDGE), "--data", str(JUDGES / "data.jsonl"),
            "--metric-model", "judge-1", "--simulator", str(sim), "--hedge", "0.6",
            "--price-input", "0.15", "--price-output", "0.6", "--concurrency", "1",
            "--output", str(out),
        ]  # fmt: skip
        assert main(args) == 0
        text = capsys.readouterr().out
        assert "hedged past p60:" in text
        rows = results(out)
        assert len(rows) == 40 and all(r["error"] is None for r in rows)
        hedged = [r for r in rows if r["judge"]["llm_calls"] == 2]
        assert hedged, "no call was hedged"
        assert all(r["judge"]["llm_calls"] == 1 for r in rows[:20])  # the ring filling
        for row in hedged:  # measured only when both copies replied (a rare tie)
            judge = row["judge"]
            if judge["cost_usd"] is None:
                assert any("hedged copy was cancelled" in n for n in judge["notes"])
            else:
                assert judge["cost_usd"] > 0
        assert any(r["judge"]["cost_usd"] is None for r in hedged)

    @pytest.mark.process
    def test_thread_and_process_agree(self, tmp_path: Path) -> None:
        """Deterministic replies: the same verdicts whichever executor runs the judge."""
        got = {}
        for execution in ("thread", "process"):
            out = tmp_path / f"{execution}.jsonl"
            assert (
                main(
                    [
                        "run",
                        "--metric",
                        str(JUDGE),
                        "--data",
                        str(JUDGES / "data.jsonl"),
                        "--metric-model",
                        "judge-mini",
                        "--simulator",
                        str(JUDGES / "simulator.json"),
                        "--execution",
                        execution,
                        "--output",
                        str(out),
                        "--json",
                    ]
                )
                == 0
            )
            got[execution] = {r["example_id"]: r["score"] for r in results(out)}
        assert got["thread"] == got["process"]

    def test_unknown_price_is_unmeasured(self, tmp_path: Path) -> None:
        """A judge model with no known price leaves the judge cost None, with the reason."""
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(JUDGE),
                    "--data",
                    str(JUDGES / "data.jsonl"),
                    "--metric-model",
                    "judge-mini",
                    "--simulator",
                    str(JUDGES / "simulator.json"),
                    "--output",
                    str(out),
                    "--json",
                ]
            )
            == 0
        )
        rows = results(out)
        assert all(r["judge"]["cost_usd"] is None for r in rows)
        assert all(any("judge-mini" in n for n in r["judge"]["notes"]) for r in rows)

    def test_no_model_is_a_clear_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The judge without any model configured: each example's error names the option."""
        out = tmp_path / "r.jsonl"
        code = main(
            [
                "run",
                "--metric",
                str(JUDGE),
                "--data",
                str(JUDGES / "data.jsonl"),
                "--output",
                str(out),
                "--json",
            ]
        )
        assert code == 1  # the contract check's Metric runs step fails
        assert "--metric-model" in capsys.readouterr().err


class TestRewardMetric:
    def test_page_reward_through_run(self, tmp_path: Path) -> None:
        """The page's reward example runs unchanged with a program whose time is controlled:
        speed = r/(r + ms) from the measured time, cost 0 gives a cost component of 1."""
        program = tmp_path / "program.py"
        program.write_text(
            textwrap.dedent("""
            import time
            def run(artifact, input):
                time.sleep(0.05)
                return "billing"
        """)
        )
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(CLASSIFY / "reward_metric.py"),
                    "--program",
                    str(program),
                    "--data",
                    str(CLASSIFY / "data.jsonl"),
                    "--output",
                    str(out),
                    "--json",
                    "--execution",
                    "inline",
                    "--program-execution",
                    "thread",
                ]
            )
            == 0
        )
        rows = results(out)
        assert len(rows) == 30
        for r in rows:
            obs = r["observation"]
            own = obs["duration_ms"] - obs["queued_ms"]
            assert 50 <= own < 2000  # slept 50 ms; generous guard for a loaded machine
            assert r["scores"]["speed"] == pytest.approx(2000 / (2000 + own), rel=1e-6)
            assert r["scores"]["cost"] == 1.0
            accuracy = r["scores"]["accuracy"]
            assert accuracy in (0.0, 1.0)
            want = 0.7 * accuracy + 0.2 * r["scores"]["speed"] + 0.1 * 1.0
            assert r["score"] == pytest.approx(want, rel=1e-9)
            assert "speed" in r["feedback"].lower() and "cost" in r["feedback"].lower()

    def test_score_only_has_no_speed(self, tmp_path: Path) -> None:
        """Score-only, time is not measured: speed is 0 and the feedback says why."""
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(ROOT / "examples" / "metrics" / "reward_blend.py"),
                    "--data",
                    str(ROOT / "examples" / "metrics" / "labels.jsonl"),
                    "--output",
                    str(out),
                    "--json",
                    "--execution",
                    "inline",
                ]
            )
            == 0
        )
        for r in results(out):
            assert r["scores"]["speed"] == 0.0
            assert "not measured" in r["feedback"]


class TestCheckResultsKept:
    def test_check_examples_are_not_run_twice(self, tmp_path: Path) -> None:
        """The contract check's three examples are the run's own results: each example's
        metric runs once, and each id is in the results file once."""
        calls = tmp_path / "calls.txt"
        metric = tmp_path / "metric.py"
        metric.write_text(
            textwrap.dedent(f"""
            EXECUTION = "inline"
            def score(input, output, expected=None):
                with open({str(calls)!r}, "a") as fh:
                    fh.write(str(input["n"]) + "\\n")
                return 1.0, {{"feedback": "ok"}}
        """)
        )
        data = tmp_path / "d.jsonl"
        data.write_text(
            "".join(json.dumps({"id": i, "input": {"n": i}, "output": i}) + "\n" for i in range(7))
        )
        out = tmp_path / "r.jsonl"
        assert (
            main(
                [
                    "run",
                    "--metric",
                    str(metric),
                    "--data",
                    str(data),
                    "--output",
                    str(out),
                    "--json",
                ]
            )
            == 0
        )
        assert sorted(int(x) for x in calls.read_text().split()) == list(range(7))
        assert sorted(r["example_id"] for r in results(out)) == list(range(7))

    def test_the_judge_is_asked_once_per_example(self, tmp_path: Path) -> None:
        """A judge metric on N examples makes N requests to the server, not N + 3: the
        contract check's calls are the run's own."""
        data = tmp_path / "d.jsonl"
        data.write_text(
            "".join(
                json.dumps({"id": i, "input": {"question": f"q{i}"}, "output": "a"}) + "\n"
                for i in range(10)
            )
        )
        out = tmp_path / "r.jsonl"
        config = SimulatorConfig(latency_ms=1)
        with Simulator(config).running_in_thread() as sim:
            argv = [
                "run", "--metric", str(JUDGE), "--data", str(data), "--output", str(out),
                "--metric-model", "judge-1", "--metric-base-url", sim.base_url,
                "--api-key-env", "none", "--json",
            ]  # fmt: skip
            assert main(argv) == 0
            requests = sim.statistics().requests
        rows = results(out)
        assert sorted(r["example_id"] for r in rows) == list(range(10))
        assert all(r["error"] is None and r["judge"]["llm_calls"] == 1 for r in rows)
        assert requests == 10


class TestDatasetRead:
    def test_the_dataset_is_opened_once(self, tmp_path: Path, opens_of: Any) -> None:
        """A run reads its dataset once: the rows it checks, counts and fingerprints
        before it starts are the ones it evaluates (no second read), and the header's
        digest is the file's."""
        data = _dataset(tmp_path / "d.jsonl", 2_000)
        out = tmp_path / "r.jsonl"
        metric = tmp_path / "m.py"
        metric.write_text(INLINE_METRIC)
        opens = opens_of(data)
        argv = ["run", "--metric", str(metric), "--data", str(data), "--output", str(out)]
        assert main([*argv, "--json"]) == 0
        assert len(opens) == 1
        header = lines_of(out)[0]
        assert header["dataset"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
        assert sorted(r["example_id"] for r in results(out)) == sorted(
            f"r{i}" for i in range(2_000)
        )

    def test_a_row_nested_too_deep_is_refused_before_the_run(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A row nested past the limit (late in the file) stops the run before any
        example runs, naming file:line; no results file is left behind."""
        data = _dataset(tmp_path / "d.jsonl", 50)
        with data.open("a") as fh:
            fh.write('{"id": "deep", "input": {"n": ' + "[" * 300 + "]" * 300 + "}}\n")
        out = tmp_path / "r.jsonl"
        metric = tmp_path / "m.py"
        metric.write_text(INLINE_METRIC)
        argv = ["run", "--metric", str(metric), "--data", str(data), "--output", str(out)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{data}:51:" in err and "nested more than 200 levels" in err
        assert not out.exists()


INLINE_METRIC = """
EXECUTION = "inline"

def score(input, output, expected=None):
    return float(output == "a"), {"feedback": "ok"}
"""

INLINE_PROGRAM = """
EXECUTION = "inline"

def run(artifact, input):
    return "a"
"""


def _files(tmp_path: Path, n: int = 6) -> dict[str, Path]:
    """A metric, a program, an artifact and a dataset, each in its own file."""
    paths = {
        "metric": tmp_path / "metric.py",
        "program": tmp_path / "program.py",
        "artifact": tmp_path / "prompt.txt",
    }
    paths["metric"].write_text(textwrap.dedent(INLINE_METRIC))
    paths["program"].write_text(textwrap.dedent(INLINE_PROGRAM))
    paths["artifact"].write_text("Answer a.\n")
    paths["data"] = _dataset(tmp_path / "d.jsonl", n)
    return paths


def _run_argv(files: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--metric", str(files["metric"]),
        "--program", str(files["program"]),
        "--artifact", str(files["artifact"]),
        "--data", str(files["data"]),
        "--output", str(out),
        *extra,
    ]  # fmt: skip


class TestResumeChecks:
    @pytest.mark.parametrize("part", ["metric", "program", "artifact", "data"])
    def test_results_made_with_other_files_are_refused_unless_forced(
        self, tmp_path: Path, part: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--resume after the metric, program, artifact or dataset changed: exit 2 naming
        what changed, the file unchanged; with --force the results are kept (not
        recomputed), the warning says so, a second header marks where the new ones begin."""
        files = _files(tmp_path)
        out = tmp_path / "r.jsonl"
        assert main(_run_argv(files, out, "--json")) == 0
        if part == "data":
            _dataset(files["data"], 8)  # two more rows: another dataset at the same path
        else:
            files[part].write_text(files[part].read_text() + "\n# edited\n")
        capsys.readouterr()
        before = out.read_bytes()
        assert main(_run_argv(files, out, "--resume")) == 2
        err = capsys.readouterr().err
        label = "dataset" if part == "data" else part
        assert f"the {label} changed" in err and "--force" in err, err
        assert len(err.strip().splitlines()) == 1 and out.read_bytes() == before
        out.write_bytes(b"".join(before.splitlines(keepends=True)[:5]))  # header + 4 results
        assert main(_run_argv(files, out, "--resume", "--force", "--json")) == 0
        captured = capsys.readouterr()
        assert "resuming anyway (forced): kept 4 result(s)" in captured.err
        report = json.loads(captured.out)
        assert report["resumed"] == 4 and report["n"] == (8 if part == "data" else 6)
        lines = lines_of(out)
        assert HEADER_KEY in lines[0] and HEADER_KEY in lines[5]  # the new results' header
        assert "forced resume" in lines[5]["note"] and len(results(out)) == report["n"]

    def test_foreign_ids_and_duplicates_are_never_counted(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A file (without a header, as before fingerprints) holding each of 5 ids twice
        and 10 ids of another dataset: the resume counts 5 (never "35/20 done"), runs the
        other 15 and says what it ignored; the lines it ignored stay in the file."""
        files = _files(tmp_path, n=20)
        out = tmp_path / "r.jsonl"
        rows = [{"example_id": f"r{i}", "score": 1.0} for i in range(5)] * 2
        rows += [{"example_id": f"other{i}", "score": 0.0} for i in range(10)]
        out.write_text("".join(json.dumps(row) + "\n" for row in rows))
        assert main(_run_argv(files, out, "--resume", "--json")) == 0
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        assert report["n"] == 20 and report["resumed"] == 5
        assert "ignored 10 result line(s) for ids that are not in the dataset" in captured.err
        assert "ignored 5 repeated result line(s)" in captured.err
        assert "has no header" in captured.err
        kept = Counter(row["example_id"] for row in results(out))
        assert all(kept[f"r{i}"] == (2 if i < 5 else 1) for i in range(20))
        assert sum(kept[f"other{i}"] for i in range(10)) == 10

    def test_a_second_writer_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """While another writer holds --output (its lock), a run on it stops with one line
        before its contract check; the file is not touched."""
        from evaluator import open_results

        files = _files(tmp_path)
        out = tmp_path / "r.jsonl"
        writer, _ = open_results(out, fingerprints=None)
        with writer:
            for extra in ((), ("--resume",)):
                assert main(_run_argv(files, out, *extra)) == 2
                err = capsys.readouterr().err
                assert "another skynet-eval run is writing this results file" in err
                assert "Metric file" not in err and out.read_bytes() == b""

    def test_bad_output_stops_before_the_contract_check(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--output under a regular file: one line, exit 2, and the metric never ran (not
        even imported)."""
        marker = tmp_path / "imported"
        files = _files(tmp_path)
        files["metric"].write_text(
            f"open({str(marker)!r}, 'w').close()\n" + textwrap.dedent(INLINE_METRIC)
        )
        assert main(_run_argv(files, files["data"] / "r.jsonl")) == 2
        err = capsys.readouterr().err
        assert "is a file, not a directory" in err and "Traceback" not in err
        assert not marker.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE")
class TestWriteFailure:
    def test_a_file_that_cannot_grow_stops_the_run_with_its_report(self, tmp_path: Path) -> None:
        """The results file hits the file size limit mid-run (EFBIG): exit 1, the report
        of the results written, the error with the counts and how to resume, no
        traceback, whole lines only; --resume then finishes with each id once."""
        import resource

        files = _files(tmp_path, n=400)
        out = tmp_path / "r.jsonl"
        argv = [sys.executable, "-m", "evaluator", *_run_argv(files, out, "--json")]
        limit = 20_000

        def small_files() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            preexec_fn=small_files,  # only sets a limit, between fork and exec
        )
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert "could not write to the results file" in done.stderr and "--resume" in done.stderr
        assert out.read_bytes().endswith(b"\n") and out.stat().st_size <= limit
        written = results(out)
        assert 0 < len(written) < 400
        assert json.loads(done.stdout)["n"] == len(written)
        again = subprocess.run(
            [*argv, "--resume"], capture_output=True, text=True, timeout=120, env=env
        )
        assert again.returncode == 0, again.stderr
        assert sorted(r["example_id"] for r in results(out)) == sorted(f"r{i}" for i in range(400))


class TestStoredChanges:
    def test_values_json_cannot_hold_are_stored_changed_with_a_warning(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A program returning a complex number and an object of its own class: the run
        completes, every example has its line, and one warning names the changes."""
        files = _files(tmp_path)
        files["program"].write_text(
            textwrap.dedent("""
            EXECUTION = "inline"

            class Answer:
                pass

            def run(artifact, input):
                return [complex(1, input["n"]), Answer()]
            """)
        )
        assert main(_run_argv(files, tmp_path / "r.jsonl", "--json")) == 0
        err = capsys.readouterr().err
        assert "value(s) could not be stored in" in err and "return JSON-compatible" in err
        assert "(and " in err  # 12 changes, 3 shown
        assert len(results(tmp_path / "r.jsonl")) == 6


class TestHtmlReport:
    @pytest.mark.parametrize("with_output", [True, False])
    def test_report_flag_writes_the_page(
        self, tmp_path: Path, with_output: bool, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--report OUT.html writes the run's page, from --output or, without it, from the
        results the run kept; the path is printed."""
        page = tmp_path / "page.html"
        argv = [
            "run",
            "--metric", str(CLASSIFY / "metric.py"),
            "--program", str(CLASSIFY / "program.py"),
            "--artifact", str(CLASSIFY / "prompt.txt"),
            "--data", str(CLASSIFY / "data.jsonl"),
            "--execution", "inline",
            "--program-execution", "inline",
            "--report", str(page),
        ]  # fmt: skip
        if with_output:
            argv += ["--output", str(tmp_path / "r.jsonl")]
        assert main(argv) == 0
        assert f"report: {page}" in capsys.readouterr().out
        html = page.read_text()
        assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
        assert "0.6000" in html and "throughput" in html  # this run's mean, and its wall time
