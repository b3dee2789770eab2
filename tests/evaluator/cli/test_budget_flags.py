"""`skynet-eval run --max-cost/--max-calls/--max-time`: the run's budget, on the
simulator over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main
from tests._helpers import result_rows

ROOT = Path(__file__).resolve().parents[3]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
JUDGES = ROOT / "examples" / "judges"


def _args(out: Path, *extra: str) -> list[str]:
    return [
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
        *extra,
    ]


def _rows(path: Path) -> list[dict[str, Any]]:
    return result_rows(path)


def test_max_calls_and_max_cost_bound_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-calls 10 over 40 examples: 10 scored, the other 30 budget_exhausted, and
    the report shows what was spent against the budget."""
    out = tmp_path / "r.jsonl"
    prices = ("--price-input", "0.15", "--price-output", "0.6")
    assert main(_args(out, *prices, "--max-calls", "10", "--max-cost", "0.01", "--json")) == 0
    rows = _rows(out)
    assert len(rows) == 40
    kinds = [r["error"]["kind"] if r["error"] else None for r in rows]
    assert kinds.count(None) == 10 and kinds.count("budget_exhausted") == 30
    report = json.loads(capsys.readouterr().out)
    budget = report["budget"]
    assert (budget["usd"], budget["calls"], budget["calls_made"]) == (0.01, 10, 10)
    assert 0 < budget["spent_usd"] <= 0.01


def test_max_time_zero_starts_nothing(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    assert main(_args(out, "--max-time", "0", "--json")) == 0
    rows = _rows(out)
    assert len(rows) == 40 and all(r["error"]["kind"] == "budget_exhausted" for r in rows)


def test_max_cost_without_a_price_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unpriced model under --max-cost: exit 2 before anything runs, naming the
    model and the flags that price it."""
    out = tmp_path / "r.jsonl"
    assert main(_args(out, "--max-cost", "0.01")) == 2
    err = capsys.readouterr().err
    assert "'judge-mini'" in err and "--price-input" in err and "--max-cost" in err
    assert "Traceback" not in err
    assert not out.exists() or _rows(out) == []


@pytest.mark.parametrize("flag", ["--max-cost", "--max-calls", "--max-time"])
def test_a_negative_limit_names_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    assert main(_args(tmp_path / "r.jsonl", flag, "-1")) == 2
    assert flag in capsys.readouterr().err
