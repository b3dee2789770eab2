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

One reader serves all three, and both of the client's paths (a forwarded call's reply,
and ``complete()``'s chat completion through :func:`usage_of`): take the last usage
object seen (a ``message_delta``'s is merged into the one before it), then map its
fields, each checked: a count that cannot be true makes the call's cost unmeasured
(``CallUsage.problem``), never a negative or absurd cost, never a clamped $0. Nothing
here is exact about the request's size: :func:`estimate_request` is the governor's
reservation, settled from the usage when the reply comes.

:class:`TokenUsage` is the one definition of a call's token counts: every struct that
carries them (``CallUsage`` here, ``Completion``, ``Forwarded``, the engine's
``Observation`` and ``Usage``) is one, adding its own fields (cost, model, time...) after
them, so their names, and the JSON and results-file fields built from them, are the same
everywhere. This module imports nothing of the client's heavy side: the engine's call
layer (and so every worker process) imports it without loading the model client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ._wire import estimate_tokens, responses_messages

__all__ = [
    "MAX_TOKENS",
    "CallUsage",
    "TokenUsage",
    "estimate_request",
    "read_usage",
    "strip_usage_chunks",
    "usage_of",
]

#: Completion tokens reserved when the request does not cap its output.
DEFAULT_OUTPUT_RESERVE = 256

_decode = msgspec.json.decode
_EVENT_END = re.compile(rb"\r?\n\r?\n")


#: More tokens than this in one call cannot be true (the largest context windows hold a
#: few million): a count above it is a server's fault, not a bill.
MAX_TOKENS = 10**9


class TokenUsage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The tokens of one model call, or of several summed (``+``).

    ``cached_tokens`` are part of ``input_tokens`` and ``reasoning_tokens`` part of
    ``output_tokens``, whichever API the counts came from (see the module docstring for
    how each one's usage maps here). Frozen and not tracked by the garbage collector:
    it is built for every call, and every observation and result is one.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input and output tokens together (what a tokens-per-minute budget counts)."""
        return self.input_tokens + self.output_tokens

    @property
    def tokens(self) -> TokenUsage:
        """The token counts alone, as a plain :class:`TokenUsage` (of a struct that adds
        cost or time to them, the counts without the rest)."""
        if type(self) is TokenUsage:
            return self
        return TokenUsage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
        )

    def __add__(self, other: TokenUsage) -> TokenUsage:
        """The counts of both, as a plain :class:`TokenUsage`."""
        try:  # not isinstance(): on a struct type it costs as much as the sum
            return TokenUsage(
                input_tokens=self.input_tokens + other.input_tokens,
                output_tokens=self.output_tokens + other.output_tokens,
                cached_tokens=self.cached_tokens + other.cached_tokens,
                reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            )
        except AttributeError:
            return NotImplemented


#: No tokens (a call that used none, or an unknown usage's counts).
NO_TOKENS = TokenUsage()


class CallUsage(TokenUsage, frozen=True, kw_only=True, gc=False):
    """The tokens one reply reports, read and checked.

    ``problem`` is set when the reply's usage cannot be true (a count that is negative,
    above :data:`MAX_TOKENS`, or not a JSON integer: a float, a string, a boolean, null;
    more cached tokens than input tokens): the counts are then 0 and the call's cost is
    *unmeasured* with ``problem`` as the reason, never a negative or absurd bill, and
    never a clamped $0.
    """

    problem: str | None = None


def _kind(value: Any) -> str:
    """What a count that cannot be true is, without echoing a string (it may be anything
    a server sent, a key included)."""
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if value is None:
        return "null"
    if isinstance(value, int):
        return f"{value}, negative" if value < 0 else f"{value}, more than {MAX_TOKENS:,}"
    if isinstance(value, float):
        return f"{value!r}, not a whole number" if value == value else "NaN"
    kinds = {str: "a string", list: "a list", dict: "an object"}
    return next((k for t, k in kinds.items() if isinstance(value, t)), type(value).__name__)


class _Reader:
    """The counts of one usage object, and what in it cannot be true."""

    __slots__ = ("problems",)

    def __init__(self) -> None:
        self.problems: list[str] = []

    def count(self, table: Any, name: str, *, where: str = "", optional: bool = False) -> int:
        """``table[name]`` when it is a count that can be true; else 0, and the problem
        noted. Absent is 0 (an embedding has no completion tokens); null is 0 only for
        the ``optional`` parts (cached and reasoning tokens, which servers send as null)."""
        if not isinstance(table, Mapping) or name not in table:
            return 0
        value = table[name]
        if type(value) is int and 0 <= value <= MAX_TOKENS:
            return value
        if value is None and optional:
            return 0
        self.problems.append(f"{where}{name} is {_kind(value)}")
        return 0

    def detail(self, usage: Mapping[str, Any], name: str, field: str) -> int:
        return self.count(usage.get(name), field, where=f"{name}.", optional=True)

    def usage(self, counts: CallUsage) -> CallUsage:
        problems = self.problems
        if counts.cached_tokens > counts.input_tokens:
            problems.append(
                f"{counts.cached_tokens} cached tokens of {counts.input_tokens} input tokens"
            )
        if not problems:
            return counts
        why = (
            f"the server reported usage that cannot be true ({'; '.join(problems)}), so "
            "the cost is unmeasured"
        )
        return CallUsage(problem=why)


def _as_usage(usage: Mapping[str, Any]) -> CallUsage | None:
    read = _Reader()
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return read.usage(
            CallUsage(
                input_tokens=read.count(usage, "prompt_tokens"),
                output_tokens=read.count(usage, "completion_tokens"),
                cached_tokens=read.detail(usage, "prompt_tokens_details", "cached_tokens"),
                reasoning_tokens=read.detail(
                    usage, "completion_tokens_details", "reasoning_tokens"
                ),
            )
        )
    if "input_tokens" in usage or "output_tokens" in usage:
        cache_read = read.count(usage, "cache_read_input_tokens", optional=True)
        cache_write = read.count(usage, "cache_creation_input_tokens", optional=True)
        cached = cache_read or read.detail(usage, "input_tokens_details", "cached_tokens")
        return read.usage(
            CallUsage(
                input_tokens=read.count(usage, "input_tokens") + cache_read + cache_write,
                output_tokens=read.count(usage, "output_tokens"),
                cached_tokens=cached,
                reasoning_tokens=read.detail(usage, "output_tokens_details", "reasoning_tokens"),
            )
        )
    return None


def usage_of(usage: Any) -> CallUsage | None:
    """The tokens of a decoded ``usage`` object (any of the three shapes), checked; None
    when there is none (absent, null, not an object, or with no counts)."""
    return _as_usage(usage) if isinstance(usage, Mapping) else None


def _usage_object(event: Any) -> Mapping[str, Any] | None:
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
            return usage_of(_usage_object(_decode(body)))
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
        usage = _usage_object(event)
        if usage is None:
            continue
        if merged is not None and event.get("type") == "message_delta":
            merged.update((k, v) for k, v in usage.items() if v is not None)
        else:
            merged = dict(usage)
    return usage_of(merged)


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
