"""An evaluation API: the engine embedded in a Starlette service under uvicorn.

    pip install -e '.[service,otel]'
    uvicorn examples.service.app:app --port 8000 --timeout-graceful-shutdown 5
    curl -N -X POST localhost:8000/evaluate --data @examples/service/data.json

One :class:`~evaluator.Evaluator` is opened in the lifespan and shared by every request (one
set of workers, one rate budget). ``POST /evaluate`` takes ``{"artifact": ..., "examples":
[rows]}`` and streams one NDJSON line per example as results complete, then a last line
``{"done": true, "examples": N}``. A client that disconnects cancels that request's work:
the task that iterates ``Evaluator.stream`` is cancelled, which stops its examples in flight
and sends none of the rest; other requests go on. On shutdown, uvicorn cancels the requests
still running after ``--timeout-graceful-shutdown``, then the lifespan closes the Evaluator.

The model: ``SKYNET_SERVICE_BASE_URL`` (an OpenAI-compatible endpoint; the key from the
variable ``SKYNET_SERVICE_API_KEY_ENV`` names, default ``OPENAI_API_KEY``) and
``SKYNET_SERVICE_MODEL``; without a base URL the lifespan starts the project's simulator on
127.0.0.1, so the example runs offline.

With OpenTelemetry installed (``[otel]``), each request gets a server span, child of the
caller's ``traceparent`` header when it sends one, and the engine's example and model-call
spans are its children.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from evaluator import DatasetError, Evaluator, Models, Result
from llm_client import ModelConfig, Simulator, SimulatorConfig

HERE = Path(__file__).resolve().parent
#: Examples one request may send: the service's own guard on memory.
MAX_EXAMPLES = 100_000


class _Disconnected(Exception):
    """The client closed the connection before the last line."""


def _line(result: Result) -> bytes:
    obs = result.observation
    row: dict[str, Any] = {
        "id": result.example_id,
        "score": result.score,
        "feedback": result.feedback,
        "duration_ms": None if obs.duration_ms is None else round(obs.duration_ms, 1),
        "cost_usd": obs.cost_usd,
    }
    if result.error is not None:
        row["error"] = {"kind": result.error.kind, "message": result.error.message}
    return json.dumps(row, default=str).encode() + b"\n"


class ResultLines(Response):
    """Results as NDJSON lines while the client listens; the work stops when it leaves.

    Starlette's ``StreamingResponse`` notices a disconnect only when a write fails (ASGI
    2.4), that is at the next result: a request waiting on slow examples would go on for
    their whole duration. This response listens for ``http.disconnect`` beside the stream
    and cancels the stream the moment it comes.
    """

    media_type = "application/x-ndjson"

    def __init__(self, ev: Evaluator, artifact: Any, examples: list[Any], tracing: Any) -> None:
        # Not Response.__init__: it would add `content-length: 0` for the empty body.
        self.status_code, self.background = 200, None
        self.raw_headers = [(b"content-type", self.media_type.encode())]
        self._ev, self._artifact, self._examples, self._tracing = ev, artifact, examples, tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                listener = tg.create_task(_listen(receive))
                with self._tracing(scope):
                    await self._send_lines(send)
                listener.cancel()
        except* (_Disconnected, OSError):
            pass  # the client left: the task group cancelled the stream and its work

    async def _send_lines(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        count = 0
        async with self._ev.stream(self._artifact, self._examples) as results:
            try:
                async for batch in results.batches():
                    body = b"".join(map(_line, batch))
                    count += len(batch)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            except DatasetError as exc:  # a bad row: say which, and stop
                last = {"error": {"kind": "bad_request", "message": str(exc)}}
            else:
                last = {"done": True, "examples": count}
        body = json.dumps(last).encode() + b"\n"
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _listen(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"error": {"kind": "bad_request", "message": message}}, status_code=400)


def _read(body: bytes) -> tuple[Any, list[Any]] | str:
    """The request's artifact and rows, or what is wrong with it."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        return f"the body is not JSON ({exc}); send {{'artifact': ..., 'examples': [...]}}"
    if not isinstance(data, dict) or not isinstance(data.get("examples"), list):
        return "the body must be a JSON object with a list under 'examples'"
    examples = data["examples"]
    if not examples or len(examples) > MAX_EXAMPLES:
        return f"'examples' must hold 1 to {MAX_EXAMPLES:,} rows, got {len(examples):,}"
    for i, row in enumerate(examples):
        if not isinstance(row, dict) or not isinstance(row.get("input"), dict):
            return f"examples[{i}] must be an object with an 'input' object"
    return data.get("artifact"), examples


def _tracing(tracer_provider: Any) -> Any:
    """A server span per request, child of the caller's ``traceparent``; a no-op without
    OpenTelemetry."""
    try:
        from opentelemetry import propagate, trace
    except ImportError:
        return lambda scope: contextlib.nullcontext()
    tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("skynet-eval-service")

    @contextlib.contextmanager
    def span(scope: Scope) -> Iterator[None]:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        parent = propagate.extract(headers)
        kind = trace.SpanKind.SERVER
        with tracer.start_as_current_span("POST /evaluate", context=parent, kind=kind):
            yield

    return span


def _models_from_env() -> Models | None:
    base_url = os.environ.get("SKYNET_SERVICE_BASE_URL")
    if not base_url:
        return None
    config = ModelConfig(
        model=os.environ.get("SKYNET_SERVICE_MODEL", "gpt-4o-mini"),
        base_url=base_url,
        api_key_env=os.environ.get("SKYNET_SERVICE_API_KEY_ENV", "OPENAI_API_KEY"),
    )
    return Models(program=config)


def create_app(
    *,
    models: Models | None = None,
    metric: str | Path = HERE / "metric.py",
    program: str | Path = HERE / "program.py",
    tracer_provider: Any = None,
    meter_provider: Any = None,
    **options: Any,
) -> Starlette:
    """The service. ``models`` None: the program's model is a simulator started with the
    app; ``options`` go to the Evaluator (``execution=``, ``concurrency=``, ...)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            chosen = models
            if chosen is None:
                sim = await stack.enter_async_context(Simulator(SimulatorConfig(latency_ms=50)))
                config = ModelConfig(
                    model="sim-model",
                    base_url=sim.base_url,
                    api_key_env=None,
                    price_input=0.15,
                    price_output=0.6,
                )
                chosen = Models(program=config)
            ev = Evaluator(
                metric,
                program,
                models=chosen,
                tracer_provider=tracer_provider,
                meter_provider=meter_provider,
                **options,
            )
            app.state.evaluator = await stack.enter_async_context(ev)
            yield

    tracing = _tracing(tracer_provider)

    async def evaluate(request: Request) -> Response:
        parsed = _read(await request.body())
        if isinstance(parsed, str):
            return _bad_request(parsed)
        artifact, examples = parsed
        return ResultLines(request.app.state.evaluator, artifact, examples, tracing)

    async def stats(request: Request) -> Response:
        s = request.app.state.evaluator.statistics()
        return JSONResponse({"examples": s.examples, "errors": s.errors, "in_flight": s.in_flight})

    return Starlette(
        routes=[
            Route("/evaluate", evaluate, methods=["POST"]),
            Route("/stats", stats, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


app = create_app(models=_models_from_env())
