"""User code cannot change measurements; the API key never shows; reflection never sees
``expected``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator._models import Models
from evaluator._pipeline import Evaluator
from llm_client import LLMError, ModelClient, ModelConfig, Simulator, SimulatorConfig
from tests._helpers import PROCESS, write

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-SECRET123"


# -- measurements -------------------------------------------------------------------------

# Sleeps 150 ms while every clock the engine might read reports that no time passed;
# "forever" leaves the clocks patched after the call (in a worker process only).
CLOCK_CHEAT = """
import time

_real_sleep = time.sleep
_saved = {n: getattr(time, n) for n in ("perf_counter_ns", "perf_counter", "monotonic",
                                       "monotonic_ns", "time", "time_ns")}

def run(artifact, input):
    for name in _saved:
        setattr(time, name, (lambda: 0) if name.endswith("_ns") else (lambda: 0.0))
    try:
        _real_sleep(0.15)
    finally:
        if not artifact.get("forever"):
            for name, fn in _saved.items():
                setattr(time, name, fn)
    return "done"
"""

TAMPER = """
import msgspec
from skynet import observation, reward

SPEC = {
    "weights": {"accuracy": 0.5, "speed": 0.5, "cost": 0.0},
    "accuracy": {},
    "speed": {"reference": 100},
    "cost": {"reference": 0.01},
}

def score(input, output, expected=None):
    obs = observation()
    if input.get("tamper"):
        for name, value in (("duration_ms", 0.001), ("queued_ms", 0.0), ("cost_usd", 0.0)):
            for attempt in (setattr, object.__setattr__, msgspec.structs.force_setattr):
                try:
                    attempt(obs, name, value)
                except Exception:
                    pass
    return reward(SPEC, 1.0, "ok")
"""

SLEEP_PROGRAM = """
import time

def run(artifact, input):
    time.sleep(0.05)
    return "out"
"""


class TestMeasurements:
    @pytest.mark.parametrize(
        ("execution", "forever"),
        [
            ("thread", False),
            ("inline", False),
            pytest.param("process", False, marks=pytest.mark.process),
            pytest.param("process", True, marks=pytest.mark.process),
        ],
    )
    async def test_patched_clocks_do_not_change_duration(
        self, tmp_path: Path, execution: str, forever: bool
    ) -> None:
        """A program that patches time.perf_counter_ns, perf_counter, monotonic and time
        to report no time still gets its real duration (>= 150 ms, tolerance: < 5 s)."""
        program = write(tmp_path, "program.py", CLOCK_CHEAT)
        metric = write(
            tmp_path, "metric.py", "def score(i, o):\n    return 1.0, {'feedback': ''}\n"
        )
        rows = [{"id": i, "input": {}} for i in range(3)]
        async with Evaluator(
            metric, program, program_execution=execution, execution="thread", timeout=10
        ) as ev:
            results = await ev.evaluate_many({"forever": forever}, rows)
        for r in results:
            assert r.ok, r.error
            assert r.observation.duration_ms is not None
            assert 150 <= r.observation.duration_ms < 5000, r.observation

    @pytest.mark.parametrize("execution", ["thread", "inline", PROCESS])
    async def test_metric_cannot_rewrite_the_observation(
        self, tmp_path: Path, execution: str
    ) -> None:
        """A metric that tries every way to mutate what observation() returned (setattr,
        object.__setattr__, msgspec force_setattr) cannot change the recorded
        observation, nor another example's score."""
        program = write(tmp_path, "program.py", SLEEP_PROGRAM)
        metric = write(tmp_path, "metric.py", TAMPER)
        tamper = [i % 2 == 0 for i in range(8)]
        rows = [{"id": i, "input": {"tamper": t}} for i, t in enumerate(tamper)]
        async with Evaluator(
            metric, program, execution=execution, program_execution="thread", timeout=10
        ) as ev:
            results = await ev.evaluate_many("a", rows)
        for r in results:
            assert r.ok, r.error
            assert r.observation.duration_ms is not None and r.observation.duration_ms >= 50
        honest = [r for r, t in zip(results, tamper, strict=True) if not t]
        # speed = 100 / (100 + ms) with ms >= 50: an honest example cannot score 1.0.
        assert all(r.scores["speed"] < 0.7 for r in honest)

    @pytest.mark.parametrize("execution", ["thread", "inline"])
    async def test_score_only_observation_is_not_shared_state(
        self, tmp_path: Path, execution: str
    ) -> None:
        """In a score-only run, a metric that force-sets fields of its observation on one
        example does not change what the next examples (or later runs) observe."""
        from evaluator._pipeline import _assembly

        saved = msgspec.structs.asdict(_assembly.SCORE_ONLY)
        metric = write(tmp_path, "metric.py", TAMPER)
        try:
            async with Evaluator(metric, execution=execution, timeout=10) as ev:
                (first,) = await ev.evaluate_many(
                    None, [{"id": 0, "input": {"tamper": True}, "output": 1}]
                )
                rest = await ev.evaluate_many(
                    None, [{"id": i, "input": {}, "output": 1} for i in range(1, 5)]
                )
            assert first.observation.duration_ms is None
            for r in rest:
                assert r.observation.duration_ms is None and r.observation.cost_usd is None
                assert r.scores["speed"] == 0.0, r.feedback  # time not measured: scores 0
        finally:
            # Undo the damage, if any, so other tests in this process are not affected.
            for name, value in saved.items():
                msgspec.structs.force_setattr(_assembly.SCORE_ONLY, name, value)


