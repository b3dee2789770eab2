"""Each public module's ``__all__`` and its public names agree (anyio, httpx do the same).

One test walks every public module of the four packages: a package, or a module whose
dotted name has no part starting with ``_``. ruff's RUF022 keeps each ``__all__`` sorted.
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

PACKAGES = ("evaluator", "reward", "llm_client", "skynet")


def public_modules() -> list[str]:
    """The dotted names of the public modules, the four packages first."""
    names = list(PACKAGES)
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        for info in pkgutil.walk_packages(path, prefix=f"{package}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def test_the_walk_finds_the_public_submodules() -> None:
    """The walk sees past the packages themselves (its filter can fail)."""
    assert {"evaluator.dspy", "evaluator.gepa"} <= set(public_modules())


@pytest.mark.parametrize("name", public_modules())
def test_all_matches_public_names(name: str) -> None:
    """``__all__`` lists exactly the public, non-module names, once each, including those
    a package imports lazily (listed by its ``__dir__``)."""
    module = importlib.import_module(name)
    public = {
        key
        for key in dir(module)
        if not key.startswith("_") and not isinstance(getattr(module, key), types.ModuleType)
    }
    assert set(module.__all__) == public
    assert len(module.__all__) == len(set(module.__all__))
