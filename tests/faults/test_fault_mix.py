"""Faults mixed in at known rates: every example gets exactly one result, of the right kind.

The fault of each example is a function of its id (see ``faultmix.py``); the judge's
faults come from real simulators on 127.0.0.1 through ``skynet.llm``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evaluator._call._results import Result
from evaluator._pipeline import Evaluator
from evaluator._report import Report, ReportBuilder
from tests._helpers import PROCESS

from .faultmix import (
    CI_PLAN,
    MEMORY_LIMIT_MB,
    JudgeFaults,
    Leaks,
    async_metric_source,
    check_results,
    expected_counts,
    make_rows,
    schedule,
    write_files,
)

CLEAN = {"faults": False, "hang_s": 30.0}


def _check_report(report: Report, rows: list[dict[str, Any]], results: list[Result]) -> None:
    counts = expected_counts(rows)
    assert report.n == len(rows)
    assert report.ok == counts.get("ok", 0)
    assert report.errors == {k: v for k, v in counts.items() if k != "ok"}
    assert report.n == report.ok + sum(report.errors.values())
    total = sum(r.score for r in results)
    assert report.mean_score == pytest.approx(total / len(results))


async def _run(
    ev: Evaluator, rows: list[dict[str, Any]], faulty: dict[str, Any]
) -> tuple[list[Result], list[Result], Report]:
    """The fault-free reference run, then the faulty run streamed as the CLI does."""
    clean = await ev.evaluate_many(CLEAN, rows)
    results: list[Result] = []
    builder = ReportBuilder(failure_score=ev.failure_score)
    async with ev.stream(faulty, rows) as stream:
        async for batch in stream.batches():
            results += batch
            builder.add_many(batch)
    return clean, results, builder.build()


@pytest.mark.slow
class TestFaultMix:
    async def test_process_executors(self, tmp_path: Path) -> None:
        """300 examples through worker processes with every fault of the suite (raise,
        hang, os._exit, segfault, memory limit, each invalid return shape, prints, program
        raise and hang, judge 429/500/503/timeout/malformed/drop): one result per example,
        each fault labelled with its kind and reason, ok examples scored as in a
        fault-free run, report counts equal the injected counts, nothing left behind."""
        leaks = Leaks().before()
        rows = make_rows(300, schedule(CI_PLAN))
        program, metric = write_files(tmp_path)
        async with (
            JudgeFaults() as judge,
            Evaluator(
                metric,
                program,
                # 3 s: past the judge's own 1 s timeout on a loaded machine (a parallel
                # suite on 2 cores); each of the 6 hangs costs this once.
                timeout=3.0,
                program_timeout=3.0,
                workers=2,
                execution="process",
                program_execution="process",
                models=judge.models(),
                memory_limit_mb=MEMORY_LIMIT_MB,
            ) as ev,
        ):
            clean, results, report = await _run(ev, rows, {"faults": True, "hang_s": 30.0})
            stats = ev.statistics()
        assert check_results(rows, results, clean) == []
        _check_report(report, rows, results)
        # At least: calls that finished in a worker that then crashed before sending
        # their results back are run again (their results were lost with it).
        judged = sum(1 for r in rows if r["input"]["fault"].startswith("j_"))
        assert stats.models.failed_calls >= judged
        assert stats.metric.crashes >= expected_counts(rows)["worker_crash"]
        assert await leaks.after() == []

    async def test_thread_executors(self, tmp_path: Path) -> None:
        """The faults that do not crash a process, with metric and program in threads:
        same guarantees; a hung call's thread is abandoned and ends by itself, and after
        the run no thread of ours remains (tolerance: the 3.5 s hang plus 5 s)."""
        leaks = Leaks().before()
        rows = make_rows(200, schedule(CI_PLAN, process=False))
        program, metric = write_files(tmp_path)
        async with (
            JudgeFaults() as judge,
            Evaluator(
                metric,
                program,
                timeout=2.0,  # past the judge's own 1 s timeout on a loaded machine
                program_timeout=1.2,
                workers=8,
                execution="thread",
                program_execution="thread",
                models=judge.models(),
            ) as ev,
        ):
            clean, results, report = await _run(ev, rows, {"faults": True, "hang_s": 3.5})
            evaluated = await ev.evaluate({"faults": True, "hang_s": 3.5}, rows)
        assert check_results(rows, results, clean) == []
        _check_report(report, rows, results)
        _check_report(evaluated, rows, results)
        assert await leaks.after(thread_grace_s=8.5) == []

    async def test_async_metric(self, tmp_path: Path) -> None:
        """The same faults with an ``async def`` metric on the loop (allm for the judge):
        a hung call is cancelled at its timeout; same guarantees, no task left behind."""
        leaks = Leaks().before()
        rows = make_rows(200, schedule(CI_PLAN, process=False))
        program, _ = write_files(tmp_path)
        metric = tmp_path / "async_metric.py"
        metric.write_text(async_metric_source())
        async with (
            JudgeFaults() as judge,
            Evaluator(
                metric,
                program,
                # 3 s: far past the judge's own 1 s timeout (j_timeout must end as
                # llm_error), which a loaded machine has delivered past 1.5 s: the call
                # may wait for a place in flight first. The hangs wait concurrently.
                timeout=3.0,
                program_timeout=3.0,
                program_execution="process",
                workers=2,
                models=judge.models(),
            ) as ev,
        ):
            assert ev.metric_execution == "async"
            clean, results, report = await _run(ev, rows, {"faults": True, "hang_s": 30.0})
        assert check_results(rows, results, clean) == []
        _check_report(report, rows, results)
        assert await leaks.after() == []


class TestJudgeAccounting:
    async def test_failed_judge_calls_are_counted(self, tmp_path: Path) -> None:
        """A judge call that fails still shows in the report: the 429s the judge
        answered are counted in ``rate_limited`` even when the call is given up, so the
        report's 429 count matches what the provider sent."""
        period = ["j_429", "j_500", "ok_judge", "ok"]
        rows = make_rows(20, period)
        program, metric = write_files(tmp_path)
        async with (
            JudgeFaults() as judge,
            Evaluator(
                metric,
                program,
                timeout=5.0,
                execution="thread",
                program_execution="thread",
                # No hang among these faults: a timeout a loaded machine cannot reach,
                # so that only the planted faults fail.
                models=judge.models(timeout=10.0),
            ) as ev,
        ):
            report = await ev.evaluate({"faults": True, "hang_s": 1.0}, rows)
            stats = ev.statistics().models
        assert report.errors == {"llm_error": 10}
        assert judge.routed["j_429"] == 5
        assert stats.rate_limited >= 5
        assert report.rate_limited >= 5


PRINTING_METRIC = """
import sys

def score(input, output, expected=None):
    print("noise on stdout from the metric")
    print("noise on stderr from the metric", file=sys.stderr)
    return 1.0, {"feedback": "ok"}
"""


class TestPrintingUserCode:
    @pytest.mark.parametrize("execution", [PROCESS, "thread"])
    def test_json_report_is_the_only_stdout(self, tmp_path: Path, execution: str) -> None:
        """A metric that prints to stdout and stderr does not corrupt ``run --json``:
        stdout is exactly one JSON report (the metric's prints go elsewhere), the run
        is ok and its scores are unaffected."""
        import json
        import os
        import subprocess
        import sys

        metric = tmp_path / "metric.py"
        metric.write_text(PRINTING_METRIC)
        data = tmp_path / "data.jsonl"
        data.write_text(
            "".join(json.dumps({"id": i, "input": {}, "output": "a"}) + "\n" for i in range(5))
        )
        env = dict(os.environ)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "evaluator",
                "run",
                "--metric",
                str(metric),
                "--data",
                str(data),
                "--execution",
                execution,
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["n"] == 5 and report["ok"] == 5 and report["mean_score"] == 1.0
