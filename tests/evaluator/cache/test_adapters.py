"""The cache in both optimizer adapters: on by default, with an opt-out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy
import pytest

from evaluator.dspy import to_dspy_metric
from evaluator.gepa import EvaluatorAdapter
from llm_client import ModelConfig, Simulator, SimulatorConfig
from tests._helpers import write

CLASSIFY = Path(__file__).resolve().parents[3] / "examples" / "classify"
JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    verdict = llm("Answer PASS or FAIL.", input=f"{input['message']} {output}")
    return float(verdict.startswith("PASS")), {"feedback": verdict}
"""
COUNTING = """
import os

def score(input, output, expected=None):
    with open(os.environ["COUNT_FILE"], "a") as fh:
        fh.write("x\\n")
    if output == "boom":
        raise ValueError("boom")
    return float(output == expected["label"]), {"feedback": "ok"}
"""


def rows() -> list[dict[str, Any]]:
    return [
        {"id": f"r{i}", "input": {"message": m}, "expected": {"label": label}}
        for i, (m, label) in enumerate(
            [("refund please", "billing"), ("app crashes", "bug"), ("how do I", "howto")]
        )
    ]


class TestGepaAdapter:
    @pytest.mark.parametrize("cache", [None, False])
    def test_cache_on_by_default_off_on_request(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: bool | None
    ) -> None:
        """EvaluatorAdapter.open caches in memory unless cache=False: the second
        evaluation of one (candidate, batch) runs no metric call, with the same scores."""
        count = tmp_path / "count.txt"
        monkeypatch.setenv("COUNT_FILE", str(count))
        options: dict[str, Any] = {} if cache is None else {"cache": cache}
        metric = write(tmp_path, "metric.py", COUNTING)
        candidate = {"prompt": "refund -> billing"}
        with EvaluatorAdapter.open(
            metric=str(metric),
            program=str(CLASSIFY / "program.py"),
            execution="inline",
            program_execution="inline",
            **options,
        ) as adapter:
            first = adapter.evaluate(rows(), candidate)
            second = adapter.evaluate(rows(), candidate)
            stats = adapter.statistics().cache
        calls = len(count.read_text().splitlines())
        assert first.scores == second.scores and first.outputs == second.outputs
        if cache is None:
            assert calls == 3 and stats is not None and stats.memory_hits == 3
        else:
            assert calls == 6 and stats is None


@pytest.mark.slow
class TestShippedExample:
    def test_same_score_fewer_examples_executed(self, capsys: pytest.CaptureFixture[str]) -> None:
        """examples/gepa/optimize.py with its cache (the default) reaches the score it
        reaches with --no-cache, and executes fewer of the examples it scores."""
        import importlib.util
        import re

        path = CLASSIFY.parent / "gepa" / "optimize.py"
        spec = importlib.util.spec_from_file_location("_skynet_gepa_example_cache", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        printed = {}
        for flags in ([], ["--no-cache"]):
            assert module.main(["--max-metric-calls", "150", *flags]) == 0
            printed[bool(flags)] = capsys.readouterr().out
        on, off = printed[False], printed[True]
        score = re.compile(r"score: ([0-9.]+) -> ([0-9.]+)")
        assert score.search(on).groups() == score.search(off).groups()  # type: ignore[union-attr]
        found = re.search(r"examples scored: (\d+), of which (\d+) from the cache", on)
        assert found is not None, on
        assert int(found.group(2)) > 0 and "from the cache" not in off


class TestDspyMetric:
    def test_judge_is_paid_once_per_example_and_prediction(self) -> None:
        """The DSPy metric answers a repeated (example, prediction) from its cache: the
        judge is called once, the score is the same, the statistics count the hit."""
        import asyncio

        async def serve() -> None:
            async with Simulator(SimulatorConfig()) as sim:
                judge = ModelConfig(model="gpt-4o-mini", base_url=sim.base_url, api_key_env=None)
                await asyncio.to_thread(self.check, judge, sim)

        asyncio.run(serve())

    def check(self, judge: ModelConfig, sim: Simulator) -> None:
        from evaluator import Models

        path = Path(self.tmp) / "judge.py"
        with to_dspy_metric(str(path), output_field="label", models=Models(metric=judge)) as metric:
            gold = dspy.Example(message="refund please", label="billing").with_inputs("message")
            pred = dspy.Prediction(label="billing")
            scores = [metric(gold, pred) for _ in range(3)]
            other = metric(gold, dspy.Prediction(label="bug"))
            stats = metric.statistics()
        assert scores[0] == scores[1] == scores[2] and isinstance(other, float)
        assert (stats.calls, stats.cached, stats.judge.llm_calls) == (4, 2, 2)
        assert sim.statistics().served == 2

    @pytest.fixture(autouse=True)
    def _files(self, tmp_path: Path) -> None:
        write(tmp_path, "judge.py", JUDGE)
        write(tmp_path, "metric.py", COUNTING)
        self.tmp = str(tmp_path)

    def test_opt_out_and_failures(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """cache=False calls the metric every time; a metric that raises is never cached."""
        count = tmp_path / "count.txt"
        monkeypatch.setenv("COUNT_FILE", str(count))
        gold = dspy.Example(message="m", label="billing").with_inputs("message")
        metric = to_dspy_metric(str(tmp_path / "metric.py"), output_field="label", cache=False)
        for _ in range(2):
            metric(gold, dspy.Prediction(label="billing"))
        cached = to_dspy_metric(str(tmp_path / "metric.py"), output_field="label")
        for _ in range(2):
            with pytest.raises(ValueError, match="boom"):
                cached(gold, dspy.Prediction(label="boom"))
        assert len(count.read_text().splitlines()) == 4
        assert cached.statistics().cached == 0
