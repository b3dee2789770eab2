"""SimulatorConfig and ModelSettings: refused when out of range, with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from llm_client import ModelConfigError, SimulatorConfig


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
