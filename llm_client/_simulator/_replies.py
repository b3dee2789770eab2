"""What the simulator answers: deterministic replies and verdicts, usage, and the bodies.

Replies depend only on the request (and the model's noise), never on timing or order, so
that a judge metric gives the same verdicts every run and in every process: a stable hash
(blake2b), not Python's salted ``hash``, decides what is not written in the prompt. The
one exception is asked for: a model's ``flip_rate`` flips a verdict by a draw the caller
makes from the simulator's seeded generator.

The same reply goes out in four shapes: a chat completion, a chat completion streamed as
server-sent events (with the final usage chunk when ``stream_options.include_usage`` asks
for it), a Responses API object, and a Responses API event stream ending in
``response.completed``. A stream is written whole, in one reply: what a client reads from
it is the same, only the time to the first token is not simulated.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from .._wire import estimate_tokens, message_text, responses_messages
from ._config import ModelSettings

__all__ = [
    "MALFORMED",
    "ChatBody",
    "Reply",
    "ResponsesBody",
    "SystemPromptCache",
    "chat_decoder",
    "chunk_stream",
    "completion_body",
    "compose",
    "error_body",
    "judge_verdict",
    "reply_text",
    "responses_body",
    "responses_decoder",
    "responses_stream",
]

#: A reply cut in the middle of a string: what a proxy that drops the connection leaves.
MALFORMED = b'{"id": "chatcmpl-sim", "choices": [{"message": {"content": "PA'

_ANSWER = re.compile(r"^\s*answer\s*:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_EXPECTED = re.compile(r"^\s*expected\s*:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_JUDGE = re.compile(r"pass\s+or\s+fail", re.IGNORECASE)
_encoder = msgspec.json.Encoder()


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ChatBody(msgspec.Struct):
    """The part of a chat completion request the simulator reads (a Responses API request
    is read into one too, by :meth:`ResponsesBody.as_chat`)."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    sim_latency_ms: float | None = None  # a test scripting one slow call


class ResponsesBody(msgspec.Struct):
    """The part of a Responses API request (``POST /v1/responses``) the simulator reads."""

    model: str
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: int | None = None
    stream: bool = False
    sim_latency_ms: float | None = None

    def as_chat(self) -> ChatBody:
        return ChatBody(
            model=self.model,
            messages=responses_messages(self.input, self.instructions),
            max_tokens=self.max_output_tokens,
            stream=self.stream,
            sim_latency_ms=self.sim_latency_ms,
        )


chat_decoder = msgspec.json.Decoder(ChatBody)
responses_decoder = msgspec.json.Decoder(ResponsesBody)


