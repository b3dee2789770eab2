"""The contract check: `check_contract`, step by step (the command: cli/test_check.py)."""

from __future__ import annotations

import json
from pathlib import Path

from evaluator._check import check_contract
from tests._helpers import write

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "examples" / "metrics"
LABELS = METRICS / "labels.jsonl"


class TestCheckContract:
    async def test_page_exact_match_passes(self) -> None:
        """The page's exact-match metric passes every step."""
        report = await check_contract(METRICS / "exact_match.py", _rows(LABELS), execution="inline")
        assert report.ok
        assert [s.name for s in report.steps] == [
            "Metric file",
            "Metric signature",
            "Metric runs",
            "Metric return value",
        ]

    async def test_page_json_checks_passes(self) -> None:
        """The page's several-checks JSON metric passes every step."""
        report = await check_contract(
            METRICS / "json_checks.py", _rows(METRICS / "fields.jsonl"), execution="inline"
        )
        assert report.ok

    async def test_reward_spec_step(self) -> None:
        """A module with REWARD_SPEC gets the Reward spec step, and passes it."""
        report = await check_contract(
            METRICS / "reward_blend.py", _rows(LABELS), execution="inline"
        )
        assert "Reward spec" in [s.name for s in report.steps] and report.ok

    async def test_bad_reward_spec(self, tmp_path: Path) -> None:
        """A bad REWARD_SPEC fails before any example runs, naming the key path."""
        path = write(
            tmp_path,
            "metric.py",
            """
            from skynet import reward
            REWARD_SPEC = {"weights": {"accuracy": 1, "speed": 0, "cost": 0}, "accuracy": {},
                           "speed": {"reference": 0}, "cost": {"reference": 0.01}}
            def score(i, o, e=None):
                raise AssertionError("must not run")
        """,
        )
        report = await check_contract(path, _rows(LABELS))
        step = report.failed
        assert step is not None and step.name == "Reward spec"
        assert 'REWARD_SPEC["speed"]["reference"]' in step.message
        assert "Metric runs" not in [s.name for s in report.steps]

    async def test_only_first_three(self, tmp_path: Path) -> None:
        """The check runs the metric on the first three examples only."""
        seen = tmp_path / "seen.txt"
        path = write(
            tmp_path,
            "metric.py",
            f"""
            EXECUTION = "inline"
            def score(i, o, e=None):
                with open({str(seen)!r}, "a") as fh:
                    fh.write(i["question"] + "\\n")
                return 1.0, {{"feedback": ""}}
        """,
        )
        assert (await check_contract(path, _rows(LABELS))).ok
        assert len(seen.read_text().splitlines()) == 3

    async def test_empty_dataset(self, tmp_path: Path) -> None:
        """No examples fails Metric runs with a clear message."""
        report = await check_contract(METRICS / "exact_match.py", [])
        assert report.failed is not None and "no examples" in report.failed.message


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
