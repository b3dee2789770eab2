"""The race's page, read as HTML (no browser): one matrix row per candidate, each with
a cell per example, greyed from the round after its drop, and nothing runs a script."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from evaluator import Result
from evaluator._race import RaceResult, run_race
from evaluator._report.html._race import race_page, write_race_page


class MatrixReader(HTMLParser):
    """The matrix's rows: each candidate's drop round and its cells' (round, classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, dict[str, Any]] = {}
        self.current: dict[str, Any] | None = None
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "tr" and a.get("data-candidate") is not None:
            dropped = a.get("data-dropped-round") or None
            self.current = {"dropped": int(dropped) if dropped else None, "cells": []}
            self.rows[int(str(a["data-candidate"]))] = self.current
        if tag == "td" and self.current is not None and "cell" in str(a.get("class")).split():
            classes = set(str(a.get("class")).split())
            self.current["cells"].append((int(str(a["data-round"])), classes))

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self.current = None


async def four_candidates() -> RaceResult:
    rng = np.random.default_rng(5)
    table = (rng.random((4, 600)) < np.array([[0.2], [0.9], [0.5], [0.85]])).astype(float)

    async def evaluate(candidate: int, part: list[int]) -> list[Result]:
        return [Result(example_id=e, score=float(table[candidate, e])) for e in part]

    return await run_race(evaluate, [0, 1, 2, 3], range(600), labels=["a", "b", "c", "d"])


class TestRacePage:
    async def test_the_matrix_has_k_rows_greyed_after_the_drop(self, tmp_path: Path) -> None:
        """K rows of one cell per example; a dropped candidate's cells are grey exactly
        in the rounds after the one it was dropped in, and scored before."""
        race = await four_candidates()
        assert any(c.dropped_round is not None for c in race.candidates)
        page = write_race_page(race, tmp_path / "race.html")
        reader = MatrixReader()
        reader.feed(page.read_text())
        assert sorted(reader.rows) == [0, 1, 2, 3]
        for index, row in reader.rows.items():
            cells = row["cells"]
            assert len(cells) == len(race.example_ids)
            dropped = race.candidates[index].dropped_round
            assert row["dropped"] == dropped
            for number, classes in cells:
                greyed = "dropped" in classes
                assert greyed == (dropped is not None and number > dropped)
                assert greyed or any(c.startswith("s") and c[1:].isdigit() for c in classes)
        assert reader.scripts == 0

    async def test_labels_are_escaped(self) -> None:
        """A label with markup is shown as text."""
        race = await four_candidates()
        hostile = msgspec.structs.replace(race.candidates[0], label="<script>x</script>")
        race = msgspec.structs.replace(race, candidates=[hostile, *race.candidates[1:]])
        text = race_page(race)
        assert "<script>x" not in text and "&lt;script&gt;x" in text
