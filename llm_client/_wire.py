"""The wire format of OpenAI-compatible chat completions, as msgspec Structs.

Encoders and decoders are built once at import (they hold no loop state). Unknown response
fields are ignored, so vLLM, llama.cpp and Ollama extras decode as well as OpenAI's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "ErrorBody",
    "estimate_tokens",
    "message_text",
    "responses_messages",
]


class ChatRequest(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A request body; unset options are omitted so servers apply their own defaults."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    user: str | None = None


#: Options ``ModelClient.complete`` accepts (plus ``extra_body``, merged into the JSON).
REQUEST_OPTIONS = frozenset(ChatRequest.__struct_fields__) - {"model", "messages"}


class ResponseMessage(msgspec.Struct):
    content: str | None = None
    role: str = "assistant"
    reasoning_content: str | None = None


class Choice(msgspec.Struct):
    message: ResponseMessage
    index: int = 0
    finish_reason: str | None = None


class ChatResponse(msgspec.Struct):
    choices: list[Choice]
    id: str = ""
    model: str = ""
    #: As sent: read and checked by ``_usage.usage_of`` (one reader for every reply
    #: shape), so a count that cannot be true makes the cost unmeasured rather than the
    #: whole reply malformed.
    usage: Any = None


class ErrorDetail(msgspec.Struct):
    message: str = ""
    type: str | None = None
    code: str | int | None = None


class ErrorBody(msgspec.Struct):
    error: ErrorDetail | str | None = None


request_encoder = msgspec.json.Encoder()
response_decoder = msgspec.json.Decoder(ChatResponse)
error_decoder = msgspec.json.Decoder(ErrorBody)


def message_text(content: Any) -> str:
    """The text of a message's ``content`` (a string or a list of typed parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Prompt tokens, estimated without a tokenizer: about 4 characters a token.

    Each message adds 4 tokens of framing and the reply 3 of priming, as OpenAI counts
    them; the simulator reports usage by the same rule, so against it the estimate is exact
    and against a real model it is close enough for a reservation that is settled later.
    """
    total = 3
    for message in messages:
        text = message_text(message.get("content"))
        total += 4 + (len(text) + 3) // 4
    return total


def responses_messages(input: Any, instructions: Any = None) -> list[dict[str, Any]]:
    """A Responses API request's ``instructions`` and ``input`` as chat messages.

    ``input`` is a string (one user message) or a list of items: messages with a
    ``role`` and a string or a list of typed parts, and other items (tool outputs)
    whose ``output`` counts as text. The simulator answers from these messages and the
    client estimates their tokens by the same rule, so the two agree.
    """
    messages: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(input, str):
        messages.append({"role": "user", "content": input})
    elif isinstance(input, Sequence):
        for item in input:
            if not isinstance(item, Mapping):
                continue
            content = item.get("content", item.get("output", ""))
            role = item.get("role")
            messages.append({"role": role if isinstance(role, str) else "user", "content": content})
    return messages
