"""`skynet-eval judges`: the table, the JSON report and the plot; usage errors."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from evaluator import JudgesReport
from evaluator._cli import main
from llm_client import ModelSettings, Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[3]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
EXAMPLE = ROOT / "examples" / "judges"


class TestCommand:
    def test_cli_table_json_plot(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`skynet-eval judges --models` on the shipped data prints the tables, writes JSON
        and a PNG."""
        out, plot = tmp_path / "j.json", tmp_path / "j.png"
        code = main(
            [
                "judges",
                "--metric",
                str(EXAMPLE / "metric.py"),
                "--data",
                str(EXAMPLE / "data.jsonl"),
                "--models",
                "judge-large,judge-mini,judge-nano",
                "--simulator",
                str(EXAMPLE / "simulator.json"),
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
        assert [r.label for r in report.rows] == ["judge-large", "judge-mini", "judge-nano"]
        assert report.rows[2].cost_usd is None
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    @pytest.mark.slow
    def test_cli_shipped_models_file(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The shipped example: a models file over two simulated providers, repeats and a
        projection, end to end."""
        out, plot = tmp_path / "j.json", tmp_path / "j.png"
        code = main(
            [
                "judges",
                "--metric",
                str(EXAMPLE / "metric.py"),
                "--data",
                str(EXAMPLE / "data.jsonl"),
                "--models-file",
                str(EXAMPLE / "models.toml"),
                "--reference",
                "claude-large",
                "--repeat",
                "2",
                "--project",
                "1000",
                "--simulator",
                str(EXAMPLE / "simulator.json"),
                "--output",
                str(out),
                "--plot",
                str(plot),
            ]
        )
        printed = capsys.readouterr().out
        assert code == 0, printed
        assert "x 2 repeats" in printed and "time for 1,000" in printed
        report = msgspec.json.decode(out.read_bytes(), type=JudgesReport)
        labels = ["claude-large", "claude-small", "gpt-large", "gpt-mini", "gpt-nano"]
        assert [r.label for r in report.rows] == labels
        assert {r.provider for r in report.rows} == {"anthropic", "openai"}
        assert all(r.simulated and r.scored == 80 and r.errors == 0 for r in report.rows)
        assert all(r.self_agreement is not None for r in report.rows)
        stable = {r.label: r.self_agreement.stable for r in report.rows if r.self_agreement}
        # The simulator's flip_rate (sampling noise) is set for the small models only: the
        # large ones keep every verdict, gpt-nano (flip_rate 0.15) flips on some examples.
        assert stable["claude-large"] == stable["gpt-large"] == 1.0
        assert stable["gpt-nano"] is not None and stable["gpt-nano"] < 1.0
        assert all(r.projection and r.projection.limited_by for r in report.rows)
        assert len(report.cases) == 40
        assert all(len(calls) == 2 for case in report.cases for calls in case.calls.values())
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_cli_models_file_real_keys(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A models file over two keyed servers: runs with both keys set; with one missing
        it stops before any call, naming the file, the model and the variable."""
        sim_a = SimulatorConfig(api_key="key-a-1234567", models={"judge-a": ModelSettings()})
        sim_b = SimulatorConfig(api_key="key-b-7654321", models={"judge-b": ModelSettings()})
        with Simulator(sim_a).running_in_thread() as a, Simulator(sim_b).running_in_thread() as b:
            models = tmp_path / "models.toml"
            models.write_text(
                f'[providers.a]\nbase_url = "{a.base_url}"\napi_key_env = "PROVIDER_A_KEY"\n\n'
                f'[providers.b]\nbase_url = "{b.base_url}"\napi_key_env = "PROVIDER_B_KEY"\n\n'
                '[[models]]\nname = "judge-a"\nprovider = "a"\n\n'
                '[[models]]\nname = "judge-b"\nlabel = "bee"\nprovider = "b"\n',
                encoding="utf-8",
            )
            argv = [
                "judges",
                "--metric",
                str(JUDGE),
                "--data",
                str(EXAMPLE / "data.jsonl"),
                "--models-file",
                str(models),
            ]
            monkeypatch.setenv("PROVIDER_A_KEY", "key-a-1234567")
            monkeypatch.delenv("PROVIDER_B_KEY", raising=False)
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert str(models) in err and "model 'bee'" in err and "PROVIDER_B_KEY" in err
            assert b.statistics().requests == 0 and a.statistics().requests == 0
            monkeypatch.setenv("PROVIDER_B_KEY", "key-b-7654321")
            assert main(argv) == 0
            printed = capsys.readouterr().out
            assert a.statistics().client_errors == 0 and b.statistics().client_errors == 0
            assert a.statistics().requests == 40 and b.statistics().requests == 40
        assert "bee" in printed and "key-" not in printed

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

    def test_cli_needs_models(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Neither --models nor --models-file is a usage error saying to give one."""
        code = main(["judges", "--metric", str(JUDGE), "--data", str(EXAMPLE / "data.jsonl")])
        assert code == 2
        assert "--models-file" in capsys.readouterr().err
