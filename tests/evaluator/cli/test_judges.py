"""`skynet-eval judges`: the table, the JSON report and the plot; usage errors."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from evaluator import JudgesReport
from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[3]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"


class TestCommand:
    def test_cli_table_json_plot(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`skynet-eval judges` on the shipped example prints the table, writes JSON and a PNG."""
        example = ROOT / "examples" / "judges"
        out, plot = tmp_path / "j.json", tmp_path / "j.png"
        code = main(
            [
                "judges",
                "--metric",
                str(example / "metric.py"),
                "--data",
                str(example / "data.jsonl"),
                "--models",
                "judge-large,judge-mini,judge-nano",
                "--simulator",
                str(example / "simulator.json"),
                "--price",
                "judge-large=3,15",
                "--price",
                "judge-mini=0.15,0.6",
                "--output",
                str(out),
                "--plot",
                str(plot),
            ]
        )
        printed = capsys.readouterr().out
        assert code == 0
        assert "judge-large" in printed and "judge-mini" in printed and "unknown" in printed
        report = msgspec.json.decode(out.read_bytes(), type=JudgesReport)
        assert [r.model for r in report.rows] == ["judge-large", "judge-mini", "judge-nano"]
        assert report.rows[2].cost_usd is None
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_cli_bad_price(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A malformed --price is a usage error naming the expected form."""
        code = main(
            [
                "judges",
                "--metric",
                str(JUDGE),
                "--data",
                "x.jsonl",
                "--models",
                "a",
                "--price",
                "a=1",
            ]
        )
        assert code == 2
        assert "MODEL=INPUT,OUTPUT" in capsys.readouterr().err
