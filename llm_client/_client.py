"""The model client: one chat completion at a time, governed, retried, metered.

Two calls share one path (admission, one attempt, settlement, classification, retry):
:meth:`ModelClient.complete` builds its own chat request and returns a
:class:`Completion`; :meth:`ModelClient.forward` sends a request someone else built (an
SDK's) and returns the provider's reply with its cost (``_forward.py``).
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

import msgspec

from ._config import ModelConfig
from ._exceptions import ClientClosedError, LLMError, ModelConfigError
from ._fair import current_share
from ._forward import Forwarded, ForwardRequest, is_event_stream, reply_headers
from ._governor import GovernorStatistics, Permit, RateGovernor, governor_for
from ._hedge import Hedge, Hedger
from ._pricing import Prices, resolve_prices
from ._redact import Redactor
from ._retry import NEVER_RETRY, RetryDetails, backoff, is_retryable_status, server_wait
from ._spend import Reservation, Spend
from ._transports import HTTPRequest, HTTPResponse, HTTPTransport, Transport, TransportError
from ._usage import CallUsage, TokenUsage, read_usage, usage_of
from ._wire import (
    REQUEST_OPTIONS,
    ChatRequest,
    ChatResponse,
    ErrorDetail,
    error_decoder,
    message_text,
    request_encoder,
    response_decoder,
)

__all__ = ["Completion", "ModelClient"]

#: Completion tokens reserved when neither the call nor the config sets ``max_tokens``;
#: the reservation is corrected from ``usage`` when the reply arrives.
DEFAULT_COMPLETION_RESERVE = 256

_T = TypeVar("_T")
#: Reads a 2xx reply: a failure (a malformed body), or the value the call returns, and the
#: tokens it used (None: unknown, the reservation is refunded).
_Reader = Callable[[HTTPResponse], tuple["_Failure | None", "_T | None", int | None]]


class Completion(TokenUsage, frozen=True, kw_only=True, gc=False):
    """One reply with what it cost: its :class:`~llm_client.TokenUsage` (the token
    counts, first) and the rest.

    ``queued_ms`` is the time spent waiting on the rate governor and the concurrency cap
    (shared pauses after a 429 included); ``latency_ms`` is the rest of the call's wall
    time (HTTP attempts and backoff sleeps). ``cost_usd`` is None when the price is
    unknown, and ``cost_note`` says why (or how the price was matched).
    ``hedges`` is 1 when a second copy was sent (``ModelConfig.hedge``), ``hedge_won``
    whether its answer is this one; the tokens and cost then cover both copies
    (``_hedge.py``).
    """

    text: str
    model: str
    cost_usd: float | None = None
    cost_note: str | None = None
    queued_ms: float = 0.0
    latency_ms: float = 0.0
    retries: int = 0
    rate_limited: int = 0
    finish_reason: str | None = None
    hedges: int = 0
    hedge_won: bool = False


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The messages as dicts (msgspec encodes dicts only) and their prompt token estimate.

    A list of dicts goes as it is (the encoder reads it, nothing keeps it); other mappings
    are copied. The estimate is :func:`~llm_client._wire.estimate_tokens`, inlined here
    because this runs on every call.
    """
    if type(messages) is not list and (
        not isinstance(messages, Sequence) or isinstance(messages, str)
    ):
        messages = ()  # refused just below, with the same message as an empty list
    if not messages:
        raise TypeError(
            "`messages` must be a non-empty list of {'role': ..., 'content': ...} dicts"
        )
    plain: list[dict[str, Any]] = []
    total = 3
    for i, message in enumerate(messages):
        if type(message) is not dict:
            if not isinstance(message, Mapping) or "role" not in message:
                raise TypeError(
                    f"`messages[{i}]` must be a dict with 'role' and 'content', got {message!r}"
                )
            message = dict(message)
        elif "role" not in message:
            raise TypeError(
                f"`messages[{i}]` must be a dict with 'role' and 'content', got {message!r}"
            )
        plain.append(message)
        content = message.get("content")
        text = content if type(content) is str else message_text(content)
        total += 4 + (len(text) + 3) // 4
    return plain, total


