"""The result cache through the Evaluator: hits, invalidation, tiers, errors, the report."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from evaluator._cache import CacheWarning
from evaluator._call._results import Result
from evaluator._exceptions import ConfigError
from evaluator._models import Models
from evaluator._pipeline import Evaluator
from llm_client import ModelConfig, Simulator, SimulatorConfig
from tests._helpers import write

# A program and a judge metric, both on the simulator: each call a real HTTP request.
PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["q"])
"""
JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    verdict = llm("Answer PASS or FAIL.", input=f"{input['q']} {output}")
    ok = float(len(verdict) % 2)
    return ok, {"feedback": f"verdict {verdict[:20]}", "scores": {"odd": ok}}
"""
# A CPU metric that counts its calls in a file, so that a test can see what ran.
COUNTING = """
import os

def score(input, output, expected=None):
    with open(os.environ["COUNT_FILE"], "a") as fh:
        fh.write(str(input["n"]) + "\\n")
    if input.get("boom"):
        raise ValueError("boom")
    return float(output == expected["label"]), {"feedback": f"saw {output!r}"}
"""
ECHO = """
def run(artifact, input):
    return f"{artifact}:{input['n'] % 2}"
"""


def rows(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": f"e{i}",
            "input": {"q": f"question {i}", "n": i, **extra},
            "expected": {"label": "a"},
        }
        for i in range(n)
    ]


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig()) as simulator:
        yield simulator


def models(sim: Simulator, **judge: Any) -> Models:
    def config(name: str, **settings: Any) -> ModelConfig:
        return ModelConfig(
            model=name,
            base_url=sim.base_url,
            api_key_env=None,
            price_input=1.0,
            price_output=2.0,
            **settings,
        )

    return Models(program=config("sim-program"), metric=config("sim-judge", **judge))


def counted(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def count_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "count.txt"
    monkeypatch.setenv("COUNT_FILE", str(path))
    return path


class TestHits:
    async def test_second_run_is_served_from_memory_identical(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """A repeated (artifact, examples) evaluation pays no model call and returns the
        same score, scores, feedback, observation, judge usage and output, cached=True."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, program, models=models(sim), cache=True) as ev:
            first = await ev.evaluate_many("Answer briefly.", rows(6))
            served = sim.statistics().served
            second = await ev.evaluate_many("Answer briefly.", rows(6))
            stats = ev.cache_statistics()
        assert served == 12  # 6 program + 6 judge calls, the first time only
        assert sim.statistics().served == served
        assert all(r.ok and not r.cached for r in first)
        assert all(r.cached for r in second)
        for fresh, hit in zip(first, second, strict=True):
            assert (hit.score, hit.scores, hit.feedback) == (
                fresh.score,
                fresh.scores,
                fresh.feedback,
            )
            assert hit.observation == fresh.observation and hit.judge == fresh.judge
            assert (hit.output, hit.example_id, hit.extra) == (
                fresh.output,
                fresh.example_id,
                fresh.extra,
            )
        assert stats is not None and (stats.memory_hits, stats.misses, stats.stored) == (6, 6, 6)

    async def test_off_by_default(self, tmp_path: Path, count_file: Path) -> None:
        """Without `cache`, every evaluation runs every example."""
        metric = write(tmp_path, "metric.py", COUNTING)
        async with Evaluator(metric, execution="inline") as ev:
            for _ in range(2):
                results = await ev.evaluate_many(None, [dict(r, output="a") for r in rows(3)])
            assert ev.cache_statistics() is None
        assert counted(count_file) == 6 and not any(r.cached for r in results)

    async def test_errors_are_not_cached(self, tmp_path: Path, count_file: Path) -> None:
        """An example whose metric raised runs again; its neighbours come from the cache."""
        metric = write(tmp_path, "metric.py", COUNTING)
        data = [dict(r, output="a") for r in rows(3)]
        data[1]["input"]["boom"] = True
        async with Evaluator(metric, execution="inline", cache=True) as ev:
            await ev.evaluate_many(None, data)
            again = await ev.evaluate_many(None, data)
        assert counted(count_file) == 4
        assert [r.cached for r in again] == [True, False, True]
        assert again[1].error is not None and again[1].error.kind == "metric_error"


SPEC = '\nREWARD_SPEC = {"weights": {"accuracy": 1, "speed": 0, "cost": 0}}\n'


