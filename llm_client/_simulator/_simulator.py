"""The Simulator: its lifetime, what it saw, its routes, and one chat request's stages.

A chat completion request passes four stages, each a method that either answers (and the
request ends there) or hands on to the next:

1. parse (:meth:`Simulator._parse`): the key, the body's size and shape, the model;
2. admission (:meth:`Simulator._admit`): the rpm/tpm window, as a real gateway checks
   limits before the model runs; a refused request does not count against the window;
   past ``capacity`` in flight with ``over_capacity="429"``, a 429 too;
3. fault injection: one seeded draw; an error fault answers at once;
4. reply (:meth:`Simulator._reply`): after the latency (a timer, no task; past
   ``capacity`` in flight, stretched by in flight / capacity), the completion, or the
   drop or the malformed body a fault asked for.

Handlers are plain functions called by the HTTP server in ``_server.py``: no coroutine per
request, and a delayed reply is a timer.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import random
import threading
import urllib.parse
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import msgspec

from ._config import FAULT_KINDS, ModelSettings, SimulatorConfig
from ._faults import ERROR_FAULTS, FaultDraw
from ._limits import RateLimits
from ._replies import (
    MALFORMED,
    ChatBody,
    Reply,
    SystemPromptCache,
    chat_decoder,
    chunk_stream,
    completion_body,
    compose,
    error_body,
    responses_body,
    responses_decoder,
    responses_stream,
)
from ._server import JSON, TEXT, HttpConnection, HttpRequest, HttpServer

__all__ = ["Simulator", "SimulatorStatistics"]


class SimulatorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What the simulator saw."""

    requests: int  # chat completion and Responses API requests received
    served: int  # answered 200 with a well-formed reply
    streamed: int  # of those served, answered as an event stream
    rate_limited: int  # 429s sent by the rpm/tpm limiter
    faults: dict[str, int]  # injected faults by kind (see FAULT_KINDS)
    client_errors: int  # 400/401/404 for bad requests
    in_flight: int
    peak_in_flight: int
    prompt_tokens: int
    completion_tokens: int


_DEFAULT_SETTINGS = ModelSettings()
_encoder = msgspec.json.Encoder()
_ALLOW_POST = TEXT + b"Allow: POST\r\n"
_ALLOW_GET = TEXT + b"Allow: GET\r\n"
_SSE = b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
#: The model endpoints: path -> what the request is.
_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/responses": "responses"}
_MAX_SCRIPTED_LATENCY_MS = 600_000.0


class _Accepted:
    """A request past parse and admission: what it asked, for which model, and its reply."""

    __slots__ = ("body", "kind", "reply", "settings")

    def __init__(self, kind: str, body: ChatBody, settings: ModelSettings, reply: Reply) -> None:
        self.kind = kind  # "chat" or "responses"
        self.body = body
        self.settings = settings
        self.reply = reply


