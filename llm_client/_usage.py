"""Usage read from a provider's reply as it came, and a request's size guessed before it goes.

A forwarded call (``ModelClient.forward``) carries someone else's request: an SDK's chat
completion, Responses API call or Anthropic message, plain or streamed. Its cost is read
from the reply the provider wrote, in whichever of these shapes it is:

* chat completions: ``usage.prompt_tokens``/``completion_tokens``, cached tokens in
  ``prompt_tokens_details``, reasoning tokens in ``completion_tokens_details``; streamed,
  the last chunk that carries a ``usage`` (OpenAI sends it when
  ``stream_options.include_usage`` is on, which the forwarder makes sure of);
* the Responses API: ``usage.input_tokens``/``output_tokens`` (cached ones included in
  the input, as ``input_tokens_details.cached_tokens``); streamed, the ``response`` of
  ``response.completed`` (or ``.incomplete``/``.failed``);
* Anthropic messages: ``usage.input_tokens`` *plus* ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` (Anthropic counts them apart); streamed, the usage of
  ``message_start`` updated by each ``message_delta`` (whose ``output_tokens`` is the
  running total).

One reader serves all three: take the last usage object seen (a ``message_delta``'s is
merged into the one before it), then map its fields. Nothing here is exact about the
request's size: :func:`estimate_request` is the governor's reservation, settled from the
usage when the reply comes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec

from ._wire import estimate_tokens, responses_messages

__all__ = ["CallUsage", "estimate_request", "read_usage", "strip_usage_chunks"]

#: Completion tokens reserved when the request does not cap its output.
DEFAULT_OUTPUT_RESERVE = 256

_decode = msgspec.json.decode
_EVENT_END = re.compile(rb"\r?\n\r?\n")


class CallUsage(NamedTuple):
    """Tokens of one call, in the client's terms: cached and reasoning tokens are parts of
    ``input_tokens`` and ``output_tokens``, as :class:`~llm_client.Completion` counts them."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    reasoning_tokens: int


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def _detail(usage: Mapping[str, Any], name: str, field: str) -> int:
    details = usage.get(name)
    return _int(details.get(field)) if isinstance(details, Mapping) else 0


def _as_usage(usage: Mapping[str, Any]) -> CallUsage | None:
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return CallUsage(
            _int(usage.get("prompt_tokens")),
            _int(usage.get("completion_tokens")),
            _detail(usage, "prompt_tokens_details", "cached_tokens"),
            _detail(usage, "completion_tokens_details", "reasoning_tokens"),
        )
    if "input_tokens" in usage or "output_tokens" in usage:
        cache_read = _int(usage.get("cache_read_input_tokens"))
        cache_write = _int(usage.get("cache_creation_input_tokens"))
        cached = cache_read or _detail(usage, "input_tokens_details", "cached_tokens")
        return CallUsage(
            _int(usage.get("input_tokens")) + cache_read + cache_write,
            _int(usage.get("output_tokens")),
            cached,
            _detail(usage, "output_tokens_details", "reasoning_tokens"),
        )
    return None


def _usage_of(event: Any) -> Mapping[str, Any] | None:
    """The usage object of one JSON body or stream event, wherever the API puts it."""
    if not isinstance(event, Mapping):
        return None
    usage = event.get("usage")
    if isinstance(usage, Mapping):
        return usage
    for inner in ("response", "message"):  # Responses events, Anthropic's message_start
        nested = event.get(inner)
        if isinstance(nested, Mapping) and isinstance(nested.get("usage"), Mapping):
            found: Mapping[str, Any] = nested["usage"]
            return found
    return None


def read_usage(body: bytes, *, event_stream: bool) -> CallUsage | None:
    """The usage a reply reports, or None when it reports none (or is not JSON)."""
    if not event_stream:
        try:
            return _usage_from(_usage_of(_decode(body)))
        except msgspec.DecodeError:
            return None
    merged: dict[str, Any] | None = None
    for line in body.splitlines():
        if not line.startswith(b"data:") or b'"usage"' not in line:
            continue
        try:
            event = _decode(line[5:])
        except msgspec.DecodeError:
            continue
        usage = _usage_of(event)
        if usage is None:
            continue
        if merged is not None and event.get("type") == "message_delta":
            merged.update((k, v) for k, v in usage.items() if v is not None)
        else:
            merged = dict(usage)
    return _usage_from(merged)


def _usage_from(usage: Mapping[str, Any] | None) -> CallUsage | None:
    return None if usage is None else _as_usage(usage)


def estimate_request(payload: Mapping[str, Any]) -> int:
    """Tokens to reserve for a request body of any of the three APIs: its prompt, by the
    client's usual estimate, plus its output cap (or ``DEFAULT_OUTPUT_RESERVE``)."""
    messages: list[Any] = []
    chat = payload.get("messages")
    if isinstance(chat, list):
        messages.extend(m for m in chat if isinstance(m, Mapping))
    system = payload.get("system")  # Anthropic's system prompt: a string or text blocks
    if system:
        messages.append({"role": "system", "content": system})
    if "input" in payload or "instructions" in payload:
        messages.extend(responses_messages(payload.get("input"), payload.get("instructions")))
    prompt = estimate_tokens(messages) if messages else 3
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        cap = payload.get(name)
        if type(cap) is int and cap > 0:
            return prompt + cap
    return prompt + DEFAULT_OUTPUT_RESERVE


def strip_usage_chunks(body: bytes) -> bytes:
    """A chat completion stream without its usage-only chunks (no choices, a usage).

    The forwarder turns ``include_usage`` on to meter a stream whose caller did not ask
    for it; that caller must not meet a chunk with no choices it never asked for.
    """
    kept = []
    for event in _EVENT_END.split(body):
        if b'"usage"' in event and event.startswith(b"data:"):
            try:
                chunk = _decode(event[5:])
            except msgspec.DecodeError:
                chunk = None
            if isinstance(chunk, Mapping) and chunk.get("choices") == [] and chunk.get("usage"):
                continue
        if event:
            kept.append(event + b"\n\n")
    return b"".join(kept)
