"""The simulator's replies: verdicts from Answer/Expected lines or a stable hash, per-model
noise and flips, the echo of other prompts, and the four shapes a reply goes out in."""

from __future__ import annotations

import json

from llm_client import ModelSettings
from llm_client._simulator._replies import (
    ChatBody,
    ResponsesBody,
    SystemPromptCache,
    chunk_stream,
    compose,
    judge_verdict,
    reply_text,
    responses_body,
    responses_stream,
)
from llm_client._wire import estimate_tokens

from ..conftest import user


class TestReplies:
    def test_answer_expected_lines_decide_the_verdict(self) -> None:
        """Answer/Expected lines give PASS iff they match, ignoring case and spaces."""
        assert judge_verdict("Answer:  Paris \nExpected: paris", "m", pass_rate=0, noise=0)
        assert not judge_verdict("Answer: Lyon\nExpected: Paris", "m", pass_rate=1, noise=0)

    def test_hash_verdict_follows_pass_rate(self) -> None:
        """Without those lines the verdict is a stable hash with the configured pass rate."""
        texts = [f"essay number {i}" for i in range(2000)]
        passed = [judge_verdict(t, "m", pass_rate=0.3, noise=0) for t in texts]
        assert 0.25 < sum(passed) / len(texts) < 0.35
        assert passed == [judge_verdict(t, "m", pass_rate=0.3, noise=0) for t in texts]

    def test_noise_is_per_model_and_repeatable(self) -> None:
        """Each model flips verdicts at its noise rate, on the same examples every time."""
        texts = [f"Answer: {i}\nExpected: {i}" for i in range(2000)]
        a = [judge_verdict(t, "a", pass_rate=0.5, noise=0.1) for t in texts]
        b = [judge_verdict(t, "b", pass_rate=0.5, noise=0.1) for t in texts]
        assert 0.07 < a.count(False) / len(a) < 0.13
        assert a != b
        assert a == [judge_verdict(t, "a", pass_rate=0.5, noise=0.1) for t in texts]

    def test_other_prompts_echo(self) -> None:
        """A non-judge prompt gets the documented echo of the last user message."""
        messages = [{"role": "system", "content": "be brief"}, *user("What  is\n2+2?")]
        assert reply_text(messages, "m", pass_rate=0.5, noise=0) == "Echo: What is 2+2?"


class TestCompose:
    def test_usage_and_max_tokens_cut(self) -> None:
        """Usage counts about 4 characters a token plus the model's reasoning tokens; a
        reply longer than max_tokens * 4 characters is cut, finish reason "length"."""
        body = ChatBody(model="m", messages=user("a" * 100), max_tokens=5)
        reply = compose(body, ModelSettings(reasoning_tokens=7), pass_rate=0.5)
        assert reply.text == ("Echo: " + "a" * 100)[:20] and reply.finish == "length"
        assert reply.prompt_tokens == estimate_tokens(body.messages)
        assert reply.completion_tokens == 5 + 7 and reply.reasoning_tokens == 7
        assert reply.tokens == reply.prompt_tokens + reply.completion_tokens
        whole = compose(ChatBody(model="m", messages=user("hi")), ModelSettings(), pass_rate=0.5)
        assert (whole.text, whole.finish) == ("Echo: hi", "stop")

    def test_system_prompt_seen_before_is_cached(self) -> None:
        """A system prompt seen before is reported as cached tokens; disabled, never."""
        messages = [{"role": "system", "content": "s" * 40}, *user("q")]
        cache = SystemPromptCache(enabled=True)
        assert cache.cached_tokens(messages) == 0
        assert cache.cached_tokens(messages) == 4 + 10
        assert cache.cached_tokens(user("no system")) == 0
        off = SystemPromptCache(enabled=False)
        assert off.cached_tokens(messages) == off.cached_tokens(messages) == 0


class TestShapes:
    def test_chunk_stream_carries_the_text_and_usage_when_asked(self) -> None:
        """The chat stream's deltas join to the reply; the usage chunk (no choices) comes
        last, before [DONE], only with include_usage."""
        reply = compose(
            ChatBody(model="m", messages=user("one two three four five six seven")),
            ModelSettings(),
            pass_rate=0.5,
        )
        with_usage = chunk_stream("m", reply, number=1, cached=0, include_usage=True)
        events = [e.removeprefix(b"data: ") for e in with_usage.split(b"\n\n") if e]
        assert events[-1] == b"[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
        assert text == reply.text and len(chunks) > 4
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == (
            reply.prompt_tokens
        )
        plain = chunk_stream("m", reply, number=1, cached=0, include_usage=False)
        assert b'"usage"' not in plain

    def test_responses_stream_ends_in_completed_with_usage(self) -> None:
        """The Responses stream's text deltas join to the reply and its last event,
        response.completed, carries the whole response with usage."""
        body = ResponsesBody(model="m", input="hello", instructions="be brief").as_chat()
        assert body.messages == [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
        ]
        reply = compose(body, ModelSettings(), pass_rate=0.5)
        raw_events = responses_stream("m", reply, number=3, cached=0).split(b"\n\n")
        events = [json.loads(e.split(b"data: ", 1)[1]) for e in raw_events if e]
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        assert "".join(deltas) == reply.text == "Echo: hello"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        done = events[-1]
        assert done["type"] == "response.completed"
        assert done["response"]["usage"]["input_tokens"] == reply.prompt_tokens
        whole = json.loads(responses_body("m", reply, number=3, cached=0))
        assert whole["output"][0]["content"][0]["text"] == reply.text

    def test_flip_inverts_the_verdict(self) -> None:
        """A drawn flip turns PASS into FAIL and back, on top of the model's noise."""
        assert judge_verdict("Answer: a\nExpected: a", "m", pass_rate=0, noise=0)
        assert not judge_verdict("Answer: a\nExpected: a", "m", pass_rate=0, noise=0, flip=True)
        assert judge_verdict("Answer: a\nExpected: a", "m", pass_rate=0, noise=1, flip=True)
