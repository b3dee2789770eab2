"""The public names of ``reward``."""

from __future__ import annotations

import types

import reward


class TestAll:
    def test_all_matches_public_names(self) -> None:
        """``reward.__all__`` is sorted and lists exactly the public, non-module names."""
        public = {
            name
            for name, value in vars(reward).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)
        }
        assert reward.__all__ == sorted(reward.__all__)
        assert set(reward.__all__) == public

    def test_exports_come_from_the_package(self) -> None:
        """Every exported name is defined in a module of the package."""
        for name in reward.__all__:
            assert getattr(reward, name).__module__.startswith("reward.")