# -- the API key --------------------------------------------------------------------------

JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}")
    return (1.0 if reply.startswith("PASS") else 0.0), {"feedback": reply}
"""

LLM_PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["q"])
"""


class _EchoServer:
    """A provider on 127.0.0.1 that echoes the request's headers back in every way:
    in a JSON error, in plain text, in a response header, in a broken 200 body."""

    def __init__(self, status: int, shape: str) -> None:
        self.status = status
        self.shape = shape
        self._runner: Any = None
        self.base_url = ""

    async def __aenter__(self) -> _EchoServer:
        from aiohttp import web

        async def handle(request: Any) -> Any:
            auth = request.headers.get("Authorization", "")
            # The key first, so that no cut to a short snippet can hide a leak.
            echoed = (
                f"{auth} {auth.removeprefix('Bearer ')}; headers were {dict(request.headers)!r}"
            )
            if self.shape == "json":
                body = json.dumps(
                    {
                        "error": {
                            "message": f"Incorrect API key provided: {auth}. {echoed}",
                            "code": "invalid_api_key",
                        }
                    }
                )
            else:
                body = f"<html>{echoed}</html>"
            return web.Response(
                status=self.status,
                text=body,
                headers={"X-Echo-Authorization": auth},
                content_type="application/json" if self.shape == "json" else "text/html",
            )

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._runner.cleanup()


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


def _deep_text(value: Any) -> str:
    """Everything reachable in ``value`` as text: reprs, attributes, exception args."""
    seen: set[int] = set()
    parts: list[str] = []

    def walk(v: Any, depth: int) -> None:
        if depth > 12 or id(v) in seen:
            return
        seen.add(id(v))
        parts.append(repr(v))
        if isinstance(v, BaseException):
            parts.append(str(v))
            walk(v.args, depth + 1)
            walk(vars(v), depth + 1)
            walk(v.__cause__, depth + 1)
            walk(v.__context__, depth + 1)
        elif isinstance(v, msgspec.Struct):
            walk(msgspec.structs.asdict(v), depth + 1)
        elif isinstance(v, dict):
            for k, item in v.items():
                walk(k, depth + 1)
                walk(item, depth + 1)
        elif isinstance(v, (list, tuple, set, frozenset)):
            for item in v:
                walk(item, depth + 1)
        elif hasattr(v, "__dict__") and not isinstance(v, type):
            walk(vars(v), depth + 1)

    walk(value, 0)
    return "\n".join(parts)


