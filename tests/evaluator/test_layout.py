"""The layout comment of ``evaluator/__init__.py`` names every sub-package of the engine,
and only sub-packages that exist."""

from __future__ import annotations

import re
from pathlib import Path

import evaluator

ENGINE = Path(evaluator.__file__).resolve().parent


def test_layout_comment_names_each_sub_package() -> None:
    """One ``- ``_name/``:`` line per sub-package, none stale and none missing."""
    doc = evaluator.__doc__ or ""
    named = set(re.findall(r"^- ``(_\w+)/``:", doc, re.MULTILINE))
    packages = {p.parent.name for p in ENGINE.glob("*/__init__.py")}
    assert named == packages, (sorted(named - packages), sorted(packages - named))
