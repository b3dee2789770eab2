"""Each package's __all__ and its public names agree, sorted (anyio, httpx do the same)."""

from __future__ import annotations

import importlib
import types

import pytest


@pytest.mark.parametrize("name", ["evaluator", "reward", "llm_client", "skynet"])
def test_all_matches_public_names(name: str) -> None:
    """__all__ lists exactly the public, non-module names (ruff's RUF022 keeps it sorted),
    including those a package imports lazily (listed by its ``__dir__``)."""
    module = importlib.import_module(name)
    public = {
        key
        for key in dir(module)
        if not key.startswith("_") and not isinstance(getattr(module, key), types.ModuleType)
    }
    assert set(module.__all__) == public
    assert len(module.__all__) == len(set(module.__all__))
