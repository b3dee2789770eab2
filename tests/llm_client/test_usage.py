"""Usage read from replies of the three APIs, plain and streamed; request estimates."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_client import Completion, Forwarded, ModelSettings, TokenUsage
from llm_client._simulator._replies import (
    ChatBody,
    ResponsesBody,
    chunk_stream,
    compose,
    responses_body,
    responses_stream,
)
from llm_client._usage import CallUsage, estimate_request, read_usage, strip_usage_chunks
from llm_client._wire import estimate_tokens

from .conftest import user


def _sse(*events: dict[str, Any], event_names: bool = False) -> bytes:
    out = b""
    for event in events:
        if event_names:
            out += f"event: {event['type']}\n".encode()
        out += b"data: " + json.dumps(event).encode() + b"\n\n"
    return out


class TestReadUsage:
    def test_chat_completion(self) -> None:
        """A chat completion's usage: prompt and completion tokens, cached and reasoning
        ones from their details."""
        body = json.dumps(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 30,
                    "completion_tokens": 12,
                    "prompt_tokens_details": {"cached_tokens": 10},
                    "completion_tokens_details": {"reasoning_tokens": 4},
                },
            }
        ).encode()
        assert read_usage(body, event_stream=False) == CallUsage(
            input_tokens=30, output_tokens=12, cached_tokens=10, reasoning_tokens=4
        )

    def test_chat_stream_takes_the_usage_chunk(self) -> None:
        """In a chat stream the usage-only chunk (and not the nulls before it) counts."""
        reply = compose(
            ChatBody(model="m", messages=user("a b c d e")), ModelSettings(), pass_rate=0.5
        )
        stream = chunk_stream("m", reply, number=1, cached=2, include_usage=True)
        usage = read_usage(stream, event_stream=True)
        assert usage == CallUsage(
            input_tokens=reply.prompt_tokens,
            output_tokens=reply.completion_tokens,
            cached_tokens=2,
            reasoning_tokens=0,
        )
        plain = chunk_stream("m", reply, number=1, cached=0, include_usage=False)
        assert read_usage(plain, event_stream=True) is None

    def test_responses_plain_and_streamed(self) -> None:
        """The Responses API: input/output tokens, read from the object and from the
        response.completed event of a stream."""
        body = ResponsesBody(model="m", input="hello there").as_chat()
        reply = compose(body, ModelSettings(reasoning_tokens=3), pass_rate=0.5)
        expected = CallUsage(
            input_tokens=reply.prompt_tokens,
            output_tokens=reply.completion_tokens,
            cached_tokens=0,
            reasoning_tokens=3,
        )
        plain = responses_body("m", reply, number=1, cached=0)
        assert read_usage(plain, event_stream=False) == expected
        stream = responses_stream("m", reply, number=1, cached=0)
        assert read_usage(stream, event_stream=True) == expected

    def test_anthropic_message_counts_cache_tokens_into_the_input(self) -> None:
        """Anthropic counts cache reads and writes apart from input_tokens: they are
        added to the input, and cache reads are the cached part."""
        body = json.dumps(
            {
                "type": "message",
                "usage": {
                    "input_tokens": 20,
                    "output_tokens": 9,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 5,
                },
            }
        ).encode()
        assert read_usage(body, event_stream=False) == CallUsage(
            input_tokens=125, output_tokens=9, cached_tokens=100, reasoning_tokens=0
        )

    def test_anthropic_stream_merges_message_delta(self) -> None:
        """An Anthropic stream: input tokens from message_start, output tokens from the
        last message_delta (a running total)."""
        stream = _sse(
            {
                "type": "message_start",
                "message": {"model": "claude", "usage": {"input_tokens": 25, "output_tokens": 1}},
            },
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}},
            {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 7}},
            {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 15}},
            {"type": "message_stop"},
            event_names=True,
        )
        assert read_usage(stream, event_stream=True) == CallUsage(
            input_tokens=25, output_tokens=15, cached_tokens=0, reasoning_tokens=0
        )

    @pytest.mark.parametrize(
        "body", [b"", b"not json", b'{"choices": []}', b'{"usage": "n/a"}', b"[1, 2]"]
    )
    def test_no_usage_is_none(self, body: bytes) -> None:
        """A body with no usage object, or no JSON at all, reports no usage."""
        assert read_usage(body, event_stream=False) is None
        assert read_usage(b"data: " + body + b"\n\n", event_stream=True) is None


class TestEstimateRequest:
    def test_chat_with_and_without_an_output_cap(self) -> None:
        """A chat request reserves its prompt estimate plus max_tokens (256 without)."""
        messages = user("x" * 40)
        prompt = estimate_tokens(messages)
        assert estimate_request({"messages": messages, "max_tokens": 10}) == prompt + 10
        assert estimate_request({"messages": messages}) == prompt + 256

    def test_responses_and_anthropic_shapes(self) -> None:
        """Responses input and instructions, Anthropic's system prompt and
        max_output_tokens are counted like chat messages."""
        responses = {"input": "hello", "instructions": "be brief", "max_output_tokens": 5}
        as_chat = [{"role": "system", "content": "be brief"}, *user("hello")]
        assert estimate_request(responses) == estimate_tokens(as_chat) + 5
        anthropic = {"system": "be brief", "messages": user("hello"), "max_tokens": 5}
        assert estimate_request(anthropic) == estimate_tokens([*user("hello"), as_chat[0]]) + 5


class TestStripUsageChunks:
    def test_only_the_usage_only_chunk_goes(self) -> None:
        """Stripping keeps every content chunk and [DONE], and drops the chunk with no
        choices that carries the usage."""
        reply = compose(
            ChatBody(model="m", messages=user("one two")), ModelSettings(), pass_rate=0.5
        )
        with_usage = chunk_stream("m", reply, number=1, cached=0, include_usage=True)
        stripped = strip_usage_chunks(with_usage)
        events = [e for e in stripped.split(b"\n\n") if e]
        assert events[-1] == b"data: [DONE]"
        chunks = [json.loads(e[6:]) for e in events[:-1]]
        assert all(c["choices"] for c in chunks)
        assert len(chunks) == len([e for e in with_usage.split(b"\n\n") if e]) - 2
        assert read_usage(stripped, event_stream=True) is None


class TestTokenUsage:
    def test_sums_and_totals(self) -> None:
        """``+`` adds every count into a plain TokenUsage; ``total_tokens`` is in plus out."""
        a = TokenUsage(input_tokens=10, output_tokens=4, cached_tokens=2, reasoning_tokens=1)
        b = CallUsage(input_tokens=5, output_tokens=6, cached_tokens=0, reasoning_tokens=3)
        total = a + b
        assert type(total) is TokenUsage
        assert total == TokenUsage(
            input_tokens=15, output_tokens=10, cached_tokens=2, reasoning_tokens=4
        )
        assert total.total_tokens == 25

    def test_replies_are_token_usages(self) -> None:
        """Completion and Forwarded are TokenUsage values; ``.tokens`` is the counts alone."""
        done = Completion(text="x", model="m", input_tokens=3, output_tokens=2)
        reply = Forwarded(status=200, headers={}, body=b"", model="m", input_tokens=3)
        for value in (done, reply):
            assert isinstance(value, TokenUsage)
            assert value.tokens == TokenUsage(input_tokens=3, output_tokens=value.output_tokens)