def models_with(**settings: Any) -> Models:
    """A judge model's settings (never called: the metric makes no model call)."""
    fields = {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": None}
    return Models(metric=ModelConfig(**{**fields, **settings}))


class TestInvalidation:
    """Each part of the key, changed, makes the example run again."""

    async def run_twice(self, tmp_path: Path, count_file: Path, change: Any) -> int:
        """Run once, apply ``change`` (to files, data or options), run again on a disk
        cache; the metric calls of the second run."""
        cache = tmp_path / "cache"
        state: dict[str, Any] = {
            "metric": COUNTING,
            "program": ECHO,
            "artifact": "v1",
            "rows": rows(3),
            "models": models_with(),
        }
        runs = []
        for turn in range(2):
            if turn:
                change(state)
            metric = write(tmp_path, "metric.py", state["metric"])
            program = write(tmp_path, "program.py", state["program"])
            before = counted(count_file)
            async with Evaluator(
                metric,
                program,
                execution="inline",
                program_execution="inline",
                cache=cache,
                models=state["models"],
            ) as ev:
                await ev.evaluate_many(state["artifact"], state["rows"])
            runs.append(counted(count_file) - before)
        assert runs[0] == 3
        return runs[1]

    async def test_nothing_changed_nothing_runs(self, tmp_path: Path, count_file: Path) -> None:
        """The same files, artifact, examples and models: every result from disk."""
        assert await self.run_twice(tmp_path, count_file, lambda s: None) == 0

    @pytest.mark.parametrize(
        ("change", "runs"),
        [
            pytest.param(lambda s: s.update(metric=s["metric"] + "\n# edited\n"), 3, id="metric-source"),
            pytest.param(lambda s: s.update(metric=s["metric"] + SPEC), 3, id="reward-spec"),
            pytest.param(lambda s: s.update(program=s["program"] + "\n# edited\n"), 3, id="program-source"),
            pytest.param(lambda s: s.update(artifact="v2"), 3, id="artifact"),
            pytest.param(lambda s: s["rows"][0].update(id="renamed"), 1, id="example-id"),
            pytest.param(lambda s: s["rows"][0]["input"].update(q="other"), 1, id="example-input"),
            pytest.param(lambda s: s["rows"][0].update(expected={"label": "b"}), 1, id="example-expected"),
            pytest.param(lambda s: s["rows"][0].update(output="given"), 1, id="example-output"),
            pytest.param(lambda s: s.update(models=models_with(temperature=0.5)), 3, id="model-temperature"),
            pytest.param(lambda s: s.update(models=models_with(model="other")), 3, id="model-name"),
        ],
    )  # fmt: skip
    async def test_a_change_runs_again(
        self, tmp_path: Path, count_file: Path, change: Any, runs: int
    ) -> None:
        """A changed metric or program source, REWARD_SPEC, artifact, model setting (all
        examples), or example id, input, expected or given output (that example only)
        misses the cache; the rest is served from it."""
        assert await self.run_twice(tmp_path, count_file, change) == runs

    @pytest.mark.parametrize("edit", ["helper", "nothing"])
    async def test_a_helper_module_is_part_of_the_key(
        self, tmp_path: Path, count_file: Path, edit: str
    ) -> None:
        """A helper module beside the metric (imported at load) is keyed by its source:
        editing it runs every example again; leaving it alone keeps every hit."""
        helper = write(tmp_path, f"grading_{edit}.py", "PREFIX = 'saw'\n")
        source = COUNTING.replace("import os", f"import os\nimport grading_{edit}")
        metric = write(tmp_path, "metric.py", source)
        runs = []
        for turn in range(2):
            if turn and edit == "helper":
                helper.write_text("PREFIX = 'got'\n")
            before = counted(count_file)
            async with Evaluator(metric, execution="inline", cache=tmp_path / "c") as ev:
                await ev.evaluate_many(None, [dict(r, output="a") for r in rows(3)])
            runs.append(counted(count_file) - before)
        assert runs == ([3, 3] if edit == "helper" else [3, 0])

    async def test_rate_limits_are_not_in_the_key(self, tmp_path: Path, count_file: Path) -> None:
        """Model settings that cannot change a result (rpm, concurrency) keep the hits."""
        changed = models_with(rpm=10, max_concurrency=3)
        assert await self.run_twice(tmp_path, count_file, lambda s: s.update(models=changed)) == 0


async def _stored_on_disk(cache: Path, n: int) -> None:
    """Wait (at most 10 s) until the cache file holds ``n`` results: stores are written
    by a background writer after the results are returned."""
    import sqlite3

    for _ in range(1000):
        conn = sqlite3.connect(f"file:{cache / 'results.sqlite3'}?mode=ro", uri=True)
        try:
            if conn.execute("SELECT count(*) FROM results").fetchone()[0] >= n:
                return
        except sqlite3.Error:
            pass
        finally:
            conn.close()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{n} results never reached {cache}")


class TestDisk:
    async def test_shared_across_evaluators(self, tmp_path: Path, count_file: Path) -> None:
        """A second Evaluator on the same directory takes the first one's results."""
        metric = write(tmp_path, "metric.py", COUNTING)
        data = [dict(r, output="a") for r in rows(5)]
        for _ in range(2):
            async with Evaluator(metric, execution="inline", cache=tmp_path / "c") as ev:
                results = await ev.evaluate_many(None, data)
                stats = ev.cache_statistics()
        assert counted(count_file) == 5
        assert all(r.cached for r in results)
        assert stats is not None and stats.disk_hits == 5

    async def test_concurrent_lookups_share_reads_and_count_right(
        self, tmp_path: Path, count_file: Path
    ) -> None:
        """Eight evaluations at once on a fresh Evaluator each get their own examples'
        results from disk, and the hits are counted once each."""
        import asyncio

        metric = write(tmp_path, "metric.py", COUNTING)
        batches = [[dict(r, id=f"b{b}-{r['id']}", output="a") for r in rows(5)] for b in range(8)]
        async with Evaluator(metric, execution="inline", cache=tmp_path / "c") as ev:
            await ev.evaluate_many(None, [r for batch in batches for r in batch])
        async with Evaluator(metric, execution="inline", cache=tmp_path / "c") as ev:
            got = await asyncio.gather(*(ev.evaluate_many(None, batch) for batch in batches))
            stats = ev.cache_statistics()
        for batch, results in zip(batches, got, strict=True):
            assert [r.example_id for r in results] == [row["id"] for row in batch]
            assert all(r.cached for r in results)
        assert stats is not None and (stats.disk_hits, stats.memory_hits, stats.misses) == (
            40,
            0,
            0,
        )
        assert counted(count_file) == 40

    async def test_corrupt_file_is_moved_aside_and_rebuilt(
        self, tmp_path: Path, count_file: Path
    ) -> None:
        """A cache file that is not SQLite gives a CacheWarning naming where it went; the
        run goes on, the old bytes are kept, and the new cache works."""
        cache = tmp_path / "c"
        cache.mkdir()
        (cache / "results.sqlite3").write_bytes(b"this is not a database" * 100)
        metric = write(tmp_path, "metric.py", COUNTING)
        data = [dict(r, output="a") for r in rows(3)]
        with pytest.warns(CacheWarning, match="not a usable SQLite database.*moved it to"):
            async with Evaluator(metric, execution="inline", cache=cache) as ev:
                results = await ev.evaluate_many(None, data)
        assert all(r.ok for r in results)
        kept = list(cache.glob("results.sqlite3.bad-*"))
        assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not")
        async with Evaluator(metric, execution="inline", cache=cache) as ev:
            again = await ev.evaluate_many(None, data)
        assert all(r.cached for r in again)

    async def test_a_file_overwritten_mid_run(self, tmp_path: Path, count_file: Path) -> None:
        """The cache file overwritten while a run uses it (another program, a bad copy):
        a CacheWarning, the run goes on from memory with every result right, and the next
        run moves the bad file aside and starts a new cache."""
        cache = tmp_path / "c"
        metric = write(tmp_path, "metric.py", COUNTING)
        first = [dict(r, output="a") for r in rows(300)]
        more = [dict(r, id=f"m{r['id']}", output="a") for r in rows(300)]
        async with Evaluator(metric, execution="inline", cache=cache) as ev:
            await ev.evaluate_many(None, first)
            await _stored_on_disk(cache, 300)  # the writer's batch is in, not half-written
            for name in ("results.sqlite3", "results.sqlite3-wal"):
                path = cache / name
                if path.exists():
                    path.write_bytes(b"\xff" * path.stat().st_size)
            with pytest.warns(CacheWarning, match="memory cache only"):
                fresh = await ev.evaluate_many(None, more)
            again = await ev.evaluate_many(None, first + more)
        assert all(r.ok for r in fresh) and all(r.cached for r in again)
        with pytest.warns(CacheWarning, match="moved it to"):
            async with Evaluator(metric, execution="inline", cache=cache) as ev:
                await ev.evaluate_many(None, first[:3])
        assert counted(count_file) == 603

    async def test_foreign_database_is_not_touched(self, tmp_path: Path, count_file: Path) -> None:
        """Another program's SQLite file is moved aside unchanged, with a warning."""
        import sqlite3

        cache = tmp_path / "c"
        cache.mkdir()
        conn = sqlite3.connect(cache / "results.sqlite3")
        conn.execute("CREATE TABLE theirs (x)")
        conn.execute("INSERT INTO theirs VALUES (42)")
        conn.commit()
        conn.close()
        metric = write(tmp_path, "metric.py", COUNTING)
        with pytest.warns(CacheWarning, match="another program's database"):
            async with Evaluator(metric, execution="inline", cache=cache) as ev:
                await ev.evaluate_many(None, [dict(r, output="a") for r in rows(2)])
        (kept,) = cache.glob("results.sqlite3.bad-*")
        assert sqlite3.connect(kept).execute("SELECT x FROM theirs").fetchall() == [(42,)]

    async def test_a_directory_that_cannot_be_made_is_a_config_error(self, tmp_path: Path) -> None:
        """A cache directory under a regular file fails at open with a ConfigError that
        says the directory cannot hold a cache, and leaves nothing running."""
        import threading

        path = write(tmp_path, "metric.py", COUNTING)
        ev = Evaluator(path, execution="inline", cache=path / "sub")
        with pytest.raises(ConfigError, match="cannot hold a result cache"):
            await ev.__aenter__()
        assert not [t for t in threading.enumerate() if t.name.startswith("skynet-eval-cache")]

    def test_a_file_is_refused_as_directory(self, tmp_path: Path) -> None:
        """`cache` naming a file is a ConfigError that says to give a directory."""
        path = write(tmp_path, "metric.py", COUNTING)
        with pytest.raises(ConfigError, match="`cache` must be a directory"):
            Evaluator(path, cache=path)


class TestReport:
    async def test_requested_executed_and_costs(self, tmp_path: Path, sim: Simulator) -> None:
        """The report says how many examples came from the cache, what was spent now,
        what the results represent, and what was saved."""
        program = write(tmp_path, "program.py", PROGRAM)
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, program, models=models(sim), cache=True) as ev:
            first = await ev.evaluate("Answer.", rows(4))
            second = await ev.evaluate("Answer.", rows(6))
        assert first.cache is not None and second.cache is not None
        assert (first.cache.requested, first.cache.cached, first.cache.executed) == (4, 0, 4)
        assert (second.cache.requested, second.cache.cached, second.cache.executed) == (6, 4, 2)
        spent, saved = second.cache.cost_spent_usd, second.cache.cost_saved_usd
        assert spent is not None and saved is not None and spent > 0 and saved > 0
        assert second.cache.cost_represented_usd == pytest.approx(spent + saved)
        assert saved == pytest.approx(first.cache.cost_spent_usd)
        assert not second.cache.measured_kept

    async def test_measured_metric_says_so(self, tmp_path: Path) -> None:
        """A metric scored on speed (reward with a speed weight) marks its cached results
        as keeping the measurements they were scored with."""
        metric = write(
            tmp_path,
            "metric.py",
            """
            from skynet import reward

            REWARD_SPEC = {
                "weights": {"accuracy": 0.5, "speed": 0.5, "cost": 0},
                "accuracy": {},
                "speed": {"reference": 100},
                "cost": {"reference": 0.01},
            }

            def score(input, output, expected=None):
                return reward(REWARD_SPEC, 1.0, "fine")
            """,
        )
        program = write(tmp_path, "program.py", ECHO)
        async with Evaluator(
            metric, program, execution="inline", program_execution="inline", cache=True
        ) as ev:
            fresh = await ev.evaluate_many("a", rows(2))
            report = await ev.evaluate("a", rows(2))
            hits = await ev.evaluate_many("a", rows(2))
        assert all(f.ok for f in fresh), fresh
        assert report.cache is not None and report.cache.measured_kept
        assert [h.observation for h in hits] == [f.observation for f in fresh]
        assert [h.score for h in hits] == [f.score for f in fresh]


def test_result_default_is_not_cached() -> None:
    """A Result built without `cached` says False."""
    assert Result(example_id=1, score=0.0).cached is False
