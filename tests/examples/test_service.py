"""The example service (examples/service/app.py) under a real uvicorn server on 127.0.0.1.

Its client is httpx; its model is the project's simulator over real HTTP. Checked: concurrent
requests, a client that disconnects mid-stream (its work stops, the others finish with
exactly one result per example), server shutdown mid-request, bad input, and the spans
under the caller's trace context.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psutil
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from evaluator import Models
from evaluator._data._datafile import MAX_DEPTH
from llm_client import ModelConfig, Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[2]


def _load_app_module() -> ModuleType:
    path = ROOT / "examples" / "service" / "app.py"
    spec = importlib.util.spec_from_file_location("skynet_example_service", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


service = _load_app_module()


class Server:
    def __init__(self, app: Any, server: Any, port: int) -> None:
        self.app, self.server, self.port = app, server, port
        self.url = f"http://127.0.0.1:{port}"


@asynccontextmanager
async def serve(app: Any, *, graceful_s: float | None = None) -> AsyncIterator[Server]:
    """The app under uvicorn on 127.0.0.1 (lifespan on), shut down at the end."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http="h11",
        ws="none",
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=graceful_s,  # type: ignore[arg-type]
    )
    server = uvicorn.Server(config)
    # startup()/shutdown() rather than serve(): serve() takes over SIGINT and SIGTERM.
    config.load()
    server.lifespan = config.lifespan_class(config)
    await server.startup()
    assert not server.should_exit, "the app's lifespan failed to start"
    running = Server(app, server, server.servers[0].sockets[0].getsockname()[1])
    try:
        yield running
    finally:
        if not server.should_exit:
            server.should_exit = True
            await server.shutdown()


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig(latency_ms=100)) as simulator:
        yield simulator


def _models(sim: Simulator) -> Models:
    config = ModelConfig(
        model="sim-model",
        base_url=sim.base_url,
        api_key_env=None,
        price_input=0.15,
        price_output=0.6,
    )
    return Models(program=config)


def _body(prefix: str, n: int) -> dict[str, Any]:
    return {
        "artifact": "Answer in one sentence.",
        "examples": [
            {
                "id": f"{prefix}-{i}",
                "input": {"message": f"{prefix} message {i} about a refund"},
                "expected": {"keyword": "refund"},
            }
            for i in range(n)
        ],
    }


