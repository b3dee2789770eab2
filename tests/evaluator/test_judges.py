"""Comparing judge models against the simulator: the table, unknown prices, failures."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator._judges import compare_judges, verdict_of
from llm_client import ModelConfig, ModelSettings, Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[2]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"


def rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"e{i}",
            "input": {"question": f"What is {i} plus {i}?"},
            "output": str(2 * i),
            "expected": {"human": "PASS" if i % 3 else "FAIL"},
        }
        for i in range(n)
    ]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SIM = SimulatorConfig(
    seed=3,
    models={"big": ModelSettings(noise=0.0), "small": ModelSettings(noise=0.3)},
)


class TestCompareJudges:
    async def test_unknown_price_stays_unknown(self) -> None:
        """A model with no known price has cost None, a note, and null in JSON."""
        async with Simulator(SIM) as sim:
            models = [
                ModelConfig(
                    model="big",
                    base_url=sim.base_url,
                    api_key_env=None,
                    price_input=1.0,
                    price_output=2.0,
                ),
                ModelConfig(model="small", base_url=sim.base_url, api_key_env=None),
            ]
            report = await compare_judges(JUDGE, rows(12), models, reference_model="big")
        big, small = report.rows
        assert big.cost_usd is not None and big.cost_usd > 0 and big.cost_note is None
        assert small.cost_usd is None and small.cost_per_1k_usd is None
        assert small.cost_note and "small" in small.cost_note
        encoded = json.loads(msgspec.json.encode(report))
        assert encoded["rows"][1]["cost_usd"] is None
        assert big.agreement == 1.0 and big.kappa == 1.0
        assert small.compared == 12 and small.agreement is not None

    async def test_one_model_down(self) -> None:
        """A model whose base URL refuses connections fails alone; its row says why."""
        async with Simulator(SIM) as sim:
            models = [
                ModelConfig(model="big", base_url=sim.base_url, api_key_env=None),
                ModelConfig(
                    model="gone",
                    base_url=f"http://127.0.0.1:{closed_port()}/v1",
                    api_key_env=None,
                    max_retries=1,
                ),
            ]
            report = await compare_judges(JUDGE, rows(6), models, reference_model="big")
        big, gone = report.rows
        assert big.scored == 6 and big.errors == 0
        assert gone.scored == 0 and gone.errors == 6 and gone.error_kinds == {"llm_error": 6}
        assert gone.failure is not None and "every example failed" in gone.failure
        assert gone.agreement is None and not gone.pareto

    async def test_labels(self) -> None:
        """Agreement against a labels column compares each verdict with the human label."""
        data = rows(9)
        async with Simulator(SIM) as sim:
            models = [ModelConfig(model="big", base_url=sim.base_url, api_key_env=None)]
            report = await compare_judges(JUDGE, data, models, labels="human")
        (row,) = report.rows
        assert report.reference == "labels:human" and row.compared == 9
        # Recompute the agreement by hand from the verdicts the simulator gave.
        async with Simulator(SIM) as sim:
            from evaluator._models import Models
            from evaluator._pipeline import Evaluator

            cfg = ModelConfig(model="big", base_url=sim.base_url, api_key_env=None)
            async with Evaluator(metric=JUDGE, models=Models(metric=cfg)) as ev:
                results = await ev.evaluate_many(None, data)
        labels = [1.0 if r["expected"]["human"] == "PASS" else 0.0 for r in data]
        same = sum(r.score == lab for r, lab in zip(results, labels, strict=True))
        assert row.agreement == pytest.approx(same / 9)

    async def test_validation(self) -> None:
        """A reference model that is not among the models is refused."""
        with pytest.raises(ValueError, match="not among"):
            await compare_judges(
                JUDGE, rows(1), [ModelConfig(model="a", api_key_env=None)], reference_model="b"
            )


class TestVerdictOf:
    @pytest.mark.parametrize(
        ("value", "want"),
        [
            ("PASS", 1.0),
            ("fail", 0.0),
            (" Yes ", 1.0),
            (True, 1.0),
            (0, 0.0),
            ("0.25", 0.25),
            ("maybe", None),
            (None, None),
            (float("nan"), None),
        ],
    )
    def test_values(self, value: Any, want: float | None) -> None:
        """Labels read as numbers: pass/fail words, booleans, numbers; else None."""
        assert verdict_of(value) == want
