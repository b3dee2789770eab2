"""Helpers for the model client tests: a simulator per test, message builders."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from llm_client import ModelConfig, Simulator, SimulatorConfig


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def judge(answer: str, expected: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You grade answers. Answer PASS or FAIL."},
        {"role": "user", "content": f"Answer: {answer}\nExpected: {expected}"},
    ]


@pytest.fixture
def make_sim() -> Callable[..., Any]:
    """``async with make_sim(**config) as sim``: a simulator on an ephemeral port."""

    def make(**kwargs: Any) -> Simulator:
        return Simulator(SimulatorConfig(**kwargs))

    return make


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig()) as server:
        yield server


def config(sim: Simulator, model: str = "judge-1", **kwargs: Any) -> ModelConfig:
    kwargs.setdefault("api_key_env", None)
    return ModelConfig(model=model, base_url=sim.base_url, **kwargs)
