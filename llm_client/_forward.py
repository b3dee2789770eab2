"""A call forwarded as it came: someone else's request, governed and metered on its way.

``ModelClient.complete`` builds its own chat request. A program that brings its own SDK
(the openai client, litellm, dspy.LM, anthropic) has built its request already, in the
shape its SDK expects the reply in; ``ModelClient.forward`` sends that request through the
same governor, retries and pricing, and hands the provider's reply back unchanged but for:

* hop-by-hop headers (``Host``, ``Content-Length``, ``Connection``, ``Accept-Encoding``...)
  are dropped from the request and set by the transport; ``Content-Encoding`` and
  ``Content-Length`` are dropped from the reply, whose body the transport has decoded;
* a streamed chat completion is asked for its usage (``stream_options.include_usage``), and
  the usage chunk is taken out again when its caller had not asked for it;
* a reply the client gave up on (a status no retry fixes, or retries spent) carries
  ``x-should-retry: false``, so that an SDK honouring it (openai, anthropic) does not
  multiply the retries the client already made;
* a failed reply's body is scrubbed of the request's API key, which some providers echo.

A stream is read whole before it is handed back: the caller sees every event, in order,
but only once the provider has finished (the time to the first token is not kept). For an
evaluation, which waits for the whole reply anyway, that costs nothing; the per-event
latency of a stream is not what is measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ._usage import TokenUsage, estimate_request, strip_usage_chunks

__all__ = ["ForwardRequest", "Forwarded", "is_event_stream", "reply_headers"]

#: Request headers the transport sets itself (or must not pass on).
_REQUEST_DROP = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "upgrade",
        "expect",
        # The transport decodes gzip and deflate only; it asks for those itself.
        "accept-encoding",
    }
)
#: Reply headers that described the body as it travelled, not as it is handed back.
_RESPONSE_DROP = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}
)
_encode = msgspec.json.encode


class Forwarded(TokenUsage, frozen=True, kw_only=True, gc=True):
    """The provider's reply to a forwarded request, and what the call cost.

    ``status``, ``headers`` and ``body`` are the reply as the caller's SDK should read it.
    Tokens are those the reply reported (``usage_reported``); ``cost_usd`` is None with
    ``cost_note`` when a successful reply reported no usage or the price is unknown, and 0
    for a failed reply (an error is not billed). ``queued_ms`` is the time spent in the
    governor, ``latency_ms`` the rest; ``retries`` and ``rate_limited`` count the client's
    own retries and 429s for this call.
    """

    status: int
    headers: dict[str, str]
    body: bytes
    model: str
    usage_reported: bool = False
    cost_usd: float | None = None
    cost_note: str | None = None
    queued_ms: float = 0.0
    latency_ms: float = 0.0
    attempts: int = 1
    retries: int = 0
    rate_limited: int = 0

    @property
    def ok(self) -> bool:
        """A 2xx reply: a completion the provider bills."""
        return 200 <= self.status < 300


def _api_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries (Bearer token or Anthropic's ``x-api-key``)."""
    for name, value in headers.items():
        lower = name.lower()
        if lower == "authorization" and value[:7].lower() == "bearer ":
            return value[7:].strip() or None
        if lower in ("x-api-key", "api-key"):
            return value.strip() or None
    return None


#: The request fields that cap a reply's output tokens, in the order they win.
_CAPS = ("max_completion_tokens", "max_output_tokens", "max_tokens")


class ForwardRequest:
    """A request made ready to forward: its headers, body, kind and token reservation."""

    __slots__ = (
        "api_key",
        "body",
        "forced_usage",
        "headers",
        "kind",
        "model",
        "output_cap",
        "reserve",
        "stream",
    )

    def __init__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes, model: str
    ) -> None:
        self.headers = {k: v for k, v in headers.items() if k.lower() not in _REQUEST_DROP}
        self.api_key = _api_key(self.headers)
        path = url.split("?", 1)[0].rstrip("/")
        self.kind = (
            "chat"
            if path.endswith("/chat/completions")
            else "responses"
            if path.endswith("/responses")
            else "messages"
            if path.endswith("/messages")
            else "other"
        )
        self.model = model
        self.stream = False
        self.forced_usage = False
        self.body = body
        payload = self._payload(method, body)
        self.reserve = estimate_request(payload) if payload is not None else 0
        #: The reply's output cap the request sets (None: none), for a spending limit.
        self.output_cap: int | None = None
        if payload is None:
            return
        for name in _CAPS:
            cap = payload.get(name)
            if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
                self.output_cap = cap
                break
        if isinstance(payload.get("model"), str):
            self.model = payload["model"]
        self.stream = payload.get("stream") is True
        if self.kind == "chat" and self.stream:
            options = payload.get("stream_options")
            options = dict(options) if isinstance(options, Mapping) else {}
            if options.get("include_usage") is not True:
                options["include_usage"] = True
                payload["stream_options"] = options
                self.body = _encode(payload)
                self.forced_usage = True

    @staticmethod
    def _payload(method: str, body: bytes) -> dict[str, Any] | None:
        if method.upper() != "POST" or not body:
            return None
        try:
            payload = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return None
        return payload if isinstance(payload, dict) else None

    def cap_output(self, cap: int) -> int | None:
        """Set the request's output cap to ``cap`` (it had none); the cap now in force, or
        None when the body is not one this knows how to cap."""
        payload = self._payload("POST", self.body)
        if payload is None or self.kind == "other":
            return None
        payload["max_output_tokens" if self.kind == "responses" else "max_tokens"] = cap
        self.body = _encode(payload)
        self.output_cap = cap
        return cap

    def reply_body(self, body: bytes) -> bytes:
        """The reply's body as the caller should read it."""
        return strip_usage_chunks(body) if self.forced_usage else body


def reply_headers(headers: Mapping[str, str], *, final_failure: bool) -> dict[str, str]:
    """The reply's headers as handed back (names in lower case)."""
    kept = {k.lower(): v for k, v in headers.items() if k.lower() not in _RESPONSE_DROP}
    if final_failure:
        kept["x-should-retry"] = "false"
    return kept


def is_event_stream(headers: Mapping[str, str]) -> bool:
    content_type = headers.get("content-type") or headers.get("Content-Type") or ""
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"
