"""A local OpenAI-compatible server for tests, benchmarks and examples (127.0.0.1 only).

``POST /v1/chat/completions`` answers deterministically with real ``usage``; ``GET
/v1/models`` lists the configured models; ``GET /sim/statistics?window=W`` returns what it
saw as JSON (for a simulator in another process).

Replies (deterministic, so judge metrics give repeatable verdicts):

* a *judge prompt* is one where any message contains "PASS or FAIL" (any case). The
  true verdict: if the last user message has a line ``Answer: X`` and a line
  ``Expected: Y``, PASS iff X and Y match after strip, ignoring case; otherwise PASS iff a
  stable hash of the user message falls under ``pass_rate``. Each model then flips the
  verdict with its own ``noise`` probability, decided by a stable hash of (model, user
  message), so a noisy model is wrong on the same examples every run. The reply is
  ``"PASS. <one sentence>"`` or ``"FAIL. <one sentence>"``.
* any other prompt gets ``"Echo: "`` and the last user message with whitespace collapsed,
  cut to 200 characters (and to ``max_tokens * 4`` characters, finish reason "length").

Usage: ``prompt_tokens`` by :func:`~llm_client._wire.estimate_tokens` (about 4 characters
a token, 4 per message, 3 for priming), ``completion_tokens`` the reply's length / 4 plus
the model's ``reasoning_tokens``; a system message seen before is reported as cached.

A request body may carry ``"sim_latency_ms"`` (through the client's ``extra_body``) to
script the latency of that one call.

Limits: ``rpm``/``tpm`` are enforced over a sliding window of ``window_s`` seconds (at most
``rpm * window_s / 60`` requests accepted in any such window) and answered with 429,
``retry-after``, ``retry-after-ms`` and ``x-ratelimit-*`` headers. Faults are drawn per
request from one seeded generator, at the configured rates.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import ipaddress
import math
import random
import re
import threading
import urllib.parse
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import msgspec

from ._exceptions import ModelConfigError
from ._simserver import JSON, TEXT, HttpConnection, HttpRequest, HttpServer
from ._wire import estimate_tokens, message_text

__all__ = ["ModelSettings", "Simulator", "SimulatorConfig", "SimulatorStatistics"]

FAULT_KINDS = (
    "drop",
    "insufficient_quota",
    "error_500",
    "error_503",
    "rate_limit",
    "slow",
    "malformed",
)


class ModelSettings(msgspec.Struct, frozen=True, kw_only=True):
    """One served model: its latency (None: the simulator's), verdict noise, reasoning."""

    latency_ms: float | None = None
    jitter_ms: float | None = None
    noise: float = 0.0  # probability that a judge verdict is flipped
    reasoning_tokens: int = 0  # added to completion tokens and reported as reasoning

    def __post_init__(self) -> None:
        for name in ("latency_ms", "jitter_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ModelConfigError(f"`{name}` must be zero or more, got {value!r}")
        if not 0.0 <= self.noise <= 1.0:
            raise ModelConfigError(f"`noise` must be between 0 and 1, got {self.noise!r}")
        if self.reasoning_tokens < 0:
            raise ModelConfigError(
                f"`reasoning_tokens` must be zero or more, got {self.reasoning_tokens!r}"
            )


class SimulatorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the simulator does; every rate is a probability per request.

    ``latency_ms`` plus a uniform draw in ``[0, jitter_ms]`` delays each reply.
    ``slow_rate`` requests are delayed ``slow_ms`` instead (past a client's timeout).
    ``models`` maps a model name to its settings; when it is not empty, other model names
    get 404. ``api_key`` (None: none) is required as a Bearer token when set.
    """

    host: str = "127.0.0.1"
    port: int = 0
    seed: int = 0
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    rpm: float | None = None
    tpm: float | None = None
    window_s: float = 60.0
    error_500_rate: float = 0.0
    error_503_rate: float = 0.0
    rate_limit_rate: float = 0.0  # injected 429s, apart from the rpm/tpm limits
    insufficient_quota_rate: float = 0.0
    slow_rate: float = 0.0
    slow_ms: float = 5_000.0
    malformed_rate: float = 0.0
    drop_rate: float = 0.0
    pass_rate: float = 0.5
    models: dict[str, ModelSettings] = {}
    api_key: str | None = None
    cache_system_prompts: bool = True
    max_history: int = 1_000_000  # arrival times kept for peak_requests()
    max_body_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        host = "127.0.0.1" if self.host == "localhost" else self.host
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ModelConfigError(
                f"`host` must be a loopback address (127.0.0.1 or ::1), got {self.host!r}: "
                "the simulator is for local tests only"
            )
        if not 0 <= self.port <= 65535:
            raise ModelConfigError(f"`port` must be between 0 and 65535, got {self.port}")
        for name in ("latency_ms", "jitter_ms", "slow_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ModelConfigError(f"`{name}` must be zero or more, got {value!r}")
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ModelConfigError(f"`{name}` must be positive, got {value!r}")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ModelConfigError(f"`window_s` must be positive, got {self.window_s!r}")
        total = 0.0
        for kind in FAULT_KINDS:
            name = f"{kind}_rate"
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ModelConfigError(f"`{name}` must be between 0 and 1, got {value!r}")
            total += value
        if total > 1.0 + 1e-9:
            raise ModelConfigError(f"the fault rates add up to {total:g}; they must not pass 1")
        if not 0.0 <= self.pass_rate <= 1.0:
            raise ModelConfigError(f"`pass_rate` must be between 0 and 1, got {self.pass_rate!r}")
        if self.max_history < 1:
            raise ModelConfigError(f"`max_history` must be at least 1, got {self.max_history}")


class SimulatorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What the simulator saw."""

    requests: int  # chat completion requests received
    served: int  # answered 200 with a well-formed reply
    rate_limited: int  # 429s sent by the rpm/tpm limiter
    faults: dict[str, int]  # injected faults by kind (see FAULT_KINDS)
    client_errors: int  # 400/401/404 for bad requests
    in_flight: int
    peak_in_flight: int
    prompt_tokens: int
    completion_tokens: int


_DEFAULT_SETTINGS = ModelSettings()


class _SimRequest(msgspec.Struct):
    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    sim_latency_ms: float | None = None  # a test scripting one slow call


_request_decoder = msgspec.json.Decoder(_SimRequest)
_encoder = msgspec.json.Encoder()
_ANSWER = re.compile(r"^\s*answer\s*:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_EXPECTED = re.compile(r"^\s*expected\s*:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_ALLOW_POST = TEXT + b"Allow: POST\r\n"
_ALLOW_GET = TEXT + b"Allow: GET\r\n"
_INJECTED_429_HEADERS = JSON + b"retry-after-ms: 100\r\nretry-after: 1\r\n"
_MALFORMED = b'{"id": "chatcmpl-sim", "choices": [{"message": {"content": "PA'
_JUDGE = re.compile(r"pass\s+or\s+fail", re.IGNORECASE)


def _fraction(*parts: str) -> float:
    """A stable hash of ``parts`` mapped to [0, 1) (the same in every process and run)."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def judge_verdict(user: str, model: str, *, pass_rate: float, noise: float) -> bool:
    """The simulator's verdict for a judge prompt (True: PASS); see the module docstring."""
    answer = _ANSWER.search(user)
    expected = _EXPECTED.search(user)
    if answer is not None and expected is not None:
        verdict = answer.group(1).strip().lower() == expected.group(1).strip().lower()
    else:
        verdict = _fraction("verdict", user) < pass_rate
    if noise > 0 and _fraction("noise", model, user) < noise:
        verdict = not verdict
    return verdict


def reply_text(
    messages: list[dict[str, Any]], model: str, *, pass_rate: float, noise: float
) -> str:
    """The deterministic reply to ``messages`` (before any max_tokens cut)."""
    user = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            user = message_text(message.get("content"))
            break
    if any(_JUDGE.search(message_text(m.get("content"))) for m in messages):
        if judge_verdict(user, model, pass_rate=pass_rate, noise=noise):
            return "PASS. The answer agrees with what was expected."
        return "FAIL. The answer does not agree with what was expected."
    return "Echo: " + " ".join(user.split())[:200]


def _reset(seconds: float) -> str:
    """A duration the way OpenAI writes ``x-ratelimit-reset-*``: "20ms", "1.5s", "6m0s"."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s"


class _Window:
    """Accepted requests (time, tokens) within the last ``window`` seconds."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.entries: deque[tuple[float, int]] = deque()
        self.tokens = 0

    def purge(self, now: float) -> None:
        edge = now - self.window
        entries = self.entries
        while entries and entries[0][0] <= edge:
            self.tokens -= entries.popleft()[1]

    def add(self, now: float, tokens: int) -> None:
        self.entries.append((now, tokens))
        self.tokens += tokens

    def wait_for_requests(self, now: float, limit: float) -> float:
        """Seconds until one more request fits under ``limit``."""
        excess = len(self.entries) + 1 - math.floor(limit)
        if excess <= 0:
            return 0.0
        return max(0.0, self.entries[excess - 1][0] + self.window - now)

    def wait_for_tokens(self, now: float, limit: float, need: int) -> float:
        freed = 0
        over = self.tokens + need - limit
        for stamp, tokens in self.entries:
            freed += tokens
            if freed >= over:
                return max(0.0, stamp + self.window - now)
        return self.window


class Simulator:
    """The simulator server; ``async with`` in a running loop, or ``running_in_thread()``."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config or SimulatorConfig()
        self._rng = random.Random(self.config.seed)
        edge = 0.0
        self._fault_edges: list[tuple[float, str]] = []
        for kind in FAULT_KINDS:
            rate = getattr(self.config, f"{kind}_rate")
            edge += rate
            if rate > 0:
                self._fault_edges.append((edge, kind))
        self._server: HttpServer | None = None
        self._port = 0
        self._lock = threading.Lock()  # guards the arrival history read from other threads
        self._arrivals: deque[float] = deque(maxlen=self.config.max_history)
        self._accepted: deque[float] = deque(maxlen=self.config.max_history)
        self._window = _Window(self.config.window_s)
        self._seen_system: set[str] = set()
        self._requests = 0
        self._served = 0
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

    # -- handlers ------------------------------------------------------------------------
    # Plain functions called by the HTTP server: no coroutine per request, and a delayed
    # reply is a timer (see _simserver for why).

    def _route(self, conn: HttpConnection, request: HttpRequest) -> None:
        path, method = request.path, request.method
        if path == "/v1/chat/completions":
            if method != "POST":
                conn.send(405, b"405: Method Not Allowed", _ALLOW_POST)
            else:
                self._chat(conn, request)  # a body too large: counted, key checked, 413
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
        body = {"error": {"message": message, "type": kind, "code": code, "param": None}}
        conn.send(status, _encoder.encode(body), headers)

    def _limit_headers(self, now: float) -> str:
        """The ``x-ratelimit-*`` header lines (each ending in CRLF) for the current window."""
        cfg, window = self.config, self._window
        lines = ""
        if cfg.rpm is not None:
            limit = cfg.rpm * cfg.window_s / 60.0
            lines += (
                f"x-ratelimit-limit-requests: {math.floor(limit)}\r\n"
                f"x-ratelimit-remaining-requests: "
                f"{max(0, math.floor(limit) - len(window.entries))}\r\n"
                f"x-ratelimit-reset-requests: {_reset(window.wait_for_requests(now, limit))}\r\n"
            )
        if cfg.tpm is not None:
            limit = cfg.tpm * cfg.window_s / 60.0
            lines += (
                f"x-ratelimit-limit-tokens: {math.floor(limit)}\r\n"
                f"x-ratelimit-remaining-tokens: {max(0, math.floor(limit - window.tokens))}\r\n"
                f"x-ratelimit-reset-tokens: {_reset(window.wait_for_tokens(now, limit, 1))}\r\n"
            )
        return lines

    def _draw_fault(self) -> str | None:
        # One draw per request whatever the rates, so a seed gives the same sequence.
        draw = self._rng.random()
        for edge, kind in self._fault_edges:
            if draw < edge:
                return kind
        return None

    def _chat(self, conn: HttpConnection, request: HttpRequest) -> None:
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
        self._answer(conn, request)

    def _chat_done(self) -> None:
        self._in_flight -= 1

    def _answer(self, conn: HttpConnection, request: HttpRequest) -> None:
        cfg = self.config
        if cfg.api_key is not None:
            auth = request.headers.get("authorization", "")
            if auth != f"Bearer {cfg.api_key}":
                self._client_errors += 1
                given = auth.removeprefix("Bearer ") or "(none)"
                # Like some providers, echo the key that was given: the client must scrub it.
                return self._error(
                    conn,
                    401,
                    f"Incorrect API key provided: {given}.",
                    "invalid_request_error",
                    "invalid_api_key",
                )
        body = request.body
        if body is None:
            max_bytes = cfg.max_body_bytes
            return conn.send(
                413,
                f"413: Payload Too Large (the limit is {max_bytes} bytes)".encode(),
                TEXT,
            )
        try:
            parsed = _request_decoder.decode(body)
        except (msgspec.DecodeError, ValueError) as exc:
            self._client_errors += 1
            return self._error(
                conn, 400, f"invalid request body: {exc}", "invalid_request_error", None
            )
        settings = cfg.models.get(parsed.model)
        if cfg.models and settings is None:
            self._client_errors += 1
            return self._error(
                conn,
                404,
                f"The model `{parsed.model}` does not exist "
                f"(served: {', '.join(sorted(cfg.models))}).",
                "invalid_request_error",
                "model_not_found",
            )
        settings = settings or _DEFAULT_SETTINGS
        if not parsed.messages:
            self._client_errors += 1
            return self._error(
                conn, 400, "`messages` must not be empty", "invalid_request_error", None
            )

        limit_out = parsed.max_completion_tokens or parsed.max_tokens
        text = reply_text(
            parsed.messages, parsed.model, pass_rate=cfg.pass_rate, noise=settings.noise
        )
        finish = "stop"
        if limit_out is not None and len(text) > limit_out * 4:
            text, finish = text[: limit_out * 4], "length"
        prompt_tokens = estimate_tokens(parsed.messages)
        completion_tokens = (len(text) + 3) // 4 + settings.reasoning_tokens
        tokens = prompt_tokens + completion_tokens

        # The limiter first, as a real gateway does; a refused request does not count.
        assert self._loop is not None
        now = self._loop.time()
        window = self._window
        window.purge(now)
        if cfg.rpm is not None or cfg.tpm is not None:
            wait = 0.0
            what = ""
            if cfg.rpm is not None:
                limit = cfg.rpm * cfg.window_s / 60.0
                wait = window.wait_for_requests(now, limit)
                what = (
                    f"requests per window (RPM): Limit {math.floor(limit)}, "
                    f"Used {len(window.entries)}"
                )
            if cfg.tpm is not None and not wait:
                limit = cfg.tpm * cfg.window_s / 60.0
                if tokens > limit:
                    self._rate_limited += 1
                    return self._error(
                        conn,
                        429,
                        f"Request too large: Limit {math.floor(limit)}, Requested {tokens}.",
                        "tokens",
                        "rate_limit_exceeded",
                    )
                if window.tokens + tokens > limit:
                    wait = window.wait_for_tokens(now, limit, tokens)
                    what = (
                        f"tokens per window (TPM): Limit {math.floor(limit)}, "
                        f"Used {window.tokens}, Requested {tokens}"
                    )
            if wait > 0:
                self._rate_limited += 1
                headers = (
                    f"{self._limit_headers(now)}"
                    f"retry-after-ms: {max(1, math.ceil(wait * 1000))}\r\n"
                    f"retry-after: {max(1, math.ceil(wait))}\r\n"
                )
                return self._error(
                    conn,
                    429,
                    f"Rate limit reached for {what}. Please try again in {_reset(wait)}.",
                    "requests",
                    "rate_limit_exceeded",
                    JSON + headers.encode("latin-1"),
                )
            window.add(now, tokens)
        with self._lock:
            self._accepted.append(now)

        fault = self._draw_fault()
        if fault is not None:
            self._faults[fault] += 1
            if fault == "insufficient_quota":
                return self._error(
                    conn,
                    429,
                    "You exceeded your current quota, please check your plan and billing details.",
                    "insufficient_quota",
                    "insufficient_quota",
                )
            if fault in ("error_500", "error_503"):
                status = 500 if fault == "error_500" else 503
                return self._error(conn, status, f"simulated {status}", "server_error", None)
            if fault == "rate_limit":
                return self._error(
                    conn,
                    429,
                    "Rate limit reached (simulated).",
                    "requests",
                    "rate_limit_exceeded",
                    _INJECTED_429_HEADERS,
                )

        latency = settings.latency_ms if settings.latency_ms is not None else cfg.latency_ms
        jitter = settings.jitter_ms if settings.jitter_ms is not None else cfg.jitter_ms
        if parsed.sim_latency_ms is not None:
            latency, jitter = min(max(parsed.sim_latency_ms, 0.0), 600_000.0), 0.0
        delay = (
            cfg.slow_ms
            if fault == "slow"
            else latency + (self._rng.uniform(0, jitter) if jitter else 0.0)
        )
        reply = (parsed, settings, text, finish, prompt_tokens, completion_tokens, fault)
        if delay > 0:
            conn.call_later(delay / 1000.0, self._deliver, conn, reply)
        else:
            self._deliver(conn, reply)

    def _deliver(self, conn: HttpConnection, reply: tuple[Any, ...]) -> None:
        """The part after the latency: drop, malformed, or the completion."""
        parsed: _SimRequest
        settings: ModelSettings
        parsed, settings, text, finish, prompt_tokens, completion_tokens, fault = reply
        if fault == "drop":
            conn.abort()  # nothing more to say on a dropped connection
            return
        if fault == "malformed":
            conn.send(200, _MALFORMED)
            return

        cfg = self.config
        cached = 0
        first = parsed.messages[0]
        if cfg.cache_system_prompts and first.get("role") == "system":
            system = message_text(first.get("content"))
            digest = hashlib.blake2b(system.encode(), digest_size=16).hexdigest()
            if digest in self._seen_system:
                cached = 4 + (len(system) + 3) // 4
            elif len(self._seen_system) < 100_000:
                self._seen_system.add(digest)
        self._served += 1
        self._prompt_tokens += prompt_tokens
        self._completion_tokens += completion_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": settings.reasoning_tokens},
        }
        data = {
            "id": f"chatcmpl-sim-{self._served}",
            "object": "chat.completion",
            "created": 0,
            "model": parsed.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ],
            "usage": usage,
        }
        if cfg.rpm is None and cfg.tpm is None:
            conn.send(200, _encoder.encode(data))
            return
        assert self._loop is not None
        headers = self._limit_headers(self._loop.time())
        conn.send(200, _encoder.encode(data), JSON + headers.encode("latin-1"))
