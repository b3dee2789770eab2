"""What the simulator answers: deterministic replies and verdicts, usage, and the bodies.

Replies depend only on the request (and the model's noise), never on timing or order, so
that a judge metric gives the same verdicts every run and in every process: a stable hash
(blake2b), not Python's salted ``hash``, decides what is not written in the prompt.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from .._wire import estimate_tokens, message_text
from ._config import ModelSettings

__all__ = [
    "MALFORMED",
    "ChatBody",
    "Reply",
    "SystemPromptCache",
    "chat_decoder",
    "completion_body",
    "compose",
    "error_body",
    "judge_verdict",
    "reply_text",
]

#: A reply cut in the middle of a string: what a proxy that drops the connection leaves.
MALFORMED = b'{"id": "chatcmpl-sim", "choices": [{"message": {"content": "PA'

_ANSWER = re.compile(r"^\s*answer\s*:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_EXPECTED = re.compile(r"^\s*expected\s*:\s*(.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_JUDGE = re.compile(r"pass\s+or\s+fail", re.IGNORECASE)
_encoder = msgspec.json.Encoder()


class ChatBody(msgspec.Struct):
    """The part of a chat completion request the simulator reads."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    sim_latency_ms: float | None = None  # a test scripting one slow call


chat_decoder = msgspec.json.Decoder(ChatBody)


def _fraction(*parts: str) -> float:
    """A stable hash of ``parts`` mapped to [0, 1) (the same in every process and run)."""
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def judge_verdict(user: str, model: str, *, pass_rate: float, noise: float) -> bool:
    """The simulator's verdict for a judge prompt (True: PASS).

    If ``user`` has a line ``Answer: X`` and a line ``Expected: Y``, PASS iff X and Y match
    after strip, ignoring case; otherwise PASS iff a stable hash of ``user`` falls under
    ``pass_rate``. The model then flips the verdict with probability ``noise``, decided by
    a stable hash of (model, user), so a noisy model is wrong on the same examples every run.
    """
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
        if judge_verdict(user, model, pass_rate=pass_rate, noise=noise):
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


def compose(body: ChatBody, settings: ModelSettings, *, pass_rate: float) -> Reply:
    """The reply and its usage: about 4 characters a token, cut at ``max_tokens * 4``."""
    limit_out = body.max_completion_tokens or body.max_tokens
    text = reply_text(body.messages, body.model, pass_rate=pass_rate, noise=settings.noise)
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


def completion_body(model: str, reply: Reply, *, number: int, cached: int) -> bytes:
    """A ``chat.completion`` body with its ``usage``."""
    usage: dict[str, Any] = {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
    }
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


def error_body(message: str, kind: str, code: str | None) -> bytes:
    """An OpenAI-style error body."""
    return _encoder.encode(
        {"error": {"message": message, "type": kind, "code": code, "param": None}}
    )
