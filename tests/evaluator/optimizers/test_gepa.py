"""GEPA on the engine: EvaluatorAdapter with the real gepa.optimize, offline."""

from __future__ import annotations

import importlib.util
import logging
import re
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import gepa
import pytest
from gepa import EvaluationBatch

from evaluator import ConfigError, Models
from evaluator._pipeline import Evaluator
from evaluator.gepa import EvaluatorAdapter
from llm_client import ModelConfig, Simulator, SimulatorConfig

PROGRAM = '''
def run(artifact, input):
    """Classify by "keyword -> label" rules read from the artifact text."""
    message = input["message"].lower()
    if message == "explode":
        raise ValueError("the program exploded on purpose")
    for line in artifact.splitlines():
        if "->" in line:
            keyword, label = (part.strip() for part in line.split("->", 1))
            if keyword and keyword.lower() in message:
                return label
    return "other"
'''

# The page's exact-match metric, plus named scores; it never echoes expected["note"].
METRIC = """
def score(input, output, expected=None):
    want = expected["label"]
    ok = 1.0 if output == want else 0.0
    feedback = "Correct." if ok else f"Expected {want!r}, got {output!r}."
    return ok, {"feedback": feedback, "scores": {"exact": ok, "nonempty": 1.0}}
"""

SECRET = "SENTINEL-never-shown"

MESSAGES = [
    ("I was charged twice on my card", "billing"),
    ("Found a bug: the app crashes when I open it", "bug"),
    ("How do I export my data?", "howto"),
    ("Please refund my last invoice", "billing"),
    ("Error 500 crashes the dashboard", "bug"),
    ("How do I reset my password?", "howto"),
]

SEED = {"prompt": "Classify the message. Rules, one per line, keyword -> label:\nbug -> bug"}


def _rows(messages: list[tuple[str, str]] = MESSAGES) -> list[dict[str, Any]]:
    return [
        {
            "id": f"q{i}",
            "input": {"message": message},
            "expected": {"label": label, "note": f"{SECRET}-{i}"},
        }
        for i, (message, label) in enumerate(messages)
    ]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    (tmp_path / "metric.py").write_text(textwrap.dedent(METRIC))
    return {
        "metric": str(tmp_path / "metric.py"),
        "program": str(tmp_path / "program.py"),
        "execution": "inline",
        "program_execution": "inline",
        "timeout": 30.0,
    }


def reflect(prompt: str) -> str:
    """A deterministic reflection model: one rule per 'Expected ..., got ...' feedback."""
    current = re.search(r"```\n(.*?)\n```", prompt, re.S)
    assert current is not None, prompt
    rules = [current.group(1)]
    for block in prompt.split("# Example")[1:]:
        message = re.search(r"### message\n(.*?)\n", block)
        wanted = re.search(r"Expected '([^']+)', got", block)
        if message and wanted:
            keyword = max(re.findall(r"[a-z]+", message.group(1).lower()), key=len)
            rules.append(f"{keyword} -> {wanted.group(1)}")
    return "```\n" + "\n".join(rules) + "\n```"


def _walk(value: Any) -> Iterator[Any]:
    """Every key and value inside nested dicts, lists and tuples."""
    yield value
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _walk(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item)


def _assert_no_expected(value: Any) -> None:
    for item in _walk(value):
        assert item != "expected", value
        assert not (isinstance(item, str) and SECRET in item), item
        assert not (isinstance(item, dict) and "note" in item), item


class Recording(EvaluatorAdapter):
    """Keeps every reflective dataset and reflection prompt it hands GEPA."""

    records: list[Any]

    def make_reflective_dataset(self, *args: Any, **kwargs: Any) -> Any:
        out = super().make_reflective_dataset(*args, **kwargs)
        self.records.append(out)
        return out


def _optimize(adapter: EvaluatorAdapter, prompts: list[str], calls: int = 40) -> Any:
    def lm(prompt: str) -> str:
        prompts.append(prompt)
        return reflect(prompt)

    return gepa.optimize(
        seed_candidate=SEED,
        trainset=_rows(),
        adapter=adapter,
        reflection_lm=lm,  # type: ignore[arg-type]  # GEPA sends this lm str prompts only
        max_metric_calls=calls,
        reflection_minibatch_size=3,
        seed=0,
        logger=_Quiet(),
    )


class _Quiet:
    def log(self, message: str) -> None:
        pass


