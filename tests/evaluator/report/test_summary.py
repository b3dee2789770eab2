"""The report, built incrementally from results."""

from __future__ import annotations

import random

import msgspec
import numpy as np
import pytest

from evaluator._call._results import ErrorInfo, Observation, Result, Usage
from evaluator._report import ModelBudget, Report, ReportBuilder, StageExecution, report_rows


def _ok(score: float, ms: float, **kw: object) -> Result:
    return Result(
        example_id=0,
        score=score,
        observation=Observation(duration_ms=ms, queued_ms=ms / 4),
        metric_ms=ms / 10,
        **kw,  # type: ignore[arg-type]
    )


class TestReportBuilder:
    def test_denominators_and_means(self) -> None:
        """Errors count at the failure score in the overall mean and by kind; named
        scores average over the ok examples that returned them."""
        builder = ReportBuilder(failure_score=-1.0)
        builder.add(_ok(1.0, 10, scores={"a": 1.0}))
        builder.add(_ok(0.0, 20, scores={"a": 0.0, "b": 0.5}))
        builder.add(Result(example_id=1, score=-1.0, error=ErrorInfo("metric_timeout", "t")))
        builder.add(Result(example_id=2, score=-1.0, error=ErrorInfo("metric_error", "e")))
        report = builder.build()
        assert (report.n, report.ok) == (4, 2)
        assert report.errors == {"metric_error": 1, "metric_timeout": 1}
        assert report.mean_score == pytest.approx((1.0 + 0.0 - 1.0 - 1.0) / 4)
        assert report.mean_score_ok == pytest.approx(0.5)
        assert report.scores["a"].mean == 0.5 and report.scores["a"].count == 2
        assert report.scores["b"].count == 1
        assert report.program_cost_usd == 0.0 and report.program_cost_measured == 2

    def test_add_many_counts_what_add_counts(self) -> None:
        """Score-only results (counted in place by add_many's hot loop) mixed with
        errors, named scores, cached results, timed programs and judge usage: the report
        is the same, to the last bit, as adding them one by one, timed or not."""
        rng = random.Random(3)
        score_only = Observation(duration_ms=None, cost_usd=None)
        judged = Usage(llm_calls=1, input_tokens=5, cost_usd=0.001)
        results: list[Result] = []
        for i in range(3_000):
            kind = rng.randrange(7)
            score = rng.random()
            if kind == 0:
                results.append(Result(i, -1.0, error=ErrorInfo("metric_error", "e")))
            elif kind == 1:
                results.append(_ok(score, rng.random() * 9))
            elif kind == 2:
                results.append(Result(i, score, scores={"a": score}, observation=score_only))
            elif kind == 3:
                results.append(Result(i, score, observation=score_only, judge=judged))
            elif kind == 4:
                results.append(Result(i, score, observation=score_only, cached=True))
            else:
                results.append(Result(i, score, observation=score_only, metric_ms=0.001 * i))
        for timed in (True, False):
            one, many = ReportBuilder(failure_score=-1.0), ReportBuilder(failure_score=-1.0)
            for result in results:
                one.add(result, timed=timed)
            many.add_many(results[:1_000], timed=timed)
            many.add_many(results[1_000:], timed=timed)
            a, b = one.build(wall_s=2.0), many.build(wall_s=2.0)
            assert msgspec.structs.asdict(a) == msgspec.structs.asdict(b)
            assert a.n == 3_000 and a.mean_score == b.mean_score

    def test_percentiles_are_exact(self) -> None:
        """Latency percentiles are exact: NumPy's linear quantiles of every value."""
        rng = random.Random(7)
        values = [rng.lognormvariate(3, 1) for _ in range(20000)]
        builder = ReportBuilder()
        builder.add_many(_ok(1.0, v) for v in values)
        lat = builder.build().program_latency
        for q, got in ((50, lat.p50_ms), (95, lat.p95_ms), (99, lat.p99_ms)):
            exact = float(np.percentile(values, q))
            assert got == pytest.approx(exact, rel=1e-12)
        assert lat.count == 20000 and lat.max_ms == max(values)

    def test_unmeasured_cost_is_none_with_a_count(self) -> None:
        """One example without a known price makes the program cost None, counted."""
        builder = ReportBuilder()
        builder.add(_ok(1.0, 5))
        builder.add(
            Result(
                example_id=1,
                score=1.0,
                observation=Observation(duration_ms=5, cost_usd=None, llm_calls=1),
                judge=Usage(llm_calls=2, cost_usd=0.002, rate_limited=1),
            )
        )
        report = builder.build()
        assert report.program_cost_usd is None and report.program_cost_unmeasured == 1
        assert report.judge_cost_usd == pytest.approx(0.002)
        assert report.judge_llm_calls == 2 and report.rate_limited == 1

    def test_score_only_has_no_program_cost(self) -> None:
        """Without a program there is no program time or cost to report."""
        builder = ReportBuilder()
        builder.add(
            Result(
                example_id=0, score=1.0, observation=Observation(duration_ms=None, cost_usd=None)
            )
        )
        report = builder.build()
        assert report.program_cost_usd is None and report.program_latency.count == 0

    def test_report_encodes_and_renders(self) -> None:
        """The report round-trips through JSON and renders as labelled rows."""
        builder = ReportBuilder()
        builder.add(_ok(1.0, 3))
        builder.add(Result(example_id=1, score=0.0, error=ErrorInfo("worker_crash", "c")))
        report = builder.build()
        assert msgspec.json.decode(msgspec.json.encode(report), type=Report) == report
        labels = dict(report_rows(report))
        assert labels["error: worker_crash"] == "1 of 2"