class TestApiKey:
    @pytest.mark.parametrize(
        ("status", "shape"), [(401, "json"), (401, "text"), (500, "text"), (200, "text")]
    )
    async def test_echoing_provider_never_leaks_the_key(
        self, secret_env: str, caplog: pytest.LogCaptureFixture, status: int, shape: str
    ) -> None:
        """A provider that echoes the request headers (in a JSON error, plain text, a
        500 page, a broken 200 body): the LLMError's message, args, attributes, cause and
        context and every log record are free of the key."""
        caplog.set_level(logging.DEBUG)
        async with _EchoServer(status, shape) as server:
            config = ModelConfig(
                model="m",
                base_url=server.base_url,
                api_key_env="OPENAI_API_KEY",
                max_retries=1,
                timeout=5,
            )
            async with ModelClient(config, seed=1) as client:
                with pytest.raises(LLMError) as caught:
                    await client.complete([{"role": "user", "content": "hi"}])
        assert KEY not in _deep_text(caught.value)
        assert KEY not in "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)

    @pytest.mark.parametrize("execution", [PROCESS, "thread"])
    async def test_results_of_a_401_never_hold_the_key(
        self, secret_env: str, tmp_path: Path, execution: str
    ) -> None:
        """A judge and a program model answering 401 with the key echoed: the results
        (errors, feedback, observation notes, judge usage) never hold it."""
        judge = write(tmp_path, "judge.py", JUDGE)
        program = write(tmp_path, "program.py", LLM_PROGRAM)
        async with Simulator(SimulatorConfig(api_key="sk-the-right-one")) as sim:
            model = ModelConfig(
                model="m", base_url=sim.base_url, api_key_env="OPENAI_API_KEY", max_retries=0
            )
            async with Evaluator(
                judge,
                program,
                execution=execution,
                program_execution=execution,
                models=Models(program=model, metric=model),
                timeout=10,
            ) as ev:
                results = await ev.evaluate_many(
                    "Say hi.", [{"id": i, "input": {"q": "x"}} for i in range(3)]
                )
        assert [r.error.kind if r.error else None for r in results] == ["llm_error"] * 3
        assert "401" in results[0].feedback
        assert KEY not in _deep_text(results)

    def test_cli_run_outputs_never_hold_the_key(self, tmp_path: Path) -> None:
        """``skynet-eval run`` with OPENAI_API_KEY set and a provider that answers 401
        echoing the key: the results file, the JSON report, the table report and the
        progress lines on stderr are free of the key."""
        judge = write(tmp_path, "judge.py", JUDGE)
        program = write(tmp_path, "program.py", LLM_PROGRAM)
        data = tmp_path / "data.jsonl"
        data.write_text(
            "".join(json.dumps({"id": i, "input": {"q": f"q{i}"}}) + "\n" for i in range(4))
        )
        env = dict(os.environ, OPENAI_API_KEY=KEY, PYTHONPATH=str(ROOT))
        outputs: list[str] = []
        with Simulator(SimulatorConfig(api_key="sk-the-right-one")).running_in_thread() as sim:
            for n, extra in enumerate((["--json"], [])):
                out = tmp_path / f"results{n}.jsonl"
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "evaluator",
                        "run",
                        "--metric",
                        str(judge),
                        "--program",
                        str(program),
                        "--artifact-text",
                        "Say hi.",
                        "--data",
                        str(data),
                        "--model",
                        "m",
                        "--metric-model",
                        "m",
                        "--base-url",
                        sim.base_url,
                        "--api-key-env",
                        "OPENAI_API_KEY",
                        "--output",
                        str(out),
                        "--timeout",
                        "10",
                        *extra,
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                outputs += [done.stdout, done.stderr, out.read_text() if out.exists() else ""]
                assert done.returncode in (0, 1), done.stderr
        everything = "\n".join(outputs)
        assert "401" in everything  # the failure is reported...
        assert KEY not in everything  # ...without the key


# -- expected never reaches reflection -------------------------------------------------

SENTINEL = "XSENTINELX"

# Never echoes `expected` on purpose; fails in ways where Python or the engine quotes
# the value it was handling.
LEAKY = """
def score(input, output, expected=None):
    mode = input["mode"]
    if mode == "convert":
        return float(expected["label"]), {"feedback": "converted"}
    if mode == "return":
        return expected["label"], {"feedback": "returned"}
    if mode == "key":
        return {"a": 1}[expected["label"]], {"feedback": "looked up"}
    if mode == "named":
        return 1.0, {"feedback": "named", "scores": {"x": expected["label"]}}
    ok = output == expected["label"]
    return (1.0 if ok else 0.0), {"feedback": "Correct." if ok else "Wrong label."}
"""

PROGRAM = """
def run(artifact, input):
    return "guess"
"""


class TestExpectedStaysInTheMetric:
    @pytest.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[Any]:
        from evaluator.gepa import EvaluatorAdapter

        metric = write(tmp_path, "metric.py", LEAKY)
        program = write(tmp_path, "program.py", PROGRAM)
        async with Evaluator(
            metric, program, execution="thread", program_execution="thread", timeout=10
        ) as ev:
            yield EvaluatorAdapter(ev)

    async def test_reflective_dataset_never_holds_expected(self, adapter: Any) -> None:
        """Whatever the metric's failure quotes (a ValueError of float(), a str score, a
        KeyError, a str named score), nothing GEPA gets from the adapter (outputs,
        scores, trajectories, reflective records) holds an expected value."""
        import anyio

        rows = [
            {
                "id": f"e{i}",
                "input": {"mode": mode, "i": i},
                "expected": {"label": f"{SENTINEL}{i}"},
            }
            for i, mode in enumerate(["convert", "return", "key", "named", "ok"])
        ]

        def reflect() -> tuple[Any, Any]:
            batch = adapter.evaluate(rows, {"prompt": "p"}, capture_traces=True)
            return batch, adapter.make_reflective_dataset({"prompt": "p"}, batch, ["prompt"])

        batch, dataset = await anyio.to_thread.run_sync(reflect)
        assert [t["error"] for t in batch.trajectories] == [
            "metric_error",
            "invalid_return",
            "metric_error",
            "invalid_return",
            None,
        ]
        assert SENTINEL not in _deep_text(batch)
        assert SENTINEL not in _deep_text(dataset)