class _Failure:
    """One failed attempt, classified; ``response`` is the reply when one came."""

    __slots__ = ("code", "kind", "message", "response", "retryable", "status", "wait")

    def __init__(
        self,
        kind: Literal["status", "transport", "malformed", "body_timeout"],
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        retryable: bool = True,
        wait: float | None = None,
    ) -> None:
        self.kind = kind
        self.message = message
        self.status = status
        self.code = code
        self.retryable = retryable
        self.wait = wait
        self.response: HTTPResponse | None = None


def _error_detail(body: bytes, redact: Redactor) -> tuple[str, str | None]:
    """The provider's message and code (or type) from an error body, leniently; the key
    redacted before the text is shortened (a cut could split it)."""
    try:
        parsed = error_decoder.decode(body)
    except msgspec.DecodeError:
        text = redact(body.decode("utf-8", "replace")).strip()
        return (_short(text) or "(empty body)"), None
    err = parsed.error
    if isinstance(err, ErrorDetail):
        code = err.code if err.code is not None else err.type
        message = _short(redact(err.message)) or "(no message)"
        return message, (None if code is None else redact(str(code)))
    if isinstance(err, str):
        return _short(redact(err)), None
    return _short(redact(body.decode("utf-8", "replace"))), None


def default_transport(config: ModelConfig) -> Transport:
    """The lean HTTP/1.1 client for a plain-HTTP server reached directly (vLLM, llama.cpp,
    Ollama, the simulator: where the client's CPU per call is what limits throughput);
    aiohttp for HTTPS providers and whenever a proxy is configured, since it speaks TLS
    and proxies the way their users expect."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(config.base_url)
    proxied = "http" in getproxies() and not proxy_bypass(parts.hostname or "")
    if parts.scheme == "http" and not proxied:
        return HTTPTransport(limit=config.max_concurrency)
    from ._transports import AiohttpTransport

    return AiohttpTransport(limit=config.max_concurrency)


class ModelClient:
    """An async client for one model of an OpenAI-compatible endpoint.

    Open it with ``async with`` inside the running loop; it owns its HTTP session and
    refuses to reopen once closed. Every client of the same (base URL, key, model) in a
    loop shares one :class:`~llm_client._governor.RateGovernor`, so concurrent
    evaluations share one rate budget.

    ``transport`` replaces the default (see :func:`default_transport`:
    :class:`~llm_client.HTTPTransport`, a lean HTTP/1.1 keep-alive client, for plain-HTTP
    servers; :class:`~llm_client.AiohttpTransport` for HTTPS and proxies; a
    :class:`~llm_client.MockTransport` in unit tests); ``on_retry`` is called with a
    :class:`RetryDetails` before each retry; ``seed`` seeds the backoff jitter.
    ``api_key`` is the key itself when it does not come from the config's environment
    variable (the key an SDK's request carries, for :meth:`forward`): it keys the shared
    governor and is scrubbed from errors, and is never logged.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        transport: Transport | None = None,
        on_retry: Callable[[RetryDetails], None] | None = None,
        seed: int | None = None,
        api_key: str | None = None,
    ) -> None:
        if not isinstance(config, ModelConfig):
            raise TypeError(f"`config` must be a ModelConfig, got {type(config).__name__}")
        self._config = config
        self._given_key = api_key
        self._transport: Transport = transport or default_transport(config)
        self._on_retry = on_retry
        self._rng = random.Random(seed)
        self._state: Literal["new", "open", "closed"] = "new"
        self._key: str | None = None
        # Every error text this client makes or passes on goes through it (_redact.py).
        self._redact = Redactor()
        self._headers: dict[str, str] = {}
        self._governor: RateGovernor | None = None
        self._prices: Prices | None = None
        hedge = config.hedge
        assert hedge is None or isinstance(hedge, Hedge)  # ModelConfig made it one
        self._hedger = None if hedge is None else Hedger(hedge)

    @property
    def config(self) -> ModelConfig:
        return self._config

    async def __aenter__(self) -> ModelClient:
        if self._state == "closed":
            raise ClientClosedError(
                "this ModelClient was closed and cannot be reopened; create a new one",
                model=self._config.model,
            )
        if self._state == "open":
            raise ClientClosedError("this ModelClient is already open", model=self._config.model)
        cfg = self._config
        self._key = self._given_key if self._given_key is not None else cfg.api_key()
        self._redact = Redactor([self._key])
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            self._headers["Authorization"] = f"Bearer {self._key}"
        # genai-prices takes ~0.25 s to import and index: resolve off the loop, once.
        self._prices = await asyncio.to_thread(
            resolve_prices,
            cfg.model,
            cfg.base_url,
            cfg.price_input,
            cfg.price_output,
            cfg.price_cached_input,
        )
        self._governor = governor_for(
            base_url=cfg.base_url,
            api_key=self._key,
            model=cfg.model,
            rpm=cfg.rpm,
            tpm=cfg.tpm,
            max_concurrency=cfg.max_concurrency,
            margin=cfg.rate_margin,
        )
        await self._transport.open()
        self._state = "open"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP session (idempotent); the client cannot be reopened."""
        if self._state == "closed":
            return
        was_open = self._state == "open"
        self._state = "closed"
        if was_open:
            # Shielded: a cancelled owner must still return its connections.
            await asyncio.shield(self._transport.aclose())

    def statistics(self) -> GovernorStatistics:
        """The shared governor's state (every client of this model in this loop)."""
        if self._governor is None:
            raise ClientClosedError(
                "statistics() needs an open client: use it inside `async with`",
                model=self._config.model,
            )
        stats = self._governor.statistics()
        if self._hedger is not None:
            stats = msgspec.structs.replace(stats, hedging=self._hedger.statistics())
        return stats

    @property
    def priced(self) -> bool:
        """Whether the model's price is known (False before the client opens)."""
        return self._prices is not None and self._prices.known

    @property
    def in_flight_limit(self) -> int | None:
        """The shared governor's in-flight limit now (None before the client opens)."""
        return None if self._governor is None else self._governor.in_flight_limit

    # -- the call ------------------------------------------------------------------------

    def _build(
        self, messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any]
    ) -> tuple[bytes, int]:
        """The request body and the tokens to reserve for it (prompt estimate + output)."""
        cfg = self._config
        plain, total = _plain_messages(messages)
        if options:
            return self._build_with_options(plain, total, options)
        # The common call: no options, only the config's defaults.
        try:
            body = request_encoder.encode(
                ChatRequest(
                    model=cfg.model,
                    messages=plain,
                    max_tokens=cfg.max_tokens,
                    temperature=cfg.temperature,
                    reasoning_effort=cfg.reasoning_effort,
                )
            )
        except (TypeError, msgspec.EncodeError) as exc:
            raise TypeError(f"complete(): could not encode the request: {exc}") from None
        return body, total + (cfg.max_tokens or DEFAULT_COMPLETION_RESERVE)

    def _build_with_options(
        self, plain: list[dict[str, Any]], total: int, options: Mapping[str, Any]
    ) -> tuple[bytes, int]:
        cfg = self._config
        options = dict(options)
        extra_body = options.pop("extra_body", None)
        unknown = sorted(name for name in options if name not in REQUEST_OPTIONS)
        if unknown:
            raise TypeError(
                f"complete() got unknown option(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(REQUEST_OPTIONS))}, extra_body"
            )
        if "max_tokens" not in options and cfg.max_tokens is not None:
            options["max_tokens"] = cfg.max_tokens
        if "temperature" not in options and cfg.temperature is not None:
            options["temperature"] = cfg.temperature
        if "reasoning_effort" not in options and cfg.reasoning_effort is not None:
            options["reasoning_effort"] = cfg.reasoning_effort
        try:
            request = ChatRequest(model=cfg.model, messages=plain, **options)
            body = request_encoder.encode(request)
        except (TypeError, msgspec.EncodeError) as exc:
            raise TypeError(f"complete(): could not encode the request: {exc}") from None
        if extra_body:
            merged = msgspec.json.decode(body)
            merged.update(extra_body)
            body = request_encoder.encode(merged)
        limit = options.get("max_completion_tokens") or options.get("max_tokens")
        reserve = total + (int(limit) if limit else DEFAULT_COMPLETION_RESERVE)
        return body, reserve

    async def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Send one chat completion and return the reply; raise :class:`LLMError` on failure.

        ``options`` are request fields (``temperature``, ``max_tokens``, ``stop``, ``seed``,
        ``response_format``... and ``extra_body`` for anything else).
        """
        if self._state != "open" or self._governor is None:
            raise ClientClosedError(
                "complete() needs an open client: use `async with ModelClient(config) as "
                "client:`" + (" (this one is closed)" if self._state == "closed" else ""),
                model=self._config.model,
            )
        try:
            state = _CallState()
            cap = _output_cap(options) or self._config.max_tokens
            if cap is None and state.spend is not None and state.spend.limits_usd:
                # A dollar limit needs a worst case: the call is capped (``_spend.py``).
                options["max_tokens"] = cap = state.spend.max_tokens
            state.cap = cap
            body, reserve = self._build(messages, options)
            request = HTTPRequest("POST", self._config.endpoint, self._headers, body)
            if self._hedger is not None:
                return await self._hedged(self._hedger, request, reserve, state)
            call = self._call(request, reserve, state, self._read_chat, self._config.timeout)
            decoded = await self._within_deadline(call, state)
            if isinstance(decoded, _Failure):
                raise self._give_up(decoded, state)
            return self._completion(decoded, state)
        except Exception as exc:
            # The last line: whatever leaves the client (an unexpected exception out of a
            # transport included) leaves without the key. Ours are clean already.
            clean = self._redact.exception(exc)
            if clean is exc:
                raise
            raise clean from None

    async def forward(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        timeout: float | None = None,
    ) -> Forwarded:
        """Send a request someone else built (an SDK's) and return the provider's reply.

        Governed, retried (408, 409, 429, 5xx, dropped connections; the server's wait
        honoured) and priced like :meth:`complete`; the reply comes back as the provider
        sent it, with its usage read from the body: chat completions, the Responses API
        and Anthropic messages, plain or streamed (see ``_forward.py`` for the few changes
        made on the way). ``headers`` are sent as given, the caller's own key included;
        ``timeout`` bounds one attempt (default: the config's). A reply the client gives
        up on is returned, not raised, for the caller's SDK to raise its own error; only a
        call that got no reply at all (connection errors, timeouts, the deadline) raises
        :class:`LLMError`.
        """
        if self._state != "open" or self._governor is None:
            raise ClientClosedError(
                "forward() needs an open client: use `async with ModelClient(config) as "
                "client:`" + (" (this one is closed)" if self._state == "closed" else ""),
                model=self._config.model,
            )
        prepared = ForwardRequest(method, url, headers, body, self._config.model)
        # The request's own key (an SDK's) is scrubbed as well as the client's.
        redact = _redactor(prepared.api_key, self._key)
        try:
            state = _CallState()
            if state.spend is not None and state.spend.limits_usd:
                state.cap = prepared.output_cap or prepared.cap_output(state.spend.max_tokens)
            request = HTTPRequest(method, url, prepared.headers, prepared.body)
            attempt_timeout = self._config.timeout if timeout is None else timeout
            call = self._call(request, prepared.reserve, state, _read_forwarded, attempt_timeout)
            outcome = await self._within_deadline(call, state)
            if isinstance(outcome, _Failure):
                if outcome.response is None:
                    raise self._give_up(outcome, state)
                return self._forwarded(
                    prepared, outcome.response, None, state, failed=True, redact=redact
                )
            response, usage = outcome
            return self._forwarded(prepared, response, usage, state, failed=False, redact=redact)
        except Exception as exc:
            clean = redact.exception(exc)
            if clean is exc:
                raise
            raise clean from None

    async def _hedged(
        self, hedger: Hedger, request: HTTPRequest, reserve: int, state: _CallState
    ) -> Completion:
        """:meth:`complete`'s call, with a second copy past the quantile (``_hedge.py``).

        Under a spending budget the copy reserves its own worst case before it is sent,
        without waiting (:meth:`Spend.try_reserve`): one that does not fit is not sent
        (refused, by the budget), and its reservation is settled with what it cost when
        it ends (its reply's usage; kept as spent when it was cancelled in flight, since
        the provider may bill it)."""
        governor, timeout, spend = self._governor, self._config.timeout, state.spend
        assert governor is not None
        held: list[Reservation] = []  # the copy's hold on the budget, once admitted

        def admit() -> Permit | None:
            hold = None
            if spend is not None:
                hold = spend.try_reserve(self._worst_usd(state, request))
                if hold is None:
                    hedger.refused_by_budget()
                    return None
            permit = governor.try_acquire(reserve)
            if hold is not None:
                if permit is None:
                    hold.settle(0.0, sent=False)
                else:
                    held.append(hold)
            return permit

        async def second(permit: Permit) -> tuple[bool, ChatResponse | None]:
            got: tuple[_Failure | None, ChatResponse | None] | None = None
            try:
                got = await self._attempt(governor, permit, request, self._read_chat, timeout)
            finally:
                if held:  # cancelled in flight: the cost is unknown, the worst case stays
                    held[0].settle(None if got is None else self._cost_of(*got))
            assert got is not None
            failure, value = got
            return (failure is None or failure.response is not None), value

        outcome = await hedger.race(
            lambda: self._within_deadline(
                self._call(request, reserve, state, self._read_chat, timeout), state
            ),
            second,
            admit,
            lambda value: not isinstance(value, _Failure),
        )
        if isinstance(outcome.value, _Failure):
            raise self._give_up(outcome.value, state)
        winner = self._completion(cast(ChatResponse, outcome.value), state)
        loser = outcome.loser
        return hedger.settle(
            winner, None if loser is None else self._completion(loser, state), outcome
        )

    async def _within_deadline(self, call: Awaitable[_T], state: _CallState) -> _T:
        """``call`` bounded by the config's deadline (queueing and retries included)."""
        deadline = self._config.deadline
        if deadline is None:
            return await call
        loop = asyncio.get_running_loop()
        scope = asyncio.timeout_at(loop.time() + deadline)
        try:
            async with scope:
                return await call
        except TimeoutError:
            if not scope.expired():
                raise
            last = f"; last error: {state.last_message}" if state.last_message else ""
            cfg = self._config
            raise LLMError(
                self._redact(
                    f"model {cfg.model!r} at {cfg.base_url}: gave up at the deadline of "
                    f"{deadline:g} s after {state.attempts} attempt(s){last}"
                ),
                status=state.last_status,
                model=cfg.model,
                attempts=state.attempts,
                retries=state.retries,
                rate_limited=state.rate_limited,
            ) from None

    async def _call(
        self,
        request: HTTPRequest,
        reserve: int,
        state: _CallState,
        read: _Reader[_T],
        timeout: float,
    ) -> _T | _Failure:
        """Attempts until ``read`` accepts a reply (its value is returned) or the client
        gives up (the last failure is returned, its reply attached when one came)."""
        cfg = self._config
        governor = self._governor
        assert governor is not None
        seq = governor.next_seq()
        malformed_seen = 0
        while True:
            permit, (failure, value) = await self._admitted_attempt(
                governor, state, request, reserve, seq, read, timeout
            )
            if failure is None:
                return cast(_T, value)  # read() accepted the reply
            state.last_status = failure.status
            state.last_message = failure.message
            if failure.status == 429:
                state.rate_limited += 1
            if failure.kind in ("malformed", "body_timeout"):
                malformed_seen += 1
                failure.retryable = malformed_seen <= 1
            attempts_left = state.attempts <= cfg.max_retries
            hinted = failure.wait is not None
            if not failure.retryable or not attempts_left:
                if failure.status == 429:
                    # A 429 no retry helps (quota, a request too large) is no congestion.
                    bare = failure.retryable and not hinted
                    governor.note_rate_limited(
                        0.0, hinted=not bare, epoch=permit.epoch, admitted=permit.admitted
                    )
                return failure
            wait = failure.wait
            if wait is None:
                wait = backoff(state.attempts, self._rng)
            state.retries += 1
            governor.note_retry()
            if failure.status == 429:
                # One pause for everyone: the governor holds every caller (this one
                # included, on its next acquire) until it ends.
                governor.note_rate_limited(
                    wait, hinted=hinted, epoch=permit.epoch, admitted=permit.admitted
                )
                if not hinted and governor.adapting:
                    # A bare 429 under AIMD is the governor's probe: the next probe is
                    # another caller's, so that no one call spends its retries on them.
                    seq = governor.next_seq()
            if self._on_retry is not None:
                self._on_retry(
                    RetryDetails(
                        model=cfg.model,
                        attempt=state.attempts,
                        status=failure.status,
                        reason=failure.message,
                        wait_s=wait,
                        shared_pause=failure.status == 429,
                    )
                )
            if failure.status != 429 and wait > 0:
                await asyncio.sleep(wait)

    async def _admitted_attempt(
        self,
        governor: RateGovernor,
        state: _CallState,
        request: HTTPRequest,
        reserve: int,
        seq: int,
        read: _Reader[_T],
        timeout: float,
    ) -> tuple[Permit, tuple[_Failure | None, _T | None]]:
        """One attempt: its spending reservation (``_spend.py``), the governor's permit,
        the HTTP attempt; the reservation is settled with what the attempt cost."""
        held = await self._reserve(state, request)
        try:
            permit = await governor.acquire(reserve, seq=seq)
        except BaseException:
            if held is not None:
                held.settle(0.0, sent=False)
            raise
        state.queued_s += permit.queued_s
        state.attempts += 1
        outcome: tuple[_Failure | None, _T | None] | None = None
        try:
            outcome = await self._attempt(governor, permit, request, read, timeout)
        finally:
            if held is not None:  # cancelled mid-attempt: the cost is unknown
                held.settle(None if outcome is None else self._cost_of(*outcome))
        return permit, outcome

    async def _reserve(self, state: _CallState, request: HTTPRequest) -> Reservation | None:
        """One attempt's hold on its spending ledger (``_spend.py``), None without one:
        its worst case is the body's bytes (a bound on its prompt tokens) and its output
        cap at the model's price."""
        spend = state.spend
        if spend is None:
            return None
        return await spend.reserve(self._worst_usd(state, request), self._config.model)

    def _worst_usd(self, state: _CallState, request: HTTPRequest) -> float:
        """One attempt's worst case under its ledger: 0 without a dollar limit."""
        spend = state.spend
        worst = 0.0
        if spend is not None and spend.limits_usd:
            if state.cap is None:
                raise ModelConfigError(
                    f"a request to model {self._config.model!r} sets no output cap the "
                    "engine can read, and a dollar budget needs one to reserve its worst "
                    "case: set `max_tokens` on the call, or drop the dollar limit",
                    field="max_tokens",
                )
            assert self._prices is not None
            usd, _ = self._prices.cost(len(request.body), state.cap, 0)
            if usd is None:
                raise ModelConfigError(
                    f"model {self._config.model!r} has no known price, and a dollar budget "
                    "needs one to reserve a call's worst case: give the model a price "
                    "(price_input/price_output, USD per million tokens), or drop the "
                    "dollar limit",
                    field="price_input",
                )
            worst = usd
        return worst

    def _cost_of(self, failure: _Failure | None, value: Any) -> float | None:
        """What one attempt really cost: its usage at the model's price, 0 for an error
        reply (not billed), None when unknown (no reply, no usage, a malformed body)."""
        if failure is not None:
            return 0.0 if failure.kind == "status" else None
        usage = value[1] if isinstance(value, tuple) else usage_of(value.usage)
        if usage is None or usage.problem is not None:
            return None
        assert self._prices is not None
        return self._prices.cost(usage.input_tokens, usage.output_tokens, usage.cached_tokens)[0]

    async def _attempt(
        self,
        governor: RateGovernor,
        permit: Permit,
        request: HTTPRequest,
        read: _Reader[_T],
        timeout: float,
    ) -> tuple[_Failure | None, _T | None]:
        """One HTTP attempt under ``permit``; the permit is settled whatever happens."""
        used: int | None = None
        try:
            try:
                response = await self._transport.send(request, timeout=timeout)
            except TransportError as exc:
                # A transport quotes what it could not parse (a status line, a header),
                # which may be our own Authorization header echoed back.
                detail = self._redact(exc.detail)
                if exc.kind == "timeout" and exc.response_started:
                    return _Failure("body_timeout", detail), None
                return _Failure("transport", detail), None
            governor.observe(response.headers)
            if not 200 <= response.status < 300:
                refused = self._status_failure(response)
                refused.response = response
                return refused, None
            failure, value, used = read(response)
            if failure is not None:
                failure.response = response
            return failure, value
        finally:
            governor.release(permit, used)

    def _read_chat(
        self, response: HTTPResponse
    ) -> tuple[_Failure | None, ChatResponse | None, int | None]:
        """A 200 chat completion decoded, or a malformed-body failure."""
        try:
            decoded = response_decoder.decode(response.body)
            if not decoded.choices:
                raise msgspec.ValidationError("`choices` is empty")
        except msgspec.DecodeError as exc:
            # A proxy or error page may echo the request's headers: redact the key
            # (before shortening: a cut could split it, and again after quoting).
            text = self._redact(response.body.decode("utf-8", "replace"))
            message = f"malformed response body ({exc}): {_short(text, 120)!r}"
            return _Failure("malformed", self._redact(message), status=200), None, None
        return None, decoded, _used(usage_of(decoded.usage))

    def _status_failure(self, response: HTTPResponse) -> _Failure:
        status = response.status
        message, code = _error_detail(response.body, self._redact)
        if status == 429 and code == "insufficient_quota":
            return _Failure(
                "status",
                f"{message} (insufficient_quota: add credit or raise the quota; not retried)",
                status=status,
                code=code,
                retryable=False,
            )
        if status == 429 and "request too large" in message.lower():
            # OpenAI's answer to a request above the whole per-minute budget: no wait helps.
            return _Failure(
                "status",
                f"{message} (larger than the whole token budget: shorten it; not retried)",
                status=status,
                code=code,
                retryable=False,
            )
        retryable = status not in NEVER_RETRY and is_retryable_status(status)
        wait = server_wait(response.headers) if retryable else None
        return _Failure("status", message, status=status, code=code, retryable=retryable, wait=wait)

    def _give_up(self, failure: _Failure, state: _CallState) -> LLMError:
        cfg = self._config
        if failure.retryable:
            why = f" (gave up after {state.attempts} attempts; max_retries={cfg.max_retries})"
        else:
            why = ""
        where = f"model {cfg.model!r} at {cfg.base_url}"
        return LLMError(
            self._redact(f"{where}: {failure.message}{why}"),
            status=failure.status,
            model=cfg.model,
            code=failure.code,
            attempts=state.attempts,
            retries=state.retries,
            rate_limited=state.rate_limited,
        )

    def _completion(self, response: ChatResponse, state: _CallState) -> Completion:
        choice = response.choices[0]
        usage = usage_of(response.usage)
        prices = self._prices
        assert prices is not None
        cost: float | None
        note: str | None
        if usage is None:
            usage = CallUsage()
            cost, note = None, "the server reported no usage, so the cost is unmeasured"
        elif usage.problem is not None:
            cost, note = None, usage.problem
        else:
            cost, note = prices.cost(usage.input_tokens, usage.output_tokens, usage.cached_tokens)
        wall = time.perf_counter() - state.started
        return Completion(
            # A server may echo the key in a normal reply too: it never leaves the client.
            text=self._redact.secrets(choice.message.content or ""),
            model=response.model or self._config.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            cost_usd=cost,
            cost_note=note,
            queued_ms=state.queued_s * 1000.0,
            latency_ms=max(0.0, wall - state.queued_s) * 1000.0,
            retries=state.retries,
            rate_limited=state.rate_limited,
            finish_reason=choice.finish_reason,
        )

    def _forwarded(
        self,
        prepared: ForwardRequest,
        response: HTTPResponse,
        usage: CallUsage | None,
        state: _CallState,
        *,
        failed: bool,
        redact: Redactor,
    ) -> Forwarded:
        """The reply handed back to the caller, with what it cost."""
        wall = time.perf_counter() - state.started
        body = response.body
        cost: float | None
        note: str | None
        if failed:
            # Some providers echo the key in an error: never hand it on.
            text = body.decode("utf-8", "replace")
            if redact.finds(text):
                body = redact(text).encode()
            cost, note = 0.0, f"HTTP {response.status}: an error reply is not billed"
        else:
            body = _without_keys(body, redact)
            if usage is not None:
                body = prepared.reply_body(body)
            if usage is None:
                cost, note = None, "the server reported no usage, so the cost is unmeasured"
            elif usage.problem is not None:
                cost, note = None, usage.problem
            else:
                assert self._prices is not None
                cost, note = self._prices.cost(
                    usage.input_tokens, usage.output_tokens, usage.cached_tokens
                )
        tokens = usage or CallUsage()
        return Forwarded(
            status=response.status,
            headers=reply_headers(response.headers, final_failure=failed),
            body=body,
            model=prepared.model,
            usage_reported=usage is not None and usage.problem is None,
            input_tokens=tokens.input_tokens,
            output_tokens=tokens.output_tokens,
            cached_tokens=tokens.cached_tokens,
            reasoning_tokens=tokens.reasoning_tokens,
            cost_usd=cost,
            cost_note=note,
            queued_ms=state.queued_s * 1000.0,
            latency_ms=max(0.0, wall - state.queued_s) * 1000.0,
            attempts=state.attempts,
            retries=state.retries,
            rate_limited=state.rate_limited,
        )


def _read_forwarded(
    response: HTTPResponse,
) -> tuple[_Failure | None, tuple[HTTPResponse, CallUsage | None], int | None]:
    """Any 2xx reply is the caller's to read; its usage, when it reports one, settles
    the reservation."""
    usage = read_usage(response.body, event_stream=is_event_stream(response.headers))
    return None, (response, usage), _used(usage)


@functools.lru_cache(maxsize=64)
def _redactor(*keys: str | None) -> Redactor:
    """The redactor of a forwarded call's keys (the SDK's and the client's), built once
    per pair: a call reuses its client's keys, and building one compiles its patterns."""
    return Redactor(keys)


def _without_keys(body: bytes, redact: Redactor) -> bytes:
    """A successful reply's body without the keys the request carried (a server may
    echo them in a normal reply as well as in an error)."""
    if not redact.keys:  # a call without a key: nothing to look for
        return body
    text = body.decode("utf-8", "replace")
    clean = redact.secrets(text)
    return body if clean is text else clean.encode()


def _output_cap(options: Mapping[str, Any]) -> int | None:
    """The output cap a call's options set (``max_completion_tokens`` or ``max_tokens``)."""
    limit = options.get("max_completion_tokens") or options.get("max_tokens")
    return int(limit) if limit else None


def _used(usage: CallUsage | None) -> int | None:
    """The tokens a reply settles its reservation with; None (refunded) when it reported
    none, or none that can be true."""
    if usage is None or usage.problem is not None:
        return None
    return usage.total_tokens


class _CallState:
    """What one call has been through so far (read by the deadline handler)."""

    __slots__ = (
        "attempts",
        "cap",
        "last_message",
        "last_status",
        "queued_s",
        "rate_limited",
        "retries",
        "spend",
        "started",
    )

    def __init__(self) -> None:
        self.started = time.perf_counter()
        share = current_share()
        #: The spending ledger of the call (``_spend.py``), and its output cap.
        self.spend: Spend | None = None if share is None else share.spend
        self.cap: int | None = None
        self.attempts = 0
        self.retries = 0
        self.rate_limited = 0
        self.queued_s = 0.0
        self.last_status: int | None = None
        self.last_message = ""
