"""Tests of the judges' models file and flags: every kind of mistake is refused with the
file, line, model, key and fix; valid files (TOML and JSON) give the same judges."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from evaluator._exceptions import ConfigError
from evaluator._judges import (
    JudgeSpec,
    ModelsFileError,
    check_keys,
    choose_reference,
    judges_from_flags,
    load_models_file,
)
from llm_client import ModelSettings, SimulatorConfig

GOOD = """\
[providers.openai]
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
temperature = 0.0
rpm = 500

[providers.local]
base_url = "http://127.0.0.1:8000/v1"
api_key_env = "none"

[[models]]
name = "gpt-4.1-mini"
label = "mini"
provider = "openai"
price_input = 0.4
price_output = 1.6
rpm = 100

[[models]]
name = "gpt-4.1"
provider = "openai"
max_tokens = 64

[[models]]
name = "qwen3-8b"
provider = "local"
"""


def write(tmp_path: Path, text: str, name: str = "models.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(tmp_path: Path, text: str, name: str = "models.toml") -> ModelsFileError:
    path = write(tmp_path, text, name)
    with pytest.raises(ModelsFileError) as info:
        load_models_file(path)
    assert str(path) in str(info.value)
    return info.value


class TestLoadModelsFile:
    def test_good_file(self, tmp_path: Path) -> None:
        """Models take their provider's settings, their own win, labels default to names."""
        mini, large, local = load_models_file(write(tmp_path, GOOD))
        assert (mini.label, mini.model, mini.provider) == ("mini", "gpt-4.1-mini", "openai")
        assert mini.rpm == 100 and mini.temperature == 0.0 and mini.price_output == 1.6
        assert mini.base_url == "https://api.openai.com/v1"
        assert mini.api_key_env == "OPENAI_API_KEY"
        assert (large.label, large.rpm, large.max_tokens) == ("gpt-4.1", 500, 64)
        assert large.price_input is None
        assert local.api_key_env is None and local.base_url == "http://127.0.0.1:8000/v1"
        assert local.config().api_key() is None

    def test_call_options_reach_the_client_config(self, tmp_path: Path) -> None:
        """temperature, max_tokens and reasoning_effort (a provider's or a model's own) are
        the model client's per-model defaults, sent with every call."""
        text = GOOD.replace('name = "gpt-4.1"\n', 'name = "gpt-4.1"\nreasoning_effort = "High"\n')
        _, large, _ = load_models_file(write(tmp_path, text))
        config = large.config()
        assert (config.reasoning_effort, config.max_tokens, config.temperature) == (
            "high",
            64,
            0.0,
        )

    def test_hedge_reaches_the_client_config(self, tmp_path: Path) -> None:
        """``hedge = 0.95`` (a model's or its provider's) hedges that model's calls."""
        from llm_client import Hedge

        text = GOOD.replace('name = "gpt-4.1"\n', 'name = "gpt-4.1"\nhedge = 0.95\n')
        mini, large, _ = load_models_file(write(tmp_path, text))
        assert large.config().hedge == Hedge(quantile=0.95)
        assert mini.config().hedge is None

    def test_json_same_as_toml(self, tmp_path: Path) -> None:
        """The JSON form of a file gives the same judges as its TOML form (sources aside)."""
        import tomllib

        data = tomllib.loads(GOOD)
        data["providers"]["local"]["api_key_env"] = None  # JSON can say null
        from_toml = load_models_file(write(tmp_path, GOOD))
        from_json = load_models_file(write(tmp_path, json.dumps(data), "models.json"))
        strip = [(s.label, s.model, s.base_url, s.api_key_env, s.rpm) for s in from_toml]
        assert strip == [(s.label, s.model, s.base_url, s.api_key_env, s.rpm) for s in from_json]

    def test_fallback_only_fills_gaps(self, tmp_path: Path) -> None:
        """Fallbacks (the command line's) fill what neither model nor provider sets; the
        base URL and key variable only as a pair."""
        text = '[[models]]\nname = "a"\n\n[[models]]\nname = "b"\nrpm = 7\n' + (
            'base_url = "http://127.0.0.1:1/v1"\napi_key_env = "B_KEY"\n'
        )
        fallback = {"base_url": "http://127.0.0.1:2/v1", "api_key_env": "FLAG_KEY", "rpm": 60}
        a, b = load_models_file(write(tmp_path, text), fallback=fallback)
        assert (a.base_url, a.api_key_env, a.rpm) == ("http://127.0.0.1:2/v1", "FLAG_KEY", 60)
        assert (b.base_url, b.api_key_env, b.rpm) == ("http://127.0.0.1:1/v1", "B_KEY", 7)

    @pytest.mark.parametrize(
        ("text", "pieces"),
        [
            (
                '[[models]]\nname = "m"\ntemprature = 0.2\n',
                [
                    ":3:",
                    "model 'm' ([[models]] #1)",
                    "unknown key `temprature`",
                    "did you mean `temperature`",
                ],
            ),
            (
                '[[models]]\nname = "m"\nrpm = "500"\n',
                [
                    ":3:",
                    "`rpm` (requests per minute) must be a number",
                    "a string ('500')",
                    "rpm = 500",
                ],
            ),
            ('[[models]]\nname = "m"\nrpm = true\n', ["`rpm`", "must be a number", "a boolean"]),
            (
                '[[models]]\nname = "m"\nmax_tokens = 64.5\n',
                ["`max_tokens`", "must be an integer", "max_tokens = 256"],
            ),
            (
                '[[models]]\nname = "a"\n\n[[models]]\nlabel = "b"\n',
                [":4:", "model 'b' ([[models]] #2)", "no `name`", 'name = "<the model'],
            ),
            (
                '[[models]]\nname = "gpt"\n\n[[models]]\nname = "gpt"\n',
                [
                    ":5:",
                    "label 'gpt' is already used by model 'gpt' ([[models]] #1)",
                    "unique label",
                ],
            ),
            (
                '[[models]]\nname = "m"\nbase_url = "https://api.anthropic.com/v1/"\n',
                [":3:", "`base_url` is set but `api_key_env` is not", "only to the base URL"],
            ),
            (
                '[providers.p]\napi_key_env = "P_KEY"\n\n[[models]]\nname = "m"\nprovider = "p"\n',
                [":2:", "[providers.p]", "`api_key_env` is set but `base_url` is not"],
            ),
            (
                '[[models]]\nname = "m"\nprovider = "opnai"\n\n[providers.openai]\n'
                'base_url = "https://x/v1"\napi_key_env = "K"\n',
                [
                    ":3:",
                    "provider 'opnai' is not defined",
                    "did you mean `openai`",
                    "[providers.openai]",
                ],
            ),
            (
                '[providers.p]\nname = "m"\n\n[[models]]\nname = "m"\n',
                [":2:", "[providers.p]", "`name` belongs in a [[models]] entry"],
            ),
            (
                '[[models]]\nname = "m"\nprice_input = 1.0\n',
                [":3:", "`price_input` is set but `price_output` is not", "give both"],
            ),
            ('[[models]]\nname = "m"\nrpm = -5\n', ["model 'm'", "`rpm` must be positive, got -5"]),
            (
                '[[models]]\nname = "m"\ntemperature = 3\n',
                [":3:", "`temperature` must be between 0 and 2"],
            ),
            (
                '[[models]]\nname = "m"\nhedge = 1.5\n',
                [":3:", "`hedge` quantile must be at least 0.5 and below 1"],
            ),
            (
                '[[models]]\nname = "m"\nreasoning_effort = "hgh"\n',
                [":3:", "`reasoning_effort` must be one of", "'high'"],
            ),
            ('[[model]]\nname = "m"\n', ["unknown top-level key `model`", "did you mean `models`"]),
            ('[providers.p]\nbase_url = "https://x/v1"\napi_key_env = "K"\n', ["no `models`"]),
            (
                '[models]\nname = "m"\n',
                ["`models` must be a list of tables", "one [[models]] table"],
            ),
            ("models = []\n", ["`models` is empty"]),
            ('[[models]]\nname = "m"\nrpm = \n', ["invalid TOML", "line 3"]),
        ],
    )
    def test_mistakes(self, tmp_path: Path, text: str, pieces: list[str]) -> None:
        """Each kind of mistake names the file, the line, the model or table, the key and
        the fix."""
        message = str(refused(tmp_path, text))
        for piece in pieces:
            assert piece in message, (piece, message)

    def test_json_mistakes_name_the_position(self, tmp_path: Path) -> None:
        """In JSON, a model is named by its position in `models`; broken JSON by its line."""
        bad = json.dumps({"models": [{"name": "a"}, {"name": "b", "rpm": "x"}]})
        assert "model 'b' (models[1])" in str(refused(tmp_path, bad, "models.json"))
        err = refused(tmp_path, '{"models": [\n{"name": "a"},\n]}', "models.json")
        assert err.line == 3 and "invalid JSON" in str(err)

    @pytest.mark.parametrize(
        "text",
        [
            '[[models]]\nname = "m"\nbase_url = "https://x/v1"\napi_key_env = "sk-live-SECRET123"\n',
            '[[models]]\nname = "m"\napi_key = "sk-live-SECRET123"\n',
        ],
    )
    def test_a_key_in_the_file_is_never_echoed(self, tmp_path: Path, text: str) -> None:
        """A key pasted into the file is refused with the fix, and its value is not shown."""
        message = str(refused(tmp_path, text))
        assert "SECRET123" not in message
        assert "environment variable" in message

    def test_file_itself(self, tmp_path: Path) -> None:
        """A missing file, a wrong suffix and non-UTF-8 bytes are each refused by name."""
        with pytest.raises(ModelsFileError, match="no such file"):
            load_models_file(tmp_path / "nope.toml")
        assert "ends in .toml or .json, got '.yaml'" in str(refused(tmp_path, "x", "models.yaml"))
        path = tmp_path / "latin.toml"
        path.write_bytes(b'[[models]]\nname = "caf\xe9"\n')
        with pytest.raises(ModelsFileError, match="not UTF-8"):
            load_models_file(path)

    def test_error_keeps_its_data_and_pickles(self, tmp_path: Path) -> None:
        """The error carries path, line, model and key, and survives a pickle round trip."""
        err = refused(tmp_path, '[[models]]\nname = "m"\nrpm = "x"\n')
        assert (err.line, err.key, err.where) == (3, "rpm", "model 'm' ([[models]] #1)")
        again = pickle.loads(pickle.dumps(err))
        assert str(again) == str(err) and again.key == "rpm"
        assert isinstance(err, ConfigError)