class Simulator:
    """The simulator server; ``async with`` in a running loop, or ``running_in_thread()``."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config or SimulatorConfig()
        # One generator for faults and jitter, drawn in a fixed order: a seed replays a run.
        self._rng = random.Random(self.config.seed)
        self._fault_draw = FaultDraw(self.config, self._rng)
        # The tail's own generator: turning it on leaves the faults' and jitter's draws.
        self._tail_rng = random.Random(f"tail:{self.config.seed}")
        self._limits = RateLimits(self.config.rpm, self.config.tpm, self.config.window_s)
        self._prompt_cache = SystemPromptCache(enabled=self.config.cache_system_prompts)
        self._server: HttpServer | None = None
        self._port = 0
        self._lock = threading.Lock()  # guards the arrival history read from other threads
        self._arrivals: deque[float] = deque(maxlen=self.config.max_history)
        self._accepted: deque[float] = deque(maxlen=self.config.max_history)
        self._requests = 0
        self._served = 0
        self._streamed = 0
        self._rate_limited = 0
        self._client_errors = 0
        self._faults = dict.fromkeys(FAULT_KINDS, 0)
        self._in_flight = 0
        self._peak_in_flight = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._stopped = False

    # -- lifetime ------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the ``base_url`` of a ModelConfig."""
        if not self._port:
            raise RuntimeError("the simulator is not running: use `async with Simulator(...)`")
        host = self.config.host
        host = "127.0.0.1" if host == "localhost" else host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self._port}/v1"

    @property
    def port(self) -> int:
        return self._port

    async def __aenter__(self) -> Simulator:
        if self._started:
            raise RuntimeError("a Simulator runs once; create a new one")
        self._started = True
        self._loop = asyncio.get_running_loop()
        server = HttpServer(self._route, max_body_bytes=self.config.max_body_bytes)
        self._port = await server.start(self.config.host, self.config.port)
        self._server = server
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        server, self._server = self._server, None
        self._stopped = True
        if server is not None:
            await asyncio.shield(server.close(grace=0.5))

    @contextlib.contextmanager
    def running_in_thread(self) -> Iterator[Simulator]:
        """Serve from a background thread with its own loop (for sync tests and the CLI)."""
        ready = threading.Event()
        failure: list[BaseException] = []
        holder: dict[str, Any] = {}

        async def serve() -> None:
            stop = asyncio.Event()
            holder["loop"], holder["stop"] = asyncio.get_running_loop(), stop
            try:
                async with self:
                    ready.set()
                    await stop.wait()
            except BaseException as exc:
                failure.append(exc)
                ready.set()

        thread = threading.Thread(
            target=asyncio.run, args=(serve(),), daemon=True, name="llm-simulator"
        )
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            raise failure[0]
        try:
            yield self
        finally:
            holder["loop"].call_soon_threadsafe(holder["stop"].set)
            thread.join()

    # -- what it saw ---------------------------------------------------------------------

    def statistics(self) -> SimulatorStatistics:
        return SimulatorStatistics(
            requests=self._requests,
            served=self._served,
            streamed=self._streamed,
            rate_limited=self._rate_limited,
            faults=dict(self._faults),
            client_errors=self._client_errors,
            in_flight=self._in_flight,
            peak_in_flight=self._peak_in_flight,
            prompt_tokens=self._prompt_tokens,
            completion_tokens=self._completion_tokens,
        )

    def arrivals(self, *, accepted_only: bool = False) -> list[float]:
        """Arrival times (the server loop's clock, seconds) of requests, in order."""
        with self._lock:
            return list(self._accepted if accepted_only else self._arrivals)

    def peak_requests(self, window_s: float, *, accepted_only: bool = False) -> int:
        """The most requests that arrived within any ``window_s`` seconds.

        ``accepted_only``: count only requests the rpm/tpm limiter let through.
        """
        times = self.arrivals(accepted_only=accepted_only)
        best = 0
        for i, start in enumerate(times):
            j = bisect.bisect_right(times, start + window_s - 1e-9, lo=i)
            best = max(best, j - i)
        return best

    # -- routes --------------------------------------------------------------------------

    def _route(self, conn: HttpConnection, request: HttpRequest) -> None:
        path, method = request.path, request.method
        kind = _ENDPOINTS.get(path)
        if kind is not None:
            if method != "POST":
                conn.send(405, b"405: Method Not Allowed", _ALLOW_POST)
            else:
                self._chat(conn, request, kind)  # a body too large: counted, key checked, 413
            return
        if path == "/v1/models" or path == "/sim/statistics":
            if method != "GET":
                conn.send(405, b"405: Method Not Allowed", _ALLOW_GET)
            elif request.body is None:
                conn.send(413, b"413: Payload Too Large", TEXT)
            elif path == "/v1/models":
                self._models(conn)
            else:
                self._statistics(conn, request)
            return
        conn.send(404, b"404: Not Found", TEXT)

    def _models(self, conn: HttpConnection) -> None:
        names = sorted(self.config.models) or ["simulator"]
        data = {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
        conn.send(200, _encoder.encode(data))

    def _statistics(self, conn: HttpConnection, request: HttpRequest) -> None:
        data = msgspec.to_builtins(self.statistics())
        window = urllib.parse.parse_qs(request.query).get("window", [""])[-1]
        if window:
            try:
                seconds = float(window)
            except ValueError:
                conn.send(400, f"400: `window` must be a number, got {window!r}".encode(), TEXT)
                return
            data["peak_requests"] = self.peak_requests(seconds)
            data["peak_accepted"] = self.peak_requests(seconds, accepted_only=True)
        conn.send(200, _encoder.encode(data))

    def _error(
        self,
        conn: HttpConnection,
        status: int,
        message: str,
        kind: str,
        code: str | None,
        headers: bytes = JSON,
    ) -> None:
        conn.send(status, error_body(message, kind, code), headers)

    # -- one chat request ----------------------------------------------------------------

    def _chat(self, conn: HttpConnection, request: HttpRequest, kind: str) -> None:
        assert self._loop is not None
        now = self._loop.time()
        with self._lock:
            self._arrivals.append(now)
        self._requests += 1
        self._in_flight += 1
        if self._in_flight > self._peak_in_flight:
            self._peak_in_flight = self._in_flight
        # However the request ends (answered, dropped, client gone, server closed).
        conn.on_done = self._chat_done
        self._answer(conn, request, kind)

    def _chat_done(self) -> None:
        self._in_flight -= 1

    def _answer(self, conn: HttpConnection, request: HttpRequest, kind: str) -> None:
        """The stages of one request (see the module docstring); each may answer and stop."""
        accepted = self._parse(conn, request, kind)
        if accepted is None or not self._admit(conn, accepted.reply.tokens):
            return
        fault = self._fault_draw.draw()
        if fault is not None:
            self._faults[fault] += 1
            error = ERROR_FAULTS.get(fault)
            if error is not None:
                status, message, kind_, code, headers = error
                if not self.config.rate_limit_headers:
                    headers = JSON  # a bare 429: no retry-after either
                self._error(conn, status, message, kind_, code, headers)
                return
        self._reply(conn, accepted, fault)

    def _parse(self, conn: HttpConnection, request: HttpRequest, kind: str) -> _Accepted | None:
        """The key, the body and the model; None when it answered a bad request."""
        cfg = self.config
        if cfg.api_key is not None:
            auth = request.headers.get("authorization", "")
            if auth != f"Bearer {cfg.api_key}":
                self._client_errors += 1
                given = auth.removeprefix("Bearer ") or "(none)"
                # Like some providers, echo the key that was given: the client must scrub it.
                message = f"Incorrect API key provided: {given}."
                self._error(conn, 401, message, "invalid_request_error", "invalid_api_key")
                return None
        if request.body is None:
            limit = f"413: Payload Too Large (the limit is {cfg.max_body_bytes} bytes)"
            conn.send(413, limit.encode(), TEXT)
            return None
        try:
            if kind == "chat":
                body = chat_decoder.decode(request.body)
            else:
                body = responses_decoder.decode(request.body).as_chat()
        except (msgspec.DecodeError, ValueError) as exc:
            self._bad_request(conn, 400, f"invalid request body: {exc}", None)
            return None
        settings = cfg.models.get(body.model)
        if cfg.models and settings is None:
            served = ", ".join(sorted(cfg.models))
            message = f"The model `{body.model}` does not exist (served: {served})."
            self._bad_request(conn, 404, message, "model_not_found")
            return None
        if not body.messages:
            what = "`messages`" if kind == "chat" else "`input`"
            self._bad_request(conn, 400, f"{what} must not be empty", None)
            return None
        settings = settings or _DEFAULT_SETTINGS
        # Drawn only for a model that asks, so other configs keep their fault sequence.
        flip = settings.flip_rate > 0 and self._rng.random() < settings.flip_rate
        reply = compose(body, settings, pass_rate=cfg.pass_rate, flip=flip)
        return _Accepted(kind, body, settings, reply)

    def _bad_request(
        self, conn: HttpConnection, status: int, message: str, code: str | None
    ) -> None:
        self._client_errors += 1
        self._error(conn, status, message, "invalid_request_error", code)

    def _admit(self, conn: HttpConnection, tokens: int) -> bool:
        """Take the request into the rpm/tpm window, or answer 429 and say False."""
        assert self._loop is not None
        now = self._loop.time()
        cfg = self.config
        if (
            cfg.capacity is not None
            and cfg.over_capacity == "429"
            and self._in_flight > cfg.capacity
        ):
            self._rate_limited += 1
            message = f"The server is at capacity ({cfg.capacity} requests in flight)."
            wait = max(0.05, cfg.latency_ms / 1000.0)
            lines = JSON
            if cfg.rate_limit_headers:
                retry = f"retry-after-ms: {max(1, round(wait * 1000))}\r\n"
                lines = JSON + retry.encode("latin-1")
            self._error(conn, 429, message, "requests", "server_overloaded", lines)
            return False
        refusal = self._limits.admit(now, tokens)
        if refusal is None:
            with self._lock:
                self._accepted.append(now)
            return True
        self._rate_limited += 1
        if refusal.wait is None:  # larger than the whole budget: no wait helps
            self._error(conn, 429, refusal.message, "tokens", "rate_limit_exceeded")
            return False
        if not self.config.rate_limit_headers:
            self._error(conn, 429, refusal.message, "requests", "rate_limit_exceeded")
            return False
        headers = self._limits.retry_headers(now, refusal.wait)
        self._error(
            conn,
            429,
            refusal.message,
            "requests",
            "rate_limit_exceeded",
            JSON + headers.encode("latin-1"),
        )
        return False

    def _reply(self, conn: HttpConnection, accepted: _Accepted, fault: str | None) -> None:
        """Deliver now, or after the latency (the model's, the request's, or a slow fault)."""
        cfg, settings = self.config, accepted.settings
        latency = settings.latency_ms if settings.latency_ms is not None else cfg.latency_ms
        jitter = settings.jitter_ms if settings.jitter_ms is not None else cfg.jitter_ms
        scripted = accepted.body.sim_latency_ms
        if scripted is not None:
            latency, jitter = min(max(scripted, 0.0), _MAX_SCRIPTED_LATENCY_MS), 0.0
        if fault == "slow":
            delay = cfg.slow_ms
        else:
            delay = latency + (self._rng.uniform(0, jitter) if jitter else 0.0)
            if scripted is None and cfg.tail_share and self._tail_rng.random() < cfg.tail_share:
                delay *= cfg.tail_factor
            capacity = cfg.capacity
            if capacity is not None and self._in_flight > capacity:
                delay *= self._in_flight / capacity  # the server shares itself out
        if delay > 0:
            conn.call_later(delay / 1000.0, self._deliver, conn, accepted, fault)
        else:
            self._deliver(conn, accepted, fault)

    def _deliver(self, conn: HttpConnection, accepted: _Accepted, fault: str | None) -> None:
        """The part after the latency: drop, malformed, or the completion."""
        if fault == "drop":
            conn.abort()  # nothing more to say on a dropped connection
            return
        if fault == "malformed":
            conn.send(200, MALFORMED)
            return
        reply = accepted.reply
        cached = self._prompt_cache.cached_tokens(accepted.body.messages)
        self._served += 1
        self._prompt_tokens += reply.prompt_tokens
        self._completion_tokens += reply.completion_tokens
        body, content_type = self._body(accepted, cached)
        if not self._limits.enabled or not self.config.rate_limit_headers:
            conn.send(200, body, content_type)
            return
        assert self._loop is not None
        headers = self._limits.headers(self._loop.time())
        conn.send(200, body, content_type + headers.encode("latin-1"))

    def _body(self, accepted: _Accepted, cached: int) -> tuple[bytes, bytes]:
        """The reply in the shape asked for, and its content-type header line."""
        request, reply, number = accepted.body, accepted.reply, self._served
        model = request.model
        if request.stream:
            self._streamed += 1
        if accepted.kind == "responses":
            if request.stream:
                return responses_stream(model, reply, number=number, cached=cached), _SSE
            return responses_body(model, reply, number=number, cached=cached), JSON
        if request.stream:
            options = request.stream_options
            include_usage = options is not None and options.include_usage
            stream = chunk_stream(
                model, reply, number=number, cached=cached, include_usage=include_usage
            )
            return stream, _SSE
        return completion_body(model, reply, number=number, cached=cached), JSON
