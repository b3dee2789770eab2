"""The serving step shared by `run` and `judges`: configs from the flags, keys checked
up front, `--simulator` started and every model pointed at it."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from evaluator import ConfigError
from evaluator._cli import main
from evaluator._cli._options import ModelRequest, ServingOptions
from evaluator._cli._serving import Serving
from llm_client import LLMError, ModelClient, ModelConfig, ModelSettings, SimulatorConfig
from tests._helpers import result_rows

ROOT = Path(__file__).resolve().parents[3]
JUDGES = ROOT / "examples" / "judges"
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
MISSING = "SKYNET_TEST_NO_SUCH_KEY"


class TestServing:
    def test_configs_from_the_flags(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each request becomes a ModelConfig with the shared key variable and limits
        and its own base URL and prices; unset values keep ModelConfig's defaults."""
        monkeypatch.setenv("SKYNET_TEST_KEY", "sk-test")
        serving = Serving(
            ServingOptions(
                models=(
                    ModelRequest("program", "p"),
                    ModelRequest("metric", "j", "http://127.0.0.1:9/v1", 1.0, 2.0),
                ),
                api_key_env="SKYNET_TEST_KEY",
                rpm=60.0,
            )
        )
        assert serving.configs == {
            "program": ModelConfig(model="p", api_key_env="SKYNET_TEST_KEY", rpm=60.0),
            "metric": ModelConfig(
                model="j",
                base_url="http://127.0.0.1:9/v1",
                api_key_env="SKYNET_TEST_KEY",
                rpm=60.0,
                price_input=1.0,
                price_output=2.0,
            ),
        }

    def test_hedge_goes_to_the_metric_model_only(self) -> None:
        """--hedge Q hedges the metric model's calls at that quantile, not the program's."""
        from llm_client import Hedge

        serving = Serving(
            ServingOptions(
                models=(ModelRequest("program", "p"), ModelRequest("metric", "j")),
                api_key_env=None,
                hedge=0.9,
            )
        )
        assert serving.configs["metric"].hedge == Hedge(quantile=0.9)
        assert serving.configs["program"].hedge is None

    def test_a_missing_key_names_the_variable_the_model_and_the_fix(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A key variable that is not set stops the command before any work, saying
        which variable, for which model, and how to do without a key."""
        monkeypatch.delenv(MISSING, raising=False)
        options = ServingOptions(models=(ModelRequest("metric", "judge-x"),), api_key_env=MISSING)
        with pytest.raises(ConfigError) as caught:
            Serving(options)
        assert str(caught.value) == (
            f"environment variable {MISSING} (the --api-key-env of model 'judge-x') is not "
            "set: export it, or pass --api-key-env none for a server that takes no key"
        )

    def test_no_key_variable_no_check(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """--api-key-env none: no key is looked for, none is sent."""
        serving = Serving(ServingOptions(models=(ModelRequest("a", "a"),), api_key_env=None))
        assert serving.configs["a"].api_key_env is None

    async def test_no_models_serve_nothing(self) -> None:
        """A score-only run has no models: nothing to check, nothing started."""
        async with Serving(ServingOptions()).open() as configs:
            assert configs == {}

    async def test_simulator_starts_for_sdk_calls_without_a_model(self) -> None:
        """--simulator with no model configured still starts: it serves the program's
        own SDK calls, at the URL the serving step names while it runs."""
        serving = Serving(ServingOptions(simulator=SimulatorConfig(port=0)))
        async with serving.open() as configs:
            assert configs == {}
            url = serving.simulator_url
            assert url is not None and url.startswith("http://127.0.0.1:")
            async with ModelClient(
                ModelConfig(model="m", base_url=url, api_key_env=None)
            ) as client:
                assert (await client.complete([{"role": "user", "content": "hi"}])).text
        assert serving.simulator_url is None

    async def test_simulator_serves_every_model_without_a_key(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With a simulator the key variable is not needed; open() starts it on
        127.0.0.1, points every model at it (real HTTP answers), and stops it after."""
        monkeypatch.delenv(MISSING, raising=False)
        sim = SimulatorConfig(port=0, models={"a": ModelSettings(), "b": ModelSettings()})
        serving = Serving(
            ServingOptions(
                models=(ModelRequest("a", "a"), ModelRequest("b", "b", "https://x.invalid/v1")),
                api_key_env=MISSING,
                simulator=sim,
            )
        )
        async with serving.open() as configs:
            urls = {config.base_url for config in configs.values()}
            assert len(urls) == 1 and urls.pop().startswith("http://127.0.0.1:")
            for config in configs.values():
                assert config.api_key_env is None
                async with ModelClient(config) as client:
                    reply = await client.complete([{"role": "user", "content": "hi"}])
                assert reply.text
        with pytest.raises(LLMError):
            async with ModelClient(msgspec.structs.replace(config, max_retries=0)) as client:
                await client.complete([{"role": "user", "content": "hi"}])


def _argv(command: str, *extra: str) -> list[str]:
    data = ["--data", str(JUDGES / "data.jsonl")]
    if command == "run":
        return ["run", "--metric", str(JUDGE), *data, "--metric-model", "judge-mini", *extra]
    return ["judges", "--metric", str(JUDGE), *data, "--models", "judge-mini", *extra]


@pytest.mark.parametrize("command", ["run", "judges"])
class TestBothCommands:
    def test_same_missing_key_message(
        self, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """run and judges stop on a missing key with the same one line, exit 2."""
        monkeypatch.delenv(MISSING, raising=False)
        assert main(_argv(command, "--api-key-env", MISSING)) == 2
        assert capsys.readouterr().err == (
            f"skynet-eval {command}: error: environment variable {MISSING} (the "
            "--api-key-env of model 'judge-mini') is not set: export it, or pass "
            "--api-key-env none for a server that takes no key\n"
        )

    def test_simulator_needs_no_key(
        self,
        command: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """run and judges with --simulator: the key variable is not needed, and every
        example is judged by the simulated model (one call each)."""
        monkeypatch.delenv(MISSING, raising=False)
        out = tmp_path / "out.json"
        extra = ["--simulator", str(JUDGES / "simulator.json"), "--api-key-env", MISSING]
        extra += ["--output", str(out)]
        if command == "run":
            extra.append("--json")
        assert main(_argv(command, *extra)) == 0, capsys.readouterr().err
        if command == "run":
            rows = result_rows(out)  # not the header
            assert len(rows) == 40 and all(r["judge"]["llm_calls"] == 1 for r in rows)
        else:
            report = json.loads(out.read_text())
            assert report["rows"][0]["model"] == "judge-mini"
            assert report["rows"][0]["scored"] == 40