class TestEvaluatorAdapter:
    async def test_evaluate_matches_evaluate_many(self, files: dict[str, Any]) -> None:
        """Scores, outputs and named scores are evaluate_many's, per example, in order."""
        rows = _rows()
        async with Evaluator(**files) as ev:
            adapter = EvaluatorAdapter(ev)
            batch = await anyio.to_thread.run_sync(adapter.evaluate, rows, SEED, False)
            ours = await ev.evaluate_many(SEED["prompt"], rows)
        assert isinstance(batch, EvaluationBatch)
        assert batch.scores == [r.score for r in ours]
        assert batch.outputs == [r.output for r in ours]
        assert batch.objective_scores == [r.scores for r in ours]
        assert batch.trajectories is None
        assert sorted(set(batch.scores)) == [0.0, 1.0]

    async def test_traces_hold_input_output_feedback_and_no_expected(
        self, files: dict[str, Any]
    ) -> None:
        """Trajectories and reflective records carry input, output, feedback; never expected."""
        rows = _rows()
        async with Evaluator(**files) as ev:
            adapter = EvaluatorAdapter(ev)
            batch = await anyio.to_thread.run_sync(adapter.evaluate, rows, SEED, True)
        assert batch.trajectories is not None
        assert [t["input"] for t in batch.trajectories] == [r["input"] for r in rows]
        assert [t["output"] for t in batch.trajectories] == batch.outputs
        records = adapter.make_reflective_dataset(SEED, batch, ["prompt"])
        assert list(records) == ["prompt"]
        assert [r["Inputs"] for r in records["prompt"]] == [r["input"] for r in rows]
        assert "Expected 'billing', got 'other'." in [r["Feedback"] for r in records["prompt"]]
        _assert_no_expected(batch.trajectories)
        _assert_no_expected(records)

    async def test_batch_evaluate_scores_many_candidates(self, files: dict[str, Any]) -> None:
        """batch_evaluate gives each (candidate, batch) pair evaluate_many's results, in order."""
        rows = _rows()
        better = {"prompt": SEED["prompt"] + "\ncharged -> billing\nexport -> howto"}
        items = [(SEED, rows), (better, rows[:3]), (SEED, rows[3:])]
        async with Evaluator(**files) as ev:
            adapter = EvaluatorAdapter(ev)
            batches = await anyio.to_thread.run_sync(adapter.batch_evaluate, items)
            expected = [await ev.evaluate_many(c["prompt"], b) for c, b in items]
        assert [b.scores for b in batches] == [[r.score for r in rs] for rs in expected]
        assert all(b.trajectories is not None for b in batches)
        assert sum(batches[1].scores) > sum(batches[0].scores[:3])

    async def test_batch_evaluate_runs_candidates_at_once(self, tmp_path: Path) -> None:
        """batch_evaluate runs its candidates concurrently on one engine, not one by one."""
        (tmp_path / "program.py").write_text(
            textwrap.dedent(
                """
                import asyncio

                started = set()
                everyone = None

                async def run(artifact, input):
                    # Returns "together" once both candidates have started; run one after
                    # the other, the first would wait out the timeout alone.
                    global everyone
                    if everyone is None:
                        everyone = asyncio.Event()
                    started.add(artifact)
                    if len(started) >= 2:
                        everyone.set()
                    try:
                        await asyncio.wait_for(everyone.wait(), 5)
                    except TimeoutError:
                        return "alone"
                    return "together"
                """
            )
        )
        (tmp_path / "metric.py").write_text(
            "def score(input, output):\n"
            "    return float(output == 'together'), {'feedback': output}\n"
        )
        rows = _rows()[:2]
        async with Evaluator(
            metric=str(tmp_path / "metric.py"),
            program=str(tmp_path / "program.py"),
            execution="inline",
        ) as ev:
            adapter = EvaluatorAdapter(ev)
            items = [({"prompt": "A"}, rows), ({"prompt": "B"}, rows)]
            batches = await anyio.to_thread.run_sync(adapter.batch_evaluate, items)
        assert [b.outputs for b in batches] == [["together"] * 2] * 2

    async def test_error_results_score_the_failure_with_their_message(
        self, files: dict[str, Any]
    ) -> None:
        """A program error gives the failure score, its message as feedback, every objective."""
        rows = _rows([("explode", "bug"), ("bug here", "bug")])
        async with Evaluator(**files) as ev:
            adapter = EvaluatorAdapter(ev, failure_score=-1.0)
            batch = await anyio.to_thread.run_sync(adapter.evaluate, rows, SEED, True)
        assert batch.scores == [-1.0, 1.0]
        assert batch.trajectories is not None
        assert "exploded on purpose" in batch.trajectories[0]["feedback"]
        assert batch.trajectories[0]["error"] == "program_error"
        assert batch.objective_scores is not None
        assert set(batch.objective_scores[0]) == {"exact", "nonempty"}
        records = adapter.make_reflective_dataset(SEED, batch, ["prompt"])["prompt"]
        assert "exploded on purpose" in records[0]["Feedback"]

    def test_open_passes_engine_options_through(self, files: dict[str, Any]) -> None:
        """EvaluatorAdapter.open hands its options to the Evaluator (here failure_score)."""
        rows = _rows([("explode", "bug"), ("bug here", "bug")])
        with EvaluatorAdapter.open(**files, failure_score=-2.0) as adapter:
            assert adapter.evaluator.failure_score == -2.0
            batch = adapter.evaluate(rows, SEED)
        assert batch.scores == [-2.0, 1.0]

    async def test_a_blocking_call_on_the_engines_loop_is_refused(
        self, files: dict[str, Any]
    ) -> None:
        """Calling the adapter on the loop that runs the engine raises instead of deadlocking."""
        async with Evaluator(**files) as ev:
            adapter = EvaluatorAdapter(ev)
            with pytest.raises(RuntimeError, match="worker thread"):
                adapter.evaluate(_rows(), SEED)

    async def test_built_in_a_worker_thread_finds_the_loop(self, files: dict[str, Any]) -> None:
        """An adapter built in an AnyIO worker thread finds the loop, even on an engine that
        does not say which loop it runs on."""

        class Hidden:
            """Only evaluate_many: the adapter cannot read the engine's loop from it."""

            def __init__(self, ev: Evaluator) -> None:
                self.evaluate_many = ev.evaluate_many

        async with Evaluator(**files) as ev:
            batch = await anyio.to_thread.run_sync(
                lambda: EvaluatorAdapter(Hidden(ev)).evaluate(_rows(), SEED)
            )
            ours = await ev.evaluate_many(SEED["prompt"], _rows())
        assert batch.scores == [r.score for r in ours]

    async def test_built_on_a_plain_thread_uses_the_engines_loop(
        self, files: dict[str, Any]
    ) -> None:
        """Built and called on a thread of the host's own, the adapter still reaches the loop."""
        async with Evaluator(**files) as ev:
            out: list[Any] = []
            thread = threading.Thread(
                target=lambda: out.append(EvaluatorAdapter(ev).evaluate(_rows(), SEED))
            )
            thread.start()
            await anyio.to_thread.run_sync(thread.join)
            ours = await ev.evaluate_many(SEED["prompt"], _rows())
        assert [b.scores for b in out] == [[r.score for r in ours]]

    def test_no_known_loop_is_a_clear_error(self) -> None:
        """With no loop to reach (none running, none known), the error says what to use."""

        class NoLoop:
            async def evaluate_many(self, artifact: Any, examples: Any) -> list[Any]:
                raise AssertionError("never reached")

        with pytest.raises(RuntimeError, match=r"EvaluatorAdapter\.open"):
            EvaluatorAdapter(NoLoop()).evaluate(_rows(), SEED)

    def test_propose_new_texts_is_present_and_none(self) -> None:
        """GEPA reads adapter.propose_new_texts on every proposal: it exists and is None."""
        assert EvaluatorAdapter.propose_new_texts is None

    def test_refuses_something_that_is_not_an_evaluator(self) -> None:
        """The adapter needs an object with evaluate_many."""
        with pytest.raises(TypeError, match="evaluate_many"):
            EvaluatorAdapter(object())


