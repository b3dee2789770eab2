"""The report's table rows: one builder for ``run``'s rows and ``skynet-eval report``'s."""

from __future__ import annotations

import msgspec

from evaluator._report._stats import offline_report, summarize, summary_of
from evaluator._report._terminal import report_rows, summary_rows
from llm_client import TokenUsage
from tests.evaluator.report.conftest import result

RESULTS = [
    result("a", 1.0),
    result("b", 0.0, error="metric_error"),
    result("c", 0.5, cost_usd=None),
    result("d", 0.75, judge_calls=2, judge_cost=0.002),
]


class TestSummaryRows:
    def test_the_same_rows_as_the_runs_report(self) -> None:
        """report's rows are run's rows of the same report, less the wall time a file
        did not record, in the page's number format (the same labels, in order)."""
        report = offline_report(RESULTS)
        run = [label for label, _ in report_rows(report) if label != "wall time"]
        assert [label for label, _ in summary_rows(summary_of(report))] == run

    def test_a_recorded_wall_time_is_shown(self) -> None:
        """The wall time and throughput a run recorded in its file are report's rows."""
        rows = dict(summary_rows(summarize(RESULTS, {"wall_s": 2.0})))
        assert rows["wall time"] == "2.00 s" and rows["throughput"] == "2.0 examples/s"
        assert "wall time" not in dict(summary_rows(summarize(RESULTS)))

    def test_an_unmeasured_cost_names_its_count_and_denominator(self) -> None:
        """Both tables say how many of how many examples had no known price, never $0."""
        for rows in (report_rows(offline_report(RESULTS)), summary_rows(summarize(RESULTS))):
            cost = dict(rows)["program cost"]
            assert cost.startswith("unmeasured (1 of 4 examples without a known price")

    def test_the_errors_scores_are_named(self) -> None:
        """report names the scores its errors were recorded with, or that there was none."""
        rows = dict(summary_rows(summarize(RESULTS)))
        assert rows["mean score (all, errors at 0)"] == "0.5625"
        clean = dict(summary_rows(summarize([result("a", 1.0)])))
        assert clean["mean score (all)"] == "1.0000"


class TestTokens:
    def test_the_report_holds_its_tokens_as_a_token_usage(self) -> None:
        """The program's and the judge's tokens are the report's TokenUsage, under the
        flat --json names, and the page's summary carries the same."""
        obs = msgspec.structs.replace(
            RESULTS[0].observation,
            llm_calls=1,
            input_tokens=10,
            output_tokens=4,
            cached_tokens=3,
            reasoning_tokens=1,
        )
        judge = msgspec.structs.replace(
            RESULTS[0].judge, llm_calls=1, input_tokens=5, output_tokens=2
        )
        report = offline_report([msgspec.structs.replace(RESULTS[0], observation=obs, judge=judge)])
        assert report.tokens == TokenUsage(
            input_tokens=15, output_tokens=6, cached_tokens=3, reasoning_tokens=1
        )
        encoded = msgspec.json.decode(msgspec.json.encode(report))
        assert (encoded["input_tokens"], encoded["output_tokens"]) == (15, 6)
        summary = summary_of(report)
        assert summary.tokens == report.tokens and "report" not in summary.fields()
        assert dict(report_rows(report))["tokens in / out"] == "15 / 6"
