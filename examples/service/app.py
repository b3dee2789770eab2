"""An evaluation API: the engine embedded in a Starlette service under uvicorn.

    pip install -e '.[service,otel]'
    export SKYNET_SERVICE_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
    uvicorn examples.service.app:app --port 8000 --timeout-graceful-shutdown 5
    curl -N -X POST localhost:8000/evaluate -H "Authorization: Bearer $SKYNET_SERVICE_TOKEN" \
        --data @examples/service/data.json

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

Who may call it: with ``SKYNET_SERVICE_TOKEN`` set (``create_app(token=...)``), every
request must send ``Authorization: Bearer <token>`` (compared in constant time); any other
gets 401. Unset, the service is open to whoever reaches its port, and spends its model key
for them: bind it to 127.0.0.1 (uvicorn's default) or set the token.

What one request may send: a body of at most ``SKYNET_SERVICE_MAX_BODY_BYTES`` (default
16 MiB; ``max_body_bytes=``), else 413; at most ``SKYNET_SERVICE_MAX_EXAMPLES`` examples
(default 100,000; ``max_examples=``), else 413. A body that is not what ``/evaluate``
takes gets a 400 that says what is wrong, never a 500: not JSON, nested too deeply (the
engine takes rows nested up to 200 levels), not ``{"examples": [...]}``, a row the
engine refuses (its id, its input, its expected). A row refused after results have
begun to stream (one far down a large request) ends the stream with an error line.

With OpenTelemetry installed (``[otel]``), each request gets a server span, child of the
caller's ``traceparent`` header when it sends one, and the engine's example and model-call
spans are its children.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
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
#: What one request may send, by default: the service's own guards on memory.
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_EXAMPLES = 100_000
TOO_DEEP = "flatten the inputs, or send the deep part as a string (json.dumps)"


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
        # The status waits for the first results: a row the engine refuses before them
        # (rows are read ahead of the work) is the request's 400, not a 200's last line.
        started, count = False, 0
        async with self._ev.stream(self._artifact, self._examples) as results:
            try:
                async for batch in results.batches():
                    if not started:
                        started = await self._start(send, 200, self.raw_headers)
                    body = b"".join(map(_line, batch))
                    count += len(batch)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            except DatasetError as exc:  # a bad row: say which, and stop
                last = {"error": {"kind": "bad_request", "message": str(exc)}}
                if not started:
                    started = await self._start(send, 400, [(b"content-type", b"application/json")])
            else:
                last = {"done": True, "examples": count}
        if not started:
            await self._start(send, 200, self.raw_headers)
        body = json.dumps(last).encode() + b"\n"
        await send({"type": "http.response.body", "body": body, "more_body": False})

    @staticmethod
    async def _start(send: Send, status: int, headers: list[tuple[bytes, bytes]]) -> bool:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        return True


async def _listen(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected


def _error(status: int, kind: str, message: str, **headers: str) -> JSONResponse:
    body = {"error": {"kind": kind, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers or None)


def _bad_request(message: str) -> JSONResponse:
    return _error(400, "bad_request", message)


def _too_large(message: str) -> JSONResponse:
    return _error(413, "too_large", message)


async def _body(request: Request, limit: int) -> bytes | JSONResponse:
    """The request's body, read no further than ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return _too_large(f"the body is {int(declared):,} bytes; this service takes {limit:,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return _too_large(f"the body is over {limit:,} bytes; this service takes {limit:,}")
        chunks.append(chunk)
    return b"".join(chunks)


