"""``evaluator._call._results.example_key``: the one identity of an example id, shared by the
dataset's duplicate check, ``--resume``'s reading and the report's joins."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from evaluator import DatasetError, Observation, Result, Usage
from evaluator._call._results import example_key
from evaluator._data._dataset import examples_from_rows
from evaluator._results_file._load import join_examples
from evaluator._results_file._reader import scan
from llm_client import TokenUsage


class TestExampleKey:
    def test_ids_json_tells_apart_are_apart(self) -> None:
        """``1``, ``"1"``, ``True`` and ``1.0`` are four ids; equal ids have one key."""
        keys = [example_key(i) for i in (1, "1", True, 1.0)]
        assert len(set(keys)) == 4
        assert example_key(1) == example_key(1) and example_key("a") == example_key("a")

    def test_an_unhashable_id_has_a_key(self) -> None:
        """A list id (JSON allows it) is keyed by its JSON, so equal lists match."""
        assert example_key([1, "a"]) == example_key([1, "a"]) != example_key([1, "b"])

    def test_the_dataset_resume_and_report_agree(self, tmp_path: Path) -> None:
        """The dataset refuses a repeated id, and keeps ``1`` and ``"1"`` apart; resume
        counts a result of ``"1"`` apart from ``1``; the report joins each to its row."""
        rows = [{"id": 1, "input": {"q": "a"}}, {"id": "1", "input": {"q": "b"}}]
        examples = list(examples_from_rows(rows))
        with pytest.raises(DatasetError, match="duplicate id 1"):
            list(examples_from_rows([*rows, {"id": 1, "input": {"q": "c"}}]))
        path = tmp_path / "r.jsonl"
        lines = [Result(example_id=1, score=1.0), Result(example_id="1", score=0.0)]
        path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in lines))
        found = scan(path, dataset_ids=[e.id for e in examples])
        assert found.counted == 2 and found.duplicates == 0 and found.foreign == 0
        joined = join_examples(examples)
        assert joined[example_key(1)].input == {"q": "a"}
        assert joined[example_key("1")].input == {"q": "b"}


class TestTokenCounts:
    def test_observation_and_usage_are_token_usages_with_flat_fields(self) -> None:
        """Observation and Usage are TokenUsage values whose encoded token fields keep
        their flat names (the results file's), and round-trip."""
        obs = Observation(duration_ms=1.0, input_tokens=3, output_tokens=2, cached_tokens=1)
        for value in (obs, Usage(input_tokens=3, output_tokens=2, cached_tokens=1)):
            assert isinstance(value, TokenUsage)
            assert value.tokens == TokenUsage(input_tokens=3, output_tokens=2, cached_tokens=1)
            fields = msgspec.json.decode(msgspec.json.encode(value))
            assert (fields["input_tokens"], fields["cached_tokens"]) == (3, 1)
            assert "tokens" not in fields
        assert msgspec.json.decode(msgspec.json.encode(obs), type=Observation) == obs
