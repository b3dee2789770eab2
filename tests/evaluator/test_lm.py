"""A DSPy or GEPA user's model as the engine's ModelConfig: real dspy.LM objects."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import dspy
import pytest

from evaluator import ConfigError, Models
from evaluator._lm import (
    PROVIDERS,
    KeyedModelConfig,
    check_keys,
    model_config,
    resolve_models,
    served,
    simulator_config,
)
from llm_client import ModelClient, ModelConfig, SimulatorConfig


class TestModelConfig:
    def test_dspy_lm_fields_are_carried_over(self) -> None:
        """A dspy.LM's model, api_base, temperature, max_tokens, timeout and retries land on the config."""
        lm = dspy.LM(
            "openai/gpt-4o-mini",
            api_base="http://127.0.0.1:9/v1/",
            temperature=0.3,
            max_tokens=100,
            timeout=5,
            num_retries=2,
        )
        config, options = model_config(lm, option="lm")
        assert type(config) is ModelConfig
        assert config.model == "gpt-4o-mini"
        assert config.base_url == "http://127.0.0.1:9/v1"
        assert (config.temperature, config.max_tokens, config.timeout) == (0.3, 100, 5)
        assert config.max_retries == 2
        assert config.api_key_env == "OPENAI_API_KEY"
        assert options == {}

    def test_api_key_as_a_value_is_kept_in_memory_only(self) -> None:
        """An api_key given to dspy.LM is the client's key, never in the repr, never pickled."""
        lm = dspy.LM("openai/m", api_base="http://127.0.0.1:9/v1", api_key="sk-secret-123456")
        config, _ = model_config(lm, option="lm")
        assert isinstance(config, KeyedModelConfig)
        assert config.api_key() == "sk-secret-123456"
        assert config.api_key_env is None
        assert "sk-secret" not in repr(config)
        with pytest.raises(TypeError, match="not pickled"):
            pickle.dumps(config)

    def test_request_options_become_per_call_defaults(self) -> None:
        """top_p, stop, seed and max_completion_tokens are options for each call."""
        lm = dspy.LM("openai/o3-mini", max_tokens=16000, top_p=0.5, stop=["\n"], seed=7)
        config, options = model_config(lm, option="lm")
        assert config.max_tokens is None  # a reasoning model's limit is max_completion_tokens
        assert options == {
            "max_completion_tokens": 16000,
            "top_p": 0.5,
            "stop": ["\n"],
            "seed": 7,
        }

    def test_client_settings_the_engine_cannot_send_are_refused(self) -> None:
        """headers and api_version are named in the error, not silently dropped."""
        lm = dspy.LM("openai/m", headers={"X": "1"}, api_version="2024")
        with pytest.raises(ConfigError, match=r"`lm` .*'api_version', 'headers'"):
            model_config(lm, option="lm")

    @pytest.mark.parametrize(
        ("name", "base_url", "key_env"),
        [
            ("gpt-4o-mini", "https://api.openai.com/v1", "OPENAI_API_KEY"),
            ("openai/gpt-4o-mini", "https://api.openai.com/v1", "OPENAI_API_KEY"),
            ("openrouter/meta/llama-3", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
            ("groq/llama-3.1-8b", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
            ("mistral/mistral-small", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
            ("ollama_chat/llama3", "http://localhost:11434/v1", None),
        ],
    )
    def test_provider_prefixes_map_to_openai_compatible_servers(
        self, name: str, base_url: str, key_env: str | None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A litellm-style name gives the model id, the provider's URL and its key variable."""
        for provider in PROVIDERS.values():
            for variable in provider.base_env:
                monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
        config, _ = model_config(name, option="reflection_lm")
        assert config.model == name.partition("/")[2] if "/" in name else name
        assert config.base_url == base_url
        assert config.api_key_env == key_env

    def test_base_url_from_the_environment_as_litellm_reads_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """OPENAI_BASE_URL points 'openai/...' at another server, as it does for litellm."""
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
        config, _ = model_config("openai/m", option="lm")
        assert config.base_url == "http://127.0.0.1:8000/v1"

    def test_unsupported_provider_lists_the_supported_ones(self) -> None:
        """A provider that does not speak OpenAI's protocol is refused with what to do."""
        with pytest.raises(ConfigError) as info:
            model_config(dspy.LM("anthropic/claude-3-5-haiku"), option="lm")
        message = str(info.value)
        assert message.startswith("`lm` names 'anthropic/claude-3-5-haiku'")
        assert "openai/, hosted_vllm/" in message
        assert "api_base=" in message

    def test_hosted_vllm_needs_an_address(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """hosted_vllm/ without api_base says to pass it."""
        monkeypatch.delenv("HOSTED_VLLM_API_BASE", raising=False)
        with pytest.raises(ConfigError, match="pass api_base="):
            model_config("hosted_vllm/qwen", option="lm")
        config, _ = model_config(
            dspy.LM("hosted_vllm/qwen", api_base="http://127.0.0.1:8000/v1"), option="lm"
        )
        assert (config.base_url, config.api_key_env) == ("http://127.0.0.1:8000/v1", None)

    def test_text_model_type_and_custom_engines_are_refused(self) -> None:
        """The engine sends chat completions through its own client: say so."""
        with pytest.raises(ConfigError, match="model_type='text'"):
            model_config(dspy.LM("openai/m", model_type="text"), option="lm")

        class Engine:
            def complete(self, request: object) -> object:
                raise AssertionError("never called")

        with pytest.raises(ConfigError, match="custom engine"):
            model_config(dspy.LM("openai/m", engine=Engine()), option="lm")

    def test_a_bad_value_names_the_option(self) -> None:
        """Neither an LM nor a config nor a name: the error names the argument."""
        with pytest.raises(ConfigError, match=r"`reflection_lm` must be a dspy.LM"):
            model_config(42, option="reflection_lm")
        with pytest.raises(ConfigError, match=r"`lm` \('openai/m'\): `temperature` must be"):
            model_config(dspy.LM("openai/m", temperature=3.0), option="lm")

    def test_a_model_config_is_taken_as_it_is(self) -> None:
        """A ModelConfig passes through unchanged."""
        config = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", api_key_env=None)
        assert model_config(config, option="lm") == (config, {})


class TestResolveModels:
    def test_lm_is_the_metric_model_and_reflection_the_fallback(self) -> None:
        """lm fills Models.metric, reflection_lm Models.reflection; the judge is the metric's."""
        judge = resolve_models(lm="openai/a", reflection_lm="openai/b", models=None)
        assert judge.models.metric is not None and judge.models.metric.model == "a"
        assert judge.models.judge is judge.models.metric
        only_reflection = resolve_models(lm=None, reflection_lm="openai/b", models=None)
        assert only_reflection.models.judge is not None
        assert only_reflection.models.judge.model == "b"

    def test_a_model_named_twice_is_refused(self) -> None:
        """lm and models.metric both given is an error naming both."""
        models = Models(metric=ModelConfig(model="x"))
        with pytest.raises(ConfigError, match=r"`lm` and `models.metric` both name"):
            resolve_models(lm="openai/a", reflection_lm=None, models=models)

    def test_rpm_applies_to_every_model_and_needs_one(self) -> None:
        """rpm/tpm land on each model; with no model they are refused."""
        judge = resolve_models(lm="openai/a", reflection_lm="openai/b", models=None, rpm=600)
        assert judge.models.metric is not None and judge.models.metric.rpm == 600
        assert judge.models.reflection is not None and judge.models.reflection.rpm == 600
        with pytest.raises(ConfigError, match="`rpm` limits the judge's model"):
            resolve_models(lm=None, reflection_lm=None, models=None, rpm=600)
        with pytest.raises(ConfigError, match="`tpm` must be a positive number"):
            resolve_models(lm="openai/a", reflection_lm=None, models=None, tpm=-1)

    def test_models_must_be_models(self) -> None:
        """A dict for models= is refused by name."""
        with pytest.raises(ConfigError, match=r"`models` must be an evaluator\.Models"):
            resolve_models(lm=None, reflection_lm=None, models={"metric": "x"})

    def test_a_missing_key_names_its_variable_and_argument(self) -> None:
        """check_keys says which variable is unset, for which argument, and how to fix it."""
        judge = resolve_models(lm=dspy.LM("openai/gpt-4o-mini"), reflection_lm=None, models=None)
        with pytest.raises(ConfigError) as info:
            check_keys(judge)
        message = str(info.value)
        assert "OPENAI_API_KEY is not set" in message
        assert "(`lm`)" in message
        assert "api_key=" in message


class TestSimulatorConfig:
    def test_forms_of_the_option(self, tmp_path: Path) -> None:
        """A SimulatorConfig, a dict and a JSON file give the same config."""
        config = SimulatorConfig(latency_ms=5, rpm=600)
        path = tmp_path / "sim.json"
        path.write_text(json.dumps({"latency_ms": 5, "rpm": 600}))
        assert simulator_config(config) is config
        assert simulator_config({"latency_ms": 5, "rpm": 600}) == config
        assert simulator_config(path) == config
        assert simulator_config(None) is None

    def test_bad_files_and_values_name_the_option(self, tmp_path: Path) -> None:
        """A missing file, broken JSON or a bad field is a ConfigError naming `simulator`."""
        with pytest.raises(ConfigError, match=r"`simulator` cannot read"):
            simulator_config(tmp_path / "none.json")
        broken = tmp_path / "broken.json"
        broken.write_text("{")
        with pytest.raises(ConfigError, match=r"`simulator` '.*broken.json'"):
            simulator_config(broken)
        with pytest.raises(ConfigError, match="`rpm` must be positive"):
            simulator_config({"rpm": -1})
        with pytest.raises(ConfigError, match=r"must be an llm_client\.SimulatorConfig"):
            simulator_config(3)


class TestServed:
    async def test_models_are_pointed_at_the_simulator_without_a_key(self) -> None:
        """served() starts a simulator and points every model at it, sending no key."""
        keyed, _ = model_config(
            dspy.LM("openai/gpt-4o-mini", api_key="sk-never-sent-000000"), option="lm"
        )
        models = Models(metric=keyed, reflection=ModelConfig(model="r"))
        async with served(models, SimulatorConfig(api_key=None)) as pointed:
            assert pointed.metric is not None and pointed.reflection is not None
            assert type(pointed.metric) is ModelConfig
            assert pointed.metric.api_key_env is None
            assert pointed.metric.base_url.startswith("http://127.0.0.1:")
            async with ModelClient(pointed.metric) as client:
                reply = await client.complete([{"role": "user", "content": "hello"}])
            assert reply.text