def _read(body: bytes, max_examples: int) -> tuple[Any, list[Any]] | JSONResponse:
    """The request's artifact and rows, or the response that says what is wrong."""
    shape = "send {'artifact': ..., 'examples': [{'id': ..., 'input': {...}}, ...]}"
    try:
        data = json.loads(body)
    except RecursionError:  # nested past what the parser can recurse
        return _bad_request(f"the body's JSON is nested too deeply to parse; {TOO_DEEP}")
    except ValueError as exc:  # UnicodeDecodeError included
        return _bad_request(f"the body is not JSON ({exc}); {shape}")
    if not isinstance(data, dict) or not isinstance(data.get("examples"), list):
        return _bad_request(f"the body must be a JSON object with a list under 'examples'; {shape}")
    examples = data["examples"]
    if not examples:
        return _bad_request("'examples' is empty; send at least one row")
    if len(examples) > max_examples:
        return _too_large(
            f"'examples' holds {len(examples):,} rows; this service takes {max_examples:,} "
            "per request: split them over several requests"
        )
    for i, row in enumerate(examples):
        if not isinstance(row, dict) or not isinstance(row.get("input"), dict):
            return _bad_request(f"examples[{i}] must be an object with an 'input' object")
    return data.get("artifact"), examples


def _authorized(request: Request, token: bytes | None) -> bool:
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    # Starlette decodes headers as latin-1: encoded back, these are the bytes as sent.
    return hmac.compare_digest(given.strip().encode("latin-1"), token)


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


def _limit_from_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        raise SystemExit(f"{name} must be a whole number of at least 1, got {raw!r}")
    return int(raw)


def _token_from_env() -> str | None:
    token = os.environ.get("SKYNET_SERVICE_TOKEN")
    if token is not None and not token.strip():
        raise SystemExit(
            "SKYNET_SERVICE_TOKEN is set but empty: set it to a secret "
            "(python -c 'import secrets; print(secrets.token_urlsafe(32))') or unset it"
        )
    return token


def _secret(token: str | None, **limits: int) -> bytes | None:
    """The token as compared (None: none asked), once the settings are checked."""
    if token is not None and not token.strip():
        raise ValueError("`token` is empty: pass a secret, or None for no authentication")
    for name, value in limits.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be a whole number of at least 1, got {value!r}")
    return None if token is None else token.strip().encode()


def create_app(
    *,
    models: Models | None = None,
    metric: str | Path = HERE / "metric.py",
    program: str | Path = HERE / "program.py",
    tracer_provider: Any = None,
    meter_provider: Any = None,
    token: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_examples: int = MAX_EXAMPLES,
    **options: Any,
) -> Starlette:
    """The service. ``models`` None: the program's model is a simulator started with the
    app; ``token``: the bearer token every request must send (None: none asked);
    ``max_body_bytes``, ``max_examples``: what one request may send; ``options`` go to
    the Evaluator (``execution=``, ``concurrency=``, ...)."""
    secret = _secret(token, max_body_bytes=max_body_bytes, max_examples=max_examples)

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

    def unauthorized() -> JSONResponse:
        message = "send the service's token: `Authorization: Bearer <SKYNET_SERVICE_TOKEN>`"
        return _error(401, "unauthorized", message, **{"www-authenticate": "Bearer"})

    async def evaluate(request: Request) -> Response:
        if not _authorized(request, secret):
            return unauthorized()
        body = await _body(request, max_body_bytes)
        if isinstance(body, Response):
            return body
        parsed = _read(body, max_examples)
        if isinstance(parsed, Response):
            return parsed
        artifact, examples = parsed
        return ResultLines(request.app.state.evaluator, artifact, examples, tracing)

    async def stats(request: Request) -> Response:
        if not _authorized(request, secret):
            return unauthorized()
        s = request.app.state.evaluator.statistics()
        return JSONResponse({"examples": s.examples, "errors": s.errors, "in_flight": s.in_flight})

    return Starlette(
        routes=[
            Route("/evaluate", evaluate, methods=["POST"]),
            Route("/stats", stats, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


app = create_app(
    models=_models_from_env(),
    token=_token_from_env(),
    max_body_bytes=_limit_from_env("SKYNET_SERVICE_MAX_BODY_BYTES", MAX_BODY_BYTES),
    max_examples=_limit_from_env("SKYNET_SERVICE_MAX_EXAMPLES", MAX_EXAMPLES),
)
