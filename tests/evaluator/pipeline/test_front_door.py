"""The library's front door (issue 26): ids unique in a call as on the command line,
errors that name the library's parameters, and only public names in ``dir(evaluator)``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import evaluator
from evaluator import DatasetError, Evaluator, ResultsFileError, load_examples, open_results

SOURCES = Path(__file__).resolve().parents[1] / "sources"
EXACT = SOURCES / "exact.py"


def row(i: Any, label: str = "a") -> dict[str, Any]:
    return {"id": i, "input": {"x": 1}, "expected": {"label": label}, "output": label}


class TestDuplicateIds:
    async def test_evaluate_many_names_the_id_and_both_positions(self) -> None:
        """A repeated id is refused, naming it, both positions and the parameter."""
        rows = [row("a"), row("b"), row("c"), row("b")]
        async with Evaluator(EXACT, execution="inline") as ev:
            with pytest.raises(DatasetError) as caught:
                await ev.evaluate_many(None, rows)
        message = str(caught.value)
        assert "`examples` has the id 'b' twice, at positions 1 and 3" in message
        assert "unique_ids=False" in message and "--" not in message

    async def test_across_chunks_and_from_an_async_iterable(self) -> None:
        """A repeat far apart, from an async generator, is found too (a later chunk)."""

        async def rows() -> AsyncIterator[dict[str, Any]]:
            for i in range(5000):
                yield row(i)
            yield row(17)

        async with Evaluator(EXACT, execution="inline") as ev:
            with pytest.raises(DatasetError, match="id 17 twice, at positions 17 and 5000"):
                await ev.evaluate_many(None, rows())

    async def test_stream_and_evaluate_refuse_it_too(self) -> None:
        """``stream`` and ``evaluate`` check ids as ``evaluate_many`` does."""
        rows = [row("a"), row("a")]
        async with Evaluator(EXACT, execution="inline") as ev:
            with pytest.raises(DatasetError, match="positions 0 and 1"):
                async for _ in ev.stream(None, rows):
                    pass
            with pytest.raises(DatasetError, match="positions 0 and 1"):
                await ev.evaluate(None, rows)

    async def test_a_position_meeting_an_id(self) -> None:
        """A row without an id gets its position: meeting an explicit id is a repeat,
        and the message says how positions become ids."""
        rows = [{"input": {"x": 1}, "output": "a", "expected": {"label": "a"}}, row(0)]
        async with Evaluator(EXACT, execution="inline") as ev:
            with pytest.raises(DatasetError, match="gets its position as its id"):
                await ev.evaluate_many(None, rows)

    async def test_unique_ids_false_scores_a_repeat(self) -> None:
        """``unique_ids=False`` scores an example twice, results in input order."""
        rows = [row("a"), row("b", "b"), row("a")]
        async with Evaluator(EXACT, execution="inline") as ev:
            results = await ev.evaluate_many(None, rows, unique_ids=False)
            again = [r async for r in ev.stream(None, rows, unique_ids=False)]
        assert [r.example_id for r in results] == ["a", "b", "a"]
        assert all(r.ok for r in [*results, *again]) and len(again) == 3

    async def test_separate_calls_may_share_ids(self) -> None:
        """Uniqueness is per call: two calls with the same ids both run."""
        async with Evaluator(EXACT, execution="inline") as ev:
            first = await ev.evaluate_many(None, [row("a")])
            second = await ev.evaluate_many(None, [row("a")])
        assert first[0].ok and second[0].ok


class TestLibraryErrorsNameParameters:
    async def test_no_judge_model_names_models(self, tmp_path: Path) -> None:
        """A metric calling skynet.llm() with no model: the error names ``models=``."""
        metric = tmp_path / "metric.py"
        metric.write_text(
            "from skynet import llm\n\ndef score(input, output, expected=None):\n"
            "    return float(llm('PASS or FAIL?') == 'PASS'), {'feedback': 'x'}\n"
        )
        async with Evaluator(metric, execution="inline") as ev:
            (result,) = await ev.evaluate_many(None, [row("a")])
        assert result.error is not None
        assert "pass models= to Evaluator" in result.error.message

    def test_a_csv_without_columns_names_input_cols(self, tmp_path: Path) -> None:
        """``load_examples`` of a CSV without columns names its own ``input_cols=``."""
        data = tmp_path / "d.csv"
        data.write_text("q,a\n1,2\n")
        with pytest.raises(DatasetError, match="input_cols= and output_cols="):
            load_examples(data)

    async def test_a_missing_output_names_program(self) -> None:
        """A score-only example without output names Evaluator's ``program``."""
        async with Evaluator(EXACT, execution="inline") as ev:
            (result,) = await ev.evaluate_many(None, [{"id": 1, "input": {"x": 1}}])
        assert result.error is not None and "Evaluator(program=...)" in result.error.message

    def test_a_results_file_with_results_names_resume(self, tmp_path: Path) -> None:
        """Opening a results file that holds results names ``resume=True``."""
        from evaluator import Result

        path = tmp_path / "r.jsonl"
        writer, _ = open_results(path, fingerprints=None)
        writer.write([Result(example_id=1, score=1.0)])
        writer.close()
        with pytest.raises(ResultsFileError, match=r"open_results\(\.\.\., resume=True\)"):
            open_results(path, fingerprints=None)


class TestDir:
    def test_dir_shows_the_public_names_only(self) -> None:
        """``dir(evaluator)`` lists ``__all__``: no module, helper or import of the engine."""
        names = dir(evaluator)
        assert names == sorted(evaluator.__all__)
        assert "Evaluator" in names
        assert not [n for n in names if n.startswith("_") or n in ("importlib", "typing")]
