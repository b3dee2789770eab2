"""ModelClient.forward: someone else's request, governed, retried and metered; the
provider's reply handed back as it came (real HTTP to the simulator where it can)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from llm_client import (
    Forwarded,
    HTTPRequest,
    HTTPResponse,
    LLMError,
    MockTransport,
    ModelClient,
    ModelConfig,
    Simulator,
    TransportError,
)

from .conftest import config, judge, user

_JSON = {"Content-Type": "application/json"}


def _chat(sim: Simulator, **fields: Any) -> tuple[str, bytes]:
    body = {"model": "judge-1", "messages": judge("4", "4"), **fields}
    return sim.base_url + "/chat/completions", json.dumps(body).encode()


def _sse_events(body: bytes) -> list[Any]:
    events = [e.removeprefix(b"data: ") for e in body.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]]


def _priced(sim: Simulator, **kwargs: Any) -> ModelConfig:
    return config(sim, price_input=1.0, price_output=2.0, **kwargs)


class TestForward:
    async def test_chat_reply_as_sent_with_its_usage_and_cost(self, sim: Simulator) -> None:
        """A forwarded chat completion comes back as the server wrote it, its tokens are
        the server's usage and its cost their price."""
        url, body = _chat(sim)
        async with ModelClient(_priced(sim)) as client:
            reply = await client.forward("POST", url, _JSON, body)
        stats = sim.statistics()
        payload = json.loads(reply.body)
        assert reply.ok and reply.status == 200 and reply.usage_reported
        assert payload["choices"][0]["message"]["content"].startswith("PASS")
        assert (reply.input_tokens, reply.output_tokens) == (
            stats.prompt_tokens,
            stats.completion_tokens,
        )
        assert payload["usage"]["prompt_tokens"] == reply.input_tokens
        expected = (reply.input_tokens * 1.0 + reply.output_tokens * 2.0) / 1e6
        assert reply.cost_usd == pytest.approx(expected)
        assert reply.model == "judge-1" and reply.attempts == 1
        assert "content-length" not in reply.headers

    async def test_stream_metered_and_usage_chunk_only_when_asked(self, sim: Simulator) -> None:
        """A streamed chat completion is metered from the usage chunk the client asks for;
        a caller that did not ask does not get that chunk, one that asked does."""
        async with ModelClient(_priced(sim)) as client:
            url, unasked = _chat(sim, stream=True)
            quiet = await client.forward("POST", url, _JSON, unasked)
            _, asked = _chat(sim, stream=True, stream_options={"include_usage": True})
            told = await client.forward("POST", url, _JSON, asked)
        stats = sim.statistics()
        assert stats.streamed == 2
        assert quiet.headers["content-type"].startswith("text/event-stream")
        quiet_chunks = _sse_events(quiet.body)
        assert all(c["choices"] for c in quiet_chunks)
        told_chunks = _sse_events(told.body)
        assert told_chunks[-1]["choices"] == [] and told_chunks[-1]["usage"] is not None
        assert quiet.input_tokens + told.input_tokens == stats.prompt_tokens
        assert quiet.output_tokens + told.output_tokens == stats.completion_tokens
        assert quiet.cost_usd is not None and quiet.cost_usd == told.cost_usd

    async def test_responses_api_plain_and_streamed(self, sim: Simulator) -> None:
        """Responses API calls, plain and streamed, are metered from their usage."""
        url = sim.base_url + "/responses"
        async with ModelClient(_priced(sim)) as client:
            plain = await client.forward(
                "POST", url, _JSON, json.dumps({"model": "judge-1", "input": "hi"}).encode()
            )
            body = {"model": "judge-1", "input": "hi", "stream": True}
            streamed = await client.forward("POST", url, _JSON, json.dumps(body).encode())
        stats = sim.statistics()
        assert plain.usage_reported and streamed.usage_reported
        assert plain.input_tokens + streamed.input_tokens == stats.prompt_tokens
        assert plain.output_tokens + streamed.output_tokens == stats.completion_tokens
        assert b"response.completed" in streamed.body

    async def test_error_reply_returned_not_raised_key_scrubbed(self, make_sim: Any) -> None:
        """A 401 is handed back (the SDK raises its own error) with x-should-retry: false,
        at no cost, and the key the server echoed is scrubbed from it."""
        secret = "sk-proj-FORWARDEDSECRET0123456789abcdef"
        async with make_sim(api_key="sk-right-key") as sim:
            url, body = _chat(sim)
            headers = {**_JSON, "Authorization": f"Bearer {secret}"}
            async with ModelClient(config(sim)) as client:
                reply = await client.forward("POST", url, headers, body)
            assert sim.statistics().requests == 1  # not retried
        assert reply.status == 401 and not reply.ok
        assert reply.headers["x-should-retry"] == "false"
        assert reply.cost_usd == 0.0 and not reply.usage_reported
        assert secret.encode() not in reply.body and secret[8:24].encode() not in reply.body
        assert json.loads(reply.body)["error"]["code"] == "invalid_api_key"

    async def test_retries_then_hands_back_the_last_429(self) -> None:
        """A 503 then a 200 is one retry; 429s until retries run out end in the last 429
        handed back, marked not to be retried again."""
        script = [HTTPResponse(503, {}, b"{}")]

        def handler(request: HTTPRequest) -> HTTPResponse:
            if script:
                return script.pop()
            if b"always-429" in request.body:
                return HTTPResponse(429, {"retry-after-ms": "1"}, b'{"error": {}}')
            return HTTPResponse(200, {}, b'{"choices": [], "usage": {"prompt_tokens": 3}}')

        cfg = ModelConfig(
            model="m", base_url="http://x.invalid/v1", api_key_env=None, max_retries=2
        )
        url = "http://x.invalid/v1/chat/completions"
        async with ModelClient(cfg, transport=MockTransport(handler), seed=0) as client:
            good = await client.forward("POST", url, _JSON, b'{"model": "m"}')
            bad = await client.forward("POST", url, _JSON, b'{"model": "always-429"}')
        assert (good.status, good.retries, good.input_tokens) == (200, 1, 3)
        assert (bad.status, bad.attempts, bad.rate_limited) == (429, 3, 3)
        assert bad.headers["x-should-retry"] == "false"

    async def test_no_reply_at_all_raises_llm_error(self) -> None:
        """Connection failures on every attempt end in an LLMError naming the model."""

        def handler(request: HTTPRequest) -> HTTPResponse:
            raise TransportError("connect", "127.0.0.1:9 refused", response_started=False)

        cfg = ModelConfig(
            model="m", base_url="http://x.invalid/v1", api_key_env=None, max_retries=1
        )
        async with ModelClient(cfg, transport=MockTransport(handler), seed=0) as client:
            with pytest.raises(LLMError, match="model 'm'") as info:
                await client.forward("POST", "http://x.invalid/v1/chat/completions", {}, b"{}")
        assert info.value.attempts == 2

    async def test_hop_by_hop_headers_dropped_own_headers_kept(self) -> None:
        """Host, Content-Length and Accept-Encoding are the transport's to set; the
        caller's Authorization and other headers go as given; the reply's encoding headers
        are dropped since the body is handed back decoded."""
        seen: list[HTTPRequest] = []

        def handler(request: HTTPRequest) -> HTTPResponse:
            seen.append(request)
            return HTTPResponse(200, {"Content-Encoding": "gzip", "X-Request-Id": "r1"}, b"{}")

        cfg = ModelConfig(model="m", base_url="http://x.invalid/v1", api_key_env=None)
        headers = {
            "Host": "x.invalid",
            "Content-Length": "2",
            "Accept-Encoding": "gzip, br, zstd",
            "Authorization": "Bearer sk-own",
            "X-Stainless-Lang": "python",
        }
        async with ModelClient(cfg, transport=MockTransport(handler)) as client:
            reply = await client.forward("POST", "http://x.invalid/v1/embeddings", headers, b"{}")
        assert dict(seen[0].headers) == {
            "Authorization": "Bearer sk-own",
            "X-Stainless-Lang": "python",
        }
        assert reply.headers == {"x-request-id": "r1"}
        assert reply.cost_usd is None and reply.cost_note is not None  # no usage: unmeasured

    async def test_shares_the_governor_with_complete(self, sim: Simulator) -> None:
        """forward() and complete() of one model are admitted by the same governor."""
        url, body = _chat(sim)
        async with ModelClient(config(sim, rpm=6000)) as client:
            await client.complete(user("a"))
            await client.forward("POST", url, _JSON, body)
            stats = client.statistics()
        assert stats.requests_sent == 2 and stats.rpm_source == "configured"

    async def test_forwarded_pickles_whole(self, sim: Simulator) -> None:
        """A Forwarded crosses a process boundary (msgspec and pickle) unchanged."""
        import pickle

        url, body = _chat(sim)
        async with ModelClient(_priced(sim)) as client:
            reply = await client.forward("POST", url, _JSON, body)
        assert pickle.loads(pickle.dumps(reply)) == reply
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(reply), type=Forwarded) == reply
