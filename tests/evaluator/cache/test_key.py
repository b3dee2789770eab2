"""The cache key: what it covers, what it leaves out, and values with no canonical form."""

from __future__ import annotations

import math
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from evaluator._cache import KeyMaker, ResultCache, depends_on_measurements
from evaluator._call._loader import load_metric
from evaluator._call._results import Result
from evaluator._data._dataset import Example
from evaluator._models import Models
from evaluator._pipeline import Evaluator

EXACT = """
def score(input, output, expected=None):
    return float(output == expected["label"]), {"feedback": "ok"}
"""


@pytest.fixture
def keys(tmp_path: Path) -> KeyMaker:
    path = tmp_path / "metric.py"
    path.write_text(EXACT)
    return KeyMaker(load_metric(path), None, Models())


def key(keys: KeyMaker, artifact: Any, **fields: Any) -> bytes | None:
    candidate = keys.candidate(artifact)
    assert candidate is not None
    example = Example(**{"id": 1, "input": {"a": 1}, "expected": None, **fields})
    return keys.keys(candidate, [example])[0]


class TestKeyMaker:
    def test_dict_order_does_not_matter(self, keys: KeyMaker) -> None:
        """The same input with its keys in another order has the same key."""
        assert key(keys, "p", input={"a": 1, "b": 2}) == key(keys, "p", input={"b": 2, "a": 1})

    def test_values_that_compare_alike_but_differ_have_different_keys(self, keys: KeyMaker) -> None:
        """NaN and None, 1 and 1.0 and True, text and bytes: each its own key."""
        forms = [math.nan, None, 1, 1.0, True, "1", b"1"]
        got = {key(keys, "p", input={"x": value}) for value in forms}
        assert len(got) == len(forms)

    def test_text_artifact_and_json_artifact_differ(self, keys: KeyMaker) -> None:
        """The artifact "[1]" (text) and [1] (a list) are different candidates."""
        assert keys.candidate("[1]") != keys.candidate([1])

    def test_a_value_with_no_canonical_form_has_no_key(self, keys: KeyMaker) -> None:
        """An object msgpack cannot encode makes its example (or artifact) uncacheable,
        never keyed by a repr that two different objects could share."""
        assert keys.candidate(object()) is None
        assert key(keys, "p", input={"x": object()}) is None

    def test_depends_on_measurements(self, tmp_path: Path) -> None:
        """A metric that calls reward or observation is scored on measurements; an exact
        match is not."""
        plain = tmp_path / "plain.py"
        plain.write_text(EXACT)
        measured = tmp_path / "measured.py"
        measured.write_text(
            textwrap.dedent("""
            from skynet import observation as seen

            def score(input, output, expected=None):
                return 1.0 / (1.0 + seen().duration_ms), {"feedback": "fast"}
            """)
        )
        assert not depends_on_measurements(load_metric(plain))
        assert depends_on_measurements(load_metric(measured))


class TestUncacheable:
    async def test_an_artifact_without_canonical_form_always_runs(self, tmp_path: Path) -> None:
        """An artifact that is a plain object runs every time, counted as uncacheable."""
        metric = tmp_path / "metric.py"
        metric.write_text(EXACT)
        program = tmp_path / "program.py"
        program.write_text("def run(artifact, input):\n    return 'a'\n")

        class Prompt:
            pass

        rows = [{"id": i, "input": {"n": i}, "expected": {"label": "a"}} for i in range(3)]
        async with Evaluator(
            metric, program, execution="inline", program_execution="inline", cache=True
        ) as ev:
            artifact = Prompt()
            for _ in range(2):
                results = await ev.evaluate_many(artifact, rows)
            stats = ev.cache_statistics()
        assert all(r.ok and not r.cached for r in results)
        assert stats is not None and stats.uncacheable == 6 and stats.stored == 0

    async def test_an_output_that_would_change_is_not_stored(self, tmp_path: Path) -> None:
        """A result whose output msgpack would turn into another type (a tuple becomes a
        list) is run again rather than changed."""
        metric = tmp_path / "metric.py"
        metric.write_text(EXACT)
        program = tmp_path / "program.py"
        program.write_text("def run(artifact, input):\n    return ('a', 1)\n")
        rows = [{"id": 0, "input": {"n": 0}, "expected": {"label": "a"}}]
        async with Evaluator(
            metric, program, execution="inline", program_execution="inline", cache=True
        ) as ev:
            await ev.evaluate_many("p", rows)
            (again,) = await ev.evaluate_many("p", rows)
            stats = ev.cache_statistics()
        assert not again.cached and again.output == ("a", 1)
        assert stats is not None and stats.not_stored == 2


class TestResultCache:
    async def test_memory_tier_is_bounded(self, keys: KeyMaker) -> None:
        """Past its byte bound the memory tier drops its oldest entries."""
        async with ResultCache(keys, max_memory_bytes=2000) as cache:
            examples = [Example(id=i, input={"n": i}) for i in range(100)]
            found = await cache.lookup("p", examples)
            cache.store(found, [Result(ex.id, 1.0, feedback="x" * 50) for ex in examples])
            entries = cache.statistics().memory_entries
            first = await cache.lookup("p", examples[:1])
            last = await cache.lookup("p", examples[-1:])
        assert 0 < entries < 100
        assert first.hit_count == 0 and last.hit_count == 1

    async def test_cancelled_run_leaves_no_cache_thread(self, tmp_path: Path) -> None:
        """Stopping a stream mid-run with the disk cache on, then closing, leaves none of
        the cache's threads running, and the results it delivered are in the cache."""
        metric = tmp_path / "metric.py"
        metric.write_text(
            "import time\n\ndef score(input, output, expected=None):\n"
            "    time.sleep(0.01)\n    return 1.0, {'feedback': 'ok'}\n"
        )
        rows = [{"id": i, "input": {"n": i}, "output": "a"} for i in range(5000)]
        seen = []
        async with (
            Evaluator(metric, execution="thread", cache=tmp_path / "c") as ev,
            ev.stream(None, rows) as results,
        ):
            async for result in results:
                seen.append(result.example_id)
                if len(seen) >= 50:
                    break  # leaving the block cancels what is still in flight
        left = [t.name for t in threading.enumerate() if t.name.startswith("skynet-eval-cache")]
        assert left == []
        async with Evaluator(metric, execution="thread", cache=tmp_path / "c") as ev:
            again = await ev.evaluate_many(None, [rows[i] for i in seen])
        assert all(r.cached for r in again)