class TestCheckKeys:
    def test_file_key_not_set(self, tmp_path: Path) -> None:
        """A key variable that is not set names the file, the model and the variable."""
        specs = load_models_file(write(tmp_path, GOOD))
        with pytest.raises(ModelsFileError) as info:
            check_keys(specs, environ={})
        message = str(info.value)
        assert "model 'mini' ([[models]] #1)" in message
        assert "environment variable OPENAI_API_KEY" in message
        assert 'api_key_env = "none"' in message

    def test_keys_set(self, tmp_path: Path) -> None:
        """With every variable set (the keyless local model needs none) nothing is raised."""
        check_keys(load_models_file(write(tmp_path, GOOD)), environ={"OPENAI_API_KEY": "k"})

    def test_empty_key_is_not_set(self) -> None:
        """An empty variable counts as not set."""
        spec = JudgeSpec(label="a", model="a", api_key_env="MY_KEY", source="--models")
        with pytest.raises(ConfigError, match="--api-key-env of model 'a'"):
            check_keys([spec], environ={"MY_KEY": ""})


class TestJudgesFromFlags:
    def test_models_flag(self) -> None:
        """--models with one base URL and key variable: one spec each, labels the names."""
        specs = judges_from_flags(
            models="a, b",
            base_url="http://127.0.0.1:9/v1",
            api_key_env="none",
            rpm=60,
            price=[("b", 1.0, 2.0)],
        )
        assert [(s.label, s.base_url, s.api_key_env, s.rpm) for s in specs] == [
            ("a", "http://127.0.0.1:9/v1", None, 60),
            ("b", "http://127.0.0.1:9/v1", None, 60),
        ]
        assert (specs[1].price_input, specs[1].price_output) == (1.0, 2.0)

    def test_default_key_variable(self) -> None:
        """Without --api-key-env the key is OPENAI_API_KEY's, and it must be set."""
        with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
            judges_from_flags(models="a", environ={})
        (spec,) = judges_from_flags(models="a", environ={"OPENAI_API_KEY": "k"})
        assert spec.base_url == "https://api.openai.com/v1"

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({}, "one of them"),
            ({"models": "a", "models_file": "m.toml"}, "not both"),
            ({"models": " , "}, "at least one model"),
            ({"models": "a,a"}, "more than once"),
            ({"models": "a", "price": [("z", 1.0, 1.0)]}, "--price names model 'z'"),
            ({"models": "a", "repeat": 0}, "--repeat must be a whole number of at least 1"),
            ({"models": "a", "repeat": 101}, "--repeat must be at most 100"),
            ({"models": "a", "project": -1}, "--project must be a whole number"),
            ({"models": "a", "base_url": "ftp://x"}, "--models 'a'.*base_url"),
        ],
    )
    def test_mistakes(self, kwargs: dict[str, object], match: str) -> None:
        """Flag mistakes are usage errors naming the flag."""
        with pytest.raises(ConfigError, match=match):
            judges_from_flags(api_key_env="none", **kwargs)  # type: ignore[arg-type]

    def test_price_set_twice(self, tmp_path: Path) -> None:
        """--price for a model whose file entry has a price is refused: keep one."""
        with pytest.raises(ConfigError, match="both set a price"):
            judges_from_flags(
                models_file=write(tmp_path, GOOD),
                price=[("mini", 1.0, 1.0)],
                environ={"OPENAI_API_KEY": "k"},
            )

    def test_simulator_serves_every_model(self, tmp_path: Path) -> None:
        """With --simulator no key is needed, but each model must be one it serves."""
        sim = SimulatorConfig(models={"gpt-4.1": ModelSettings(), "gpt-4.1-mini": ModelSettings()})
        with pytest.raises(ConfigError, match=r"no model 'qwen3-8b' \(qwen3-8b\)"):
            judges_from_flags(models_file=write(tmp_path, GOOD), simulator=sim, environ={})
        sim = SimulatorConfig()  # serves any name
        specs = judges_from_flags(models_file=write(tmp_path, GOOD), simulator=sim, environ={})
        assert len(specs) == 3


class TestChooseReference:
    def test_choices(self) -> None:
        """--reference must be a label; the default is the first judge, or none with labels."""
        specs = [JudgeSpec(label=x, model=x) for x in ("a", "b")]
        assert choose_reference(specs, None, None) == "a"
        assert choose_reference(specs, "b", None) == "b"
        assert choose_reference(specs, None, "human") is None
        with pytest.raises(ConfigError, match="--reference 'c' is not one of"):
            choose_reference(specs, "c", None)
