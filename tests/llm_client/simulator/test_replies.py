"""The simulator's replies: verdicts from Answer/Expected lines or a stable hash, per-model
noise, the echo of other prompts."""

from __future__ import annotations

from llm_client import ModelSettings
from llm_client._simulator._replies import (
    ChatBody,
    SystemPromptCache,
    compose,
    judge_verdict,
    reply_text,
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
