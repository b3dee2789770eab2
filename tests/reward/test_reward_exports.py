"""The public names of ``reward`` come from the package (``__all__``: tests/test_exports.py)."""

from __future__ import annotations

import reward


class TestAll:
    def test_exports_come_from_the_package(self) -> None:
        """Every exported name is defined in a module of the package."""
        for name in reward.__all__:
            assert getattr(reward, name).__module__.startswith("reward.")