# A judge metric on the classify rows: its verdicts come from the model.
JUDGE_METRIC = """
from skynet import llm

def score(input, output, expected=None):
    verdict = llm(
        "Answer PASS or FAIL, then give one sentence of reasons.",
        input=f"Message: {input['message']}\\nAnswer: {output}",
    )
    return (1.0 if verdict.startswith("PASS") else 0.0), {"feedback": verdict}
"""


@pytest.fixture
def judge_files(files: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "judge.py").write_text(textwrap.dedent(JUDGE_METRIC))
    return {**files, "metric": str(tmp_path / "judge.py"), "execution": "thread"}


class TestOpenWithAJudge:
    async def test_metric_lm_on_a_simulator_scores_as_evaluate_many(
        self, judge_files: dict[str, Any]
    ) -> None:
        """open(metric_lm=..., simulator=...) scores with the judge as evaluate_many does on
        the same model; the judge's calls and cost are in statistics()."""

        def scored() -> tuple[list[float], Any]:
            with EvaluatorAdapter.open(
                **judge_files, metric_lm="openai/gpt-4o-mini", simulator={"latency_ms": 1}
            ) as adapter:
                batch = adapter.evaluate(_rows(), SEED)
                return batch.scores, adapter.statistics()

        scores, stats = await anyio.to_thread.run_sync(scored)
        async with Simulator(SimulatorConfig()) as sim:
            judge = ModelConfig(model="gpt-4o-mini", base_url=sim.base_url, api_key_env=None)
            async with Evaluator(**judge_files, models=Models(metric=judge)) as ev:
                ours = await ev.evaluate_many(SEED["prompt"], _rows())
        assert scores == [r.score for r in ours]
        assert all(r.error is None for r in ours)
        assert sorted(set(scores)) == [0.0, 1.0]
        assert stats.models.judge_calls == len(_rows())
        assert stats.models.judge_cost_usd is not None and stats.models.judge_cost_usd > 0

    def test_reflection_lm_is_the_fallback(self, judge_files: dict[str, Any]) -> None:
        """The model name given to gepa.optimize as reflection_lm serves the judge too."""
        with EvaluatorAdapter.open(
            **judge_files, reflection_lm="openai/gpt-4o-mini", simulator={}
        ) as adapter:
            batch = adapter.evaluate(_rows(), SEED, capture_traces=True)
        assert batch.trajectories is not None
        assert all(t["error"] is None for t in batch.trajectories)
        assert all(t["feedback"].startswith(("PASS", "FAIL")) for t in batch.trajectories)

    def test_no_model_warns_at_open(
        self, judge_files: dict[str, Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        """A metric that calls skynet.llm with no model: one warning naming the arguments."""
        with caplog.at_level(logging.WARNING), EvaluatorAdapter.open(**judge_files) as adapter:
            batch = adapter.evaluate(_rows()[:2], SEED)
        warnings = [r.getMessage() for r in caplog.records if "no model serves" in r.getMessage()]
        assert len(warnings) == 1
        assert "metric_lm=, reflection_lm= or models=" in warnings[0]
        assert batch.scores == [0.0, 0.0]

    def test_a_missing_key_is_refused_before_anything_runs(
        self, judge_files: dict[str, Any]
    ) -> None:
        """A model whose key variable is unset is a ConfigError at open, naming it."""
        with (
            pytest.raises(ConfigError, match=r"OPENAI_API_KEY is not set.*`metric_lm`"),
            EvaluatorAdapter.open(**judge_files, metric_lm="openai/gpt-4o-mini"),
        ):
            raise AssertionError("never opened")

    def test_request_options_are_refused(self, judge_files: dict[str, Any]) -> None:
        """An LM's per-call options, which an Evaluator cannot add, are refused by name."""
        import dspy

        lm = dspy.LM("openai/m", top_p=0.5)
        with (
            pytest.raises(ConfigError, match="'top_p'"),
            EvaluatorAdapter.open(**judge_files, metric_lm=lm, simulator={}),
        ):
            raise AssertionError("never opened")


class TestGepaOptimize:
    @pytest.mark.process
    def test_sync_host_score_goes_up(self, files: dict[str, Any]) -> None:
        """gepa.optimize from plain sync code raises the score; expected never reaches GEPA."""
        prompts: list[str] = []
        # The engine's default executors here: the program and metric in worker processes.
        options = {k: v for k, v in files.items() if not k.endswith("execution")}
        with Recording.open(**options) as adapter:
            adapter.records = []
            result = _optimize(adapter, prompts)
            best = result.best_candidate
            check = adapter.evaluate(_rows(), best)
        scores = result.val_aggregate_scores
        assert scores[result.best_idx] > scores[0]
        assert prompts and adapter.records
        # The best candidate's val scores are what the engine gives it.
        assert result.val_subscores[result.best_idx] == dict(enumerate(check.scores))
        _assert_no_expected(adapter.records)
        assert not any(SECRET in p for p in prompts)

    async def test_inside_a_running_loop(self, files: dict[str, Any]) -> None:
        """gepa.optimize in a worker thread drives the engine on the caller's running loop."""
        prompts: list[str] = []
        async with Evaluator(**files) as ev:
            adapter = Recording(ev)
            adapter.records = []
            result = await anyio.to_thread.run_sync(_optimize, adapter, prompts)
            ours = await ev.evaluate_many(result.best_candidate["prompt"], _rows())
        scores = result.val_aggregate_scores
        assert scores[result.best_idx] > scores[0]
        assert result.val_subscores[result.best_idx] == {i: r.score for i, r in enumerate(ours)}
        _assert_no_expected(adapter.records)
        assert not any(SECRET in p for p in prompts)


class TestExample:
    def test_shipped_example_raises_the_score(self, capsys: pytest.CaptureFixture[str]) -> None:
        """examples/gepa/optimize.py runs offline on examples/classify and the score goes up."""
        path = Path(__file__).resolve().parents[3] / "examples" / "gepa" / "optimize.py"
        spec = importlib.util.spec_from_file_location("_skynet_gepa_example", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.main(["--max-metric-calls", "150"]) == 0
        printed = capsys.readouterr().out
        found = re.search(r"score: ([0-9.]+) -> ([0-9.]+)", printed)
        assert found is not None, printed
        assert float(found.group(2)) > float(found.group(1))