def _fraction(*parts: str) -> float:
    """A stable hash of ``parts`` mapped to [0, 1) (the same in every process and run)."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def judge_verdict(
    user: str, model: str, *, pass_rate: float, noise: float, flip: bool = False
) -> bool:
    """The simulator's verdict for a judge prompt (True: PASS).

    If ``user`` has a line ``Answer: X`` and a line ``Expected: Y``, PASS iff X and Y match
    after strip, ignoring case; otherwise PASS iff a stable hash of ``user`` falls under
    ``pass_rate``. The model then flips the verdict with probability ``noise``, decided by
    a stable hash of (model, user), so a noisy model is wrong on the same examples every run;
    ``flip`` (the caller's draw under the model's ``flip_rate``) flips it once more.
    """
    answer = _ANSWER.search(user)
    expected = _EXPECTED.search(user)
    if answer is not None and expected is not None:
        verdict = answer.group(1).strip().lower() == expected.group(1).strip().lower()
    else:
        verdict = _fraction("verdict", user) < pass_rate
    if noise > 0 and _fraction("noise", model, user) < noise:
        verdict = not verdict
    return verdict != flip


def reply_text(
    messages: list[dict[str, Any]],
    model: str,
    *,
    pass_rate: float,
    noise: float,
    flip: bool = False,
) -> str:
    """The deterministic reply to ``messages`` (before any max_tokens cut).

    A judge prompt (any message says "PASS or FAIL") gets ``"PASS. ..."`` or
    ``"FAIL. ..."``; any other prompt ``"Echo: "`` and the last user message with
    whitespace collapsed, cut to 200 characters.
    """
    user = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            user = message_text(message.get("content"))
            break
    if any(_JUDGE.search(message_text(m.get("content"))) for m in messages):
        if judge_verdict(user, model, pass_rate=pass_rate, noise=noise, flip=flip):
            return "PASS. The answer agrees with what was expected."
        return "FAIL. The answer does not agree with what was expected."
    return "Echo: " + " ".join(user.split())[:200]


class Reply:
    """The answer to one well-formed request, before limits, faults and latency."""

    __slots__ = ("completion_tokens", "finish", "prompt_tokens", "reasoning_tokens", "text")

    def __init__(
        self,
        text: str,
        finish: str,
        prompt_tokens: int,
        completion_tokens: int,
        reasoning_tokens: int,
    ) -> None:
        self.text = text
        self.finish = finish
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.reasoning_tokens = reasoning_tokens

    @property
    def tokens(self) -> int:
        """What the request costs against a token budget."""
        return self.prompt_tokens + self.completion_tokens


def compose(
    body: ChatBody, settings: ModelSettings, *, pass_rate: float, flip: bool = False
) -> Reply:
    """The reply and its usage: about 4 characters a token, cut at ``max_tokens * 4``.

    ``flip``: the caller drew a verdict flip under the model's ``flip_rate``.
    """
    limit_out = body.max_completion_tokens or body.max_tokens
    text = reply_text(
        body.messages, body.model, pass_rate=pass_rate, noise=settings.noise, flip=flip
    )
    finish = "stop"
    if limit_out is not None and len(text) > limit_out * 4:
        text, finish = text[: limit_out * 4], "length"
    prompt_tokens = estimate_tokens(body.messages)
    completion_tokens = (len(text) + 3) // 4 + settings.reasoning_tokens
    return Reply(text, finish, prompt_tokens, completion_tokens, settings.reasoning_tokens)


class SystemPromptCache:
    """System prompts seen before, reported back as cached prompt tokens (as OpenAI does)."""

    def __init__(self, *, enabled: bool, capacity: int = 100_000) -> None:
        self._enabled = enabled
        self._capacity = capacity
        self._seen: set[str] = set()

    def cached_tokens(self, messages: list[dict[str, Any]]) -> int:
        """The cached part of this prompt: its system message, if one like it came before."""
        first = messages[0]
        if not self._enabled or first.get("role") != "system":
            return 0
        system = message_text(first.get("content"))
        digest = hashlib.blake2b(system.encode(), digest_size=16).hexdigest()
        if digest in self._seen:
            return 4 + (len(system) + 3) // 4
        if len(self._seen) < self._capacity:
            self._seen.add(digest)
        return 0


def _chat_usage(reply: Reply, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
    }


def completion_body(model: str, reply: Reply, *, number: int, cached: int) -> bytes:
    """A ``chat.completion`` body with its ``usage``."""
    usage = _chat_usage(reply, cached)
    data = {
        "id": f"chatcmpl-sim-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": reply.finish,
            }
        ],
        "usage": usage,
    }
    return _encoder.encode(data)


_PIECE = re.compile(r"\S+\s*")


def _pieces(text: str, words: int = 3) -> list[str]:
    """The reply cut into deltas of a few words each, as a model streams it."""
    found = _PIECE.findall(text)
    lead = text[: len(text) - len(text.lstrip())]
    pieces = ["".join(found[i : i + words]) for i in range(0, len(found), words)]
    if lead:
        pieces.insert(0, lead)
    return pieces or [""]


def _event(data: Any, event: str | None = None) -> bytes:
    head = b"event: %b\n" % event.encode() if event else b""
    return b"%bdata: %b\n\n" % (head, _encoder.encode(data))


def chunk_stream(
    model: str, reply: Reply, *, number: int, cached: int, include_usage: bool
) -> bytes:
    """A chat completion as ``chat.completion.chunk`` events, ending in ``data: [DONE]``.

    With ``include_usage`` every chunk carries ``"usage": null`` and a last chunk with no
    choices carries the usage, as OpenAI sends it.
    """
    base = {
        "id": f"chatcmpl-sim-{number}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
    }
    deltas: list[tuple[dict[str, Any], str | None]] = [({"role": "assistant", "content": ""}, None)]
    deltas += [({"content": piece}, None) for piece in _pieces(reply.text)]
    deltas.append(({}, reply.finish))
    events = []
    for delta, finish in deltas:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if include_usage:
            chunk["usage"] = None
        events.append(_event(chunk))
    if include_usage:
        events.append(_event({**base, "choices": [], "usage": _chat_usage(reply, cached)}))
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


def _response_object(
    model: str, reply: Reply, *, number: int, cached: int, done: bool
) -> dict[str, Any]:
    """A Responses API ``response`` object: complete, or as it starts (no output yet)."""
    message = {
        "type": "message",
        "id": f"msg_sim_{number}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
    }
    usage = {
        "input_tokens": reply.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": reply.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }
    incomplete = reply.finish == "length"
    status = ("incomplete" if incomplete else "completed") if done else "in_progress"
    return {
        "id": f"resp_sim_{number}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": model,
        "output": [message] if done else [],
        "incomplete_details": {"reason": "max_output_tokens"} if done and incomplete else None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage if done else None,
    }


def responses_body(model: str, reply: Reply, *, number: int, cached: int) -> bytes:
    """A Responses API ``response`` object with its ``usage``."""
    return _encoder.encode(_response_object(model, reply, number=number, cached=cached, done=True))


def responses_stream(model: str, reply: Reply, *, number: int, cached: int) -> bytes:
    """A Responses API event stream: created, the text deltas, ``response.completed``."""
    start = _response_object(model, reply, number=number, cached=cached, done=False)
    final = _response_object(model, reply, number=number, cached=cached, done=True)
    item_id = f"msg_sim_{number}"
    empty_item = {**final["output"][0], "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": start}),
        ("response.in_progress", {"response": start}),
        ("response.output_item.added", {"output_index": 0, "item": empty_item}),
        ("response.content_part.added", {**at, "part": part}),
    ]
    events += [
        ("response.output_text.delta", {**at, "delta": piece, "logprobs": []})
        for piece in _pieces(reply.text)
    ]
    events += [
        ("response.output_text.done", {**at, "text": reply.text, "logprobs": []}),
        ("response.content_part.done", {**at, "part": {**part, "text": reply.text}}),
        ("response.output_item.done", {"output_index": 0, "item": final["output"][0]}),
        ("response.completed", {"response": final}),
    ]
    return b"".join(
        _event({"type": kind, "sequence_number": i, **data}, kind)
        for i, (kind, data) in enumerate(events)
    )


def error_body(message: str, kind: str, code: str | None) -> bytes:
    """An OpenAI-style error body."""
    return _encoder.encode(
        {"error": {"message": message, "type": kind, "code": code, "param": None}}
    )