async def _lines(
    client: httpx.AsyncClient, body: dict[str, Any], started: asyncio.Event | None = None
) -> list[dict[str, Any]]:
    """The request's NDJSON lines; ``started`` is set when the first one arrives."""
    async with client.stream("POST", "/evaluate", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = []
        async for line in response.aiter_lines():
            if line:
                lines.append(json.loads(line))
                if started is not None:
                    started.set()
        return lines


def _check_one_each(lines: list[dict[str, Any]], body: dict[str, Any]) -> None:
    *results, last = lines
    assert last == {"done": True, "examples": len(body["examples"])}
    assert sorted(r["id"] for r in results) == sorted(e["id"] for e in body["examples"])
    assert all(r["score"] == 1.0 and "error" not in r for r in results)


async def _wait_for(check: Any, guard_s: float = 20.0) -> None:
    """Poll ``check()`` until it is true; the guard only stops a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + guard_s
    while not await check():
        assert loop.time() < deadline, "condition not reached within the guard"
        await asyncio.sleep(0.05)


class TestEvaluate:
    async def test_concurrent_requests_each_get_one_line_per_example(self, sim: Simulator) -> None:
        """Three requests at once on one Evaluator: each streams exactly one result line
        per example it sent, its own ids only, then its `done` line."""
        app = service.create_app(models=_models(sim), execution="inline")
        bodies = [_body("a", 30), _body("b", 12), _body("c", 5)]
        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            found = await asyncio.gather(*(_lines(client, body) for body in bodies))
        for lines, body in zip(found, bodies, strict=True):
            _check_one_each(lines, body)
        assert sim.statistics().requests == 47

    async def test_a_disconnect_stops_that_requests_work_only(self, sim: Simulator) -> None:
        """A client leaving mid-stream cancels its request's work: its examples in flight
        end and the rest are never sent to the model, while the two other requests running
        at the same time finish with exactly one result per example."""
        app = service.create_app(models=_models(sim), execution="inline")
        big, small = _body("big", 3000), [_body("b", 20), _body("c", 15)]
        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            leaving = client.stream("POST", "/evaluate", json=big)
            response = await leaving.__aenter__()
            lines = response.aiter_lines()
            first = json.loads(await anext(lines))
            assert first["id"].startswith("big-")
            started = [asyncio.Event() for _ in small]
            others = [
                asyncio.create_task(_lines(client, body, event))
                for body, event in zip(small, started, strict=True)
            ]
            for event in started:  # both others are running beside the big one
                await asyncio.wait_for(event.wait(), 20)  # a guard against a hang only
            await leaving.__aexit__(None, None, None)  # the client goes away mid-stream
            found = await asyncio.gather(*others)
            await _wait_for(lambda: _stat(client, "in_flight", lambda n: n == 0))
            sent = sim.statistics().requests
            await asyncio.sleep(0.5)  # nothing of the big request may start after this
            assert sim.statistics().requests == sent
            stats = (await client.get("/stats")).json()
        for rows, body in zip(found, small, strict=True):
            _check_one_each(rows, body)
        # Had its work gone on, the big request alone would have made 3,000 calls.
        assert sent <= 2500, f"{sent} model calls: the big request's work did not stop"
        assert stats["examples"] < 3035
        assert sim.statistics().in_flight == 0

    async def test_server_shutdown_mid_request_closes_everything(self, sim: Simulator) -> None:
        """Shutting the server down while a request streams ends that request (after the
        graceful timeout), closes the Evaluator in the lifespan, and leaves no worker
        process and no model call in flight."""
        app = service.create_app(models=_models(sim))  # the metric in worker processes
        me = psutil.Process()
        before = {p.pid for p in me.children(recursive=True)}  # other tests' are not ours
        body = _body("s", 3000)
        rest: list[str] = []
        async with (
            serve(app, graceful_s=0.5) as server,
            httpx.AsyncClient(base_url=server.url) as client,
            client.stream("POST", "/evaluate", json=body) as response,
        ):
            lines = response.aiter_lines()
            assert json.loads(await anext(lines))["id"].startswith("s-")
            assert _ours(me, before) != set()  # the metric's workers
            server.server.should_exit = True
            stopping = asyncio.create_task(server.server.shutdown())
            with pytest.raises(httpx.HTTPError):
                rest.extend([line async for line in lines])
            await asyncio.wait_for(stopping, 30)  # a guard against a hang only
        assert not any('"done"' in line for line in rest)
        ev = app.state.evaluator
        with pytest.raises(RuntimeError, match="closed"):
            ev.stream(None, [])
        await _wait_for(_none_left(me, before))
        assert sim.statistics().in_flight == 0

    async def test_bad_bodies_get_400_naming_the_problem(
        self, sim: Simulator, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A body that is not JSON (or not UTF-8), is not an object with an examples list,
        has no rows, or a row without an input object gets a 400 whose message says what
        is wrong: never a 500, never a traceback in the server's log."""
        app = service.create_app(models=_models(sim), execution="inline")
        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            cases = {
                b"{not json": "the body is not JSON",
                b"": "the body is not JSON",
                b'{"examples": [{"input": {"m": "\xff\xfe"}}]}': "the body is not JSON",
                b'{"examples": [{"input": {"n": ' + b"9" * 5000 + b"}}]}": "not JSON",
                b'{"artifact": "x"}': "a list under 'examples'",
                b"[1, 2]": "a list under 'examples'",
                b'{"examples": {"a": 1}}': "a list under 'examples'",
                b'{"examples": []}': "'examples' is empty",
                b'{"examples": [{"id": 1, "input": {}}, {"id": 2}]}': "examples[1] must be",
                b'{"examples": [{"id": 1, "input": []}]}': "examples[0] must be",
                b'{"examples": [7]}': "examples[0] must be",
            }
            for body, words in cases.items():
                response = await client.post("/evaluate", content=body)
                assert response.status_code == 400, body[:60]
                error = response.json()["error"]
                assert error["kind"] == "bad_request" and words in error["message"], body[:60]
                assert "Traceback" not in response.text
        assert sim.statistics().requests == 0
        assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)

    async def test_json_nested_too_deep_gets_400_not_a_traceback(
        self, sim: Simulator, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Input nested past Python's recursion limit (100,000 levels: the parser itself
        gives up), or past the engine's row depth (what it would copy and pickle), gets a
        400 that says so; a row at that depth runs. No traceback in the server's log."""
        app = service.create_app(models=_models(sim), execution="inline")

        def nested(levels: int) -> bytes:
            # {"examples": [{"input": {"x": [[...]]}}]}: the row and its input are 2 levels
            lists = b"[" * (levels - 2) + b"1" + b"]" * (levels - 2)
            row = b'{"id": "d", "input": {"message": "a refund", "x": ' + lists + b"}}"
            return b'{"examples": [' + row + b"]}"

        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            for levels, words in (
                (100_000, "nested too deeply to parse"),
                (5_000, "nested too deeply to parse"),
                (MAX_DEPTH + 1, f"row 0: the row is nested more than {MAX_DEPTH} levels"),
            ):
                response = await client.post("/evaluate", content=nested(levels))
                assert response.status_code == 400, levels
                error = response.json()["error"]
                assert error["kind"] == "bad_request" and words in error["message"], levels
                assert "flatten" in error["message"]
            async with client.stream("POST", "/evaluate", content=nested(MAX_DEPTH)) as response:
                assert response.status_code == 200
                lines = [json.loads(line) async for line in response.aiter_lines() if line]
        assert lines[-1] == {"done": True, "examples": 1}
        assert sim.statistics().requests == 1
        assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)

    async def test_rows_the_engine_refuses_get_400_naming_the_row(
        self, sim: Simulator, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A row whose id is not a string or an integer, or whose `expected` is not an
        object, gets a 400 naming the row and the problem
        before any result streams; nothing is sent to the model."""
        app = service.create_app(models=_models(sim), execution="inline")
        rows: dict[str, list[dict[str, Any]]] = {
            "row 1: 'id' is a list": [{"input": {}}, {"id": [1], "input": {}}],
            "row 0: 'id' is a float": [{"id": 1.5, "input": {}}],
            "'expected' is a list": [{"input": {}, "expected": [1]}],
        }
        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            for words, examples in rows.items():
                response = await client.post("/evaluate", json={"examples": examples})
                assert response.status_code == 400, words
                error = response.json()["error"]
                assert error["kind"] == "bad_request" and words in error["message"], words
        assert sim.statistics().requests == 0
        assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)


class TestLimits:
    async def test_a_body_over_the_limit_gets_413(self, sim: Simulator) -> None:
        """A body over ``max_body_bytes`` gets 413 naming the limit, whether it declares
        its length or comes chunked; one just under it runs."""
        app = service.create_app(models=_models(sim), execution="inline", max_body_bytes=2000)
        big = json.dumps(_body("b", 40)).encode()
        assert len(big) > 2000

        async def chunked() -> AsyncIterator[bytes]:
            for i in range(0, len(big), 500):
                yield big[i : i + 500]

        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            for content in (big, chunked()):
                response = await client.post("/evaluate", content=content)
                assert response.status_code == 413
                error = response.json()["error"]
                assert error["kind"] == "too_large" and "takes 2,000" in error["message"]
            small = _body("s", 2)
            assert len(json.dumps(small)) < 2000
            _check_one_each(await _lines(client, small), small)
        assert sim.statistics().requests == 2

    async def test_too_many_examples_get_413(self, sim: Simulator) -> None:
        """More examples than ``max_examples`` in one request: 413 saying how many were
        sent, what the service takes and what to do; none of them runs."""
        app = service.create_app(models=_models(sim), execution="inline", max_examples=3)
        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            response = await client.post("/evaluate", json=_body("m", 4))
            assert response.status_code == 413
            message = response.json()["error"]["message"]
            assert "holds 4 rows" in message and "takes 3" in message and "split" in message
            _check_one_each(await _lines(client, _body("n", 3)), _body("n", 3))
        assert sim.statistics().requests == 3

    def test_bad_settings_are_refused_at_start(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A limit below 1, an empty token, or an environment variable that is not a
        number is refused when the app is made, naming the setting."""
        for options in ({"max_body_bytes": 0}, {"max_examples": -1}, {"max_examples": True}):
            with pytest.raises(ValueError, match=next(iter(options))):
                service.create_app(**options)
        with pytest.raises(ValueError, match="`token` is empty"):
            service.create_app(token=" ")
        monkeypatch.setenv("SKYNET_SERVICE_MAX_EXAMPLES", "lots")
        with pytest.raises(SystemExit, match="SKYNET_SERVICE_MAX_EXAMPLES must be"):
            service._limit_from_env("SKYNET_SERVICE_MAX_EXAMPLES", 5)
        monkeypatch.setenv("SKYNET_SERVICE_TOKEN", "")
        with pytest.raises(SystemExit, match="SKYNET_SERVICE_TOKEN is set but empty"):
            service._token_from_env()


class TestToken:
    async def test_only_the_right_bearer_token_gets_in(self, sim: Simulator) -> None:
        """With a token set, a request without one, with a wrong one, with the right one
        under another scheme, or with a prefix of it gets 401 (with
        ``WWW-Authenticate: Bearer``) and spends nothing; the right one gets 200."""
        token = "s3cret-token-for-tests"
        app = service.create_app(models=_models(sim), execution="inline", token=token)
        body = _body("t", 2)
        wrong = [
            {},
            {"authorization": "Bearer nope"},
            {"authorization": f"Basic {token}"},
            {"authorization": f"Bearer {token[:-1]}"},
            {"authorization": f"Bearer {token}x"},
            {"authorization": token},
        ]
        async with serve(app) as server, httpx.AsyncClient(base_url=server.url) as client:
            for headers in wrong:
                for response in (
                    await client.post("/evaluate", json=body, headers=headers),
                    await client.get("/stats", headers=headers),
                ):
                    assert response.status_code == 401, headers
                    assert response.headers["www-authenticate"] == "Bearer"
                    assert "SKYNET_SERVICE_TOKEN" in response.json()["error"]["message"]
            assert sim.statistics().requests == 0
            client.headers["authorization"] = f"Bearer {token}"
            _check_one_each(await _lines(client, body), body)
            assert (await client.get("/stats")).status_code == 200
        assert sim.statistics().requests == 2


class TestTracing:
    async def test_spans_are_children_of_the_callers_traceparent(self, sim: Simulator) -> None:
        """The request's server span continues the caller's `traceparent`; each example's
        span is its child, and each model call's span the child of its example's."""
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        app = service.create_app(models=_models(sim), execution="inline", tracer_provider=provider)
        trace_id, caller = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        headers = {"traceparent": f"00-{trace_id}-{caller}-01"}
        body = _body("t", 4)
        try:
            async with (
                serve(app) as server,
                httpx.AsyncClient(base_url=server.url) as client,
                client.stream("POST", "/evaluate", json=body, headers=headers) as r,
            ):
                lines = [json.loads(line) async for line in r.aiter_lines() if line]
            _check_one_each(lines, body)
            spans = exporter.get_finished_spans()
        finally:
            provider.shutdown()
        (request,) = [s for s in spans if s.name == "POST /evaluate"]
        assert request.parent is not None and request.parent.span_id == int(caller, 16)
        assert request.context.trace_id == int(trace_id, 16)
        examples = [s for s in spans if s.name == "skynet.example"]
        calls = [s for s in spans if s.name == "chat sim-model"]
        assert len(examples) == 4 and len(calls) == 4
        assert all(s.parent and s.parent.span_id == request.context.span_id for s in examples)
        ids = {s.context.span_id for s in examples}
        assert all(s.parent and s.parent.span_id in ids for s in calls)
        assert all(s.context.trace_id == int(trace_id, 16) for s in spans)


async def _stat(client: httpx.AsyncClient, name: str, test: Any) -> bool:
    return bool(test((await client.get("/stats")).json()[name]))


def _ours(me: psutil.Process, before: set[int]) -> set[int]:
    return {p.pid for p in me.children(recursive=True)} - before


def _none_left(me: psutil.Process, before: set[int]) -> Any:
    async def check() -> bool:
        return _ours(me, before) == set()

    return check