class TestHowItRan:
    def test_executors_and_budgets_in_rows_and_json(self) -> None:
        """The report carries each stage's executor with its reason and each model's
        budget with its source; the rows name them, an option as its reader knows it."""
        executors = (
            StageExecution(
                stage="run",
                kind="thread",
                parallelism=64,
                source="automatic",
                reason="calls openai (model-bound)",
            ),
            StageExecution(
                stage="score",
                kind="process",
                parallelism=3,
                source="option",
                reason="option `execution`",
                option="execution",
            ),
        )
        budgets = (
            ModelBudget(
                model="gpt-x",
                roles=("program",),
                max_concurrency=64,
                rpm=600.0,
                tpm=None,
                source="configured",
            ),
        )
        report = ReportBuilder().build(executors=executors, model_budgets=budgets)
        rows = dict(report_rows(report, option_flags={"execution": "--execution"}))
        assert rows["program executor"] == "thread x64: calls openai (model-bound)"
        assert rows["metric executor"] == "process x3: option --execution"
        assert rows["model budget: gpt-x (program)"] == (
            "64 in flight, 600 rpm, no tpm limit (configured)"
        )
        assert dict(report_rows(report))["metric executor"] == "process x3: option `execution`"
        decoded = msgspec.json.decode(msgspec.json.encode(report), type=Report)
        assert decoded.executors == executors and decoded.model_budgets == budgets

    def test_model_budget_row_shows_hedging(self) -> None:
        """A hedged model's budget row says the hedges sent and won, the extra calls and
        the extra spend, unmeasured with the reason when a copy was cancelled in flight."""
        from llm_client import HedgeStatistics

        hedging = HedgeStatistics(
            quantile=0.95,
            threshold_s=0.2,
            samples=200,
            calls=400,
            hedges_sent=12,
            hedges_won=9,
            refused=3,
            extra_cost_usd=None,
            extra_cost_note="12 copies cancelled in flight",
        )
        budget = ModelBudget(
            model="judge-1",
            roles=("judge",),
            max_concurrency=64,
            rpm=None,
            tpm=None,
            source="none",
            hedging=hedging,
        )
        report = ReportBuilder().build(model_budgets=(budget,))
        row = dict(report_rows(report))["model budget: judge-1 (judge)"]
        assert row == (
            "64 in flight, no rpm/tpm limit (none); hedged past p95: 12 of 400 calls "
            "(+3.0% calls), 9 won, 3 refused by the rate budget; extra spend unmeasured: "
            "12 copies cancelled in flight"
        )
        decoded = msgspec.json.decode(msgspec.json.encode(report), type=Report)
        assert decoded.model_budgets == (budget,)
