"""SimulatorConfig and ModelSettings: refused when out of range, with the field named."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from llm_client import ModelClient, ModelConfigError, ModelSettings, Simulator, SimulatorConfig

from ..conftest import config, judge


class TestSimulatorConfig:
    @pytest.mark.parametrize(
        ("kwargs", "fragment"),
        [
            ({"host": "0.0.0.0"}, "loopback"),
            ({"error_500_rate": 0.7, "drop_rate": 0.5}, "add up to 1.2"),
            ({"rpm": 0}, "`rpm` must be positive"),
            ({"pass_rate": 2}, "`pass_rate`"),
        ],
    )
    def test_config_validation(self, kwargs: dict[str, Any], fragment: str) -> None:
        """A bad simulator setting is refused with a message naming it."""
        with pytest.raises(ModelConfigError, match=fragment):
            SimulatorConfig(**kwargs)


class TestModels:
    async def test_dict_settings_are_converted_and_served(self) -> None:
        """A dict of ModelSettings fields is converted at construction and takes effect:
        the model's noise flips its verdicts, and the server does not crash on it."""
        cfg = SimulatorConfig(models={"m": {"latency_ms": 0, "noise": 1.0}})  # type: ignore[dict-item]
        assert cfg.models == {"m": ModelSettings(latency_ms=0, noise=1.0)}
        async with (
            Simulator(cfg) as sim,
            ModelClient(config(sim, "m")) as client,
        ):
            reply = await client.complete(judge("Paris", "Paris"))
        assert reply.text.startswith("FAIL")

    @pytest.mark.parametrize(
        ("models", "field", "fragment"),
        [
            ({"m": {"latency_ms": -1}}, "models['m']", "`latency_ms` must be zero or more"),
            ({"m": {"latency": 200}}, "models['m']", "unknown field `latency`"),
            ({"m": {"noise": "high"}}, "models['m']", "Expected `float`, got `str`"),
            ({"m": 200}, "models['m']", "Expected `object`, got `int`"),
            ({7: ModelSettings()}, "models", "keys must be model names"),
            (["m"], "models", "must map model names to ModelSettings"),
        ],
    )
    def test_bad_entries_are_refused_with_the_entry_named(
        self, models: Any, field: str, fragment: str
    ) -> None:
        """A bad models entry is a ModelConfigError at construction naming the entry,
        what is wrong and the fields a dict may have."""
        with pytest.raises(ModelConfigError, match=re.escape(fragment)) as info:
            SimulatorConfig(models=models)
        assert info.value.field == field
        if field != "models":
            assert f"`{field}`" in str(info.value) and "reasoning_tokens" in str(info.value)

    def test_json_config_refuses_unknown_model_fields(self) -> None:
        """A JSON config (``--simulator``) with a misspelt model field is refused, with
        the path of the entry, rather than serving the default latency."""
        good = msgspec.json.decode(b'{"models": {"a": {"latency_ms": 5}}}', type=SimulatorConfig)
        assert good.models == {"a": ModelSettings(latency_ms=5)}
        with pytest.raises(msgspec.ValidationError, match=r"unknown field `latency`.*models"):
            msgspec.json.decode(b'{"models": {"a": {"latency": 5}}}', type=SimulatorConfig)
