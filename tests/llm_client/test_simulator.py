"""The simulator: deterministic replies, limits with headers, faults, counts, lifetimes."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from llm_client import (
    ModelClient,
    ModelConfigError,
    ModelSettings,
    Simulator,
    SimulatorConfig,
)
from llm_client._simulator import judge_verdict, reply_text

from .conftest import config, judge, until, user


async def _post(session: aiohttp.ClientSession, sim: Simulator, body: dict[str, Any]) -> Any:
    async with session.post(sim.base_url + "/chat/completions", json=body) as resp:
        return resp.status, CIMultiDict(resp.headers), await resp.json(content_type=None)


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

    async def test_per_model_latency_and_noise(self, make_sim: Any) -> None:
        """Two served models answer with their own latency and their own noise
        (tolerance: the 80 ms model must take at least 60 ms)."""
        models = {
            "fast": ModelSettings(latency_ms=0),
            "slow": ModelSettings(latency_ms=80, noise=1.0),
        }
        async with (
            make_sim(models=models) as sim,
            ModelClient(config(sim, "fast")) as fast,
            ModelClient(config(sim, "slow")) as slow,
        ):
            a = await fast.complete(judge("x", "x"))
            b = await slow.complete(judge("x", "x"))
        assert a.text.startswith("PASS") and b.text.startswith("FAIL")
        assert b.latency_ms >= 60 > a.latency_ms


class TestLimits:
    async def test_rpm_window_enforced_with_headers(self, make_sim: Any) -> None:
        """Past rpm*W/60 requests in a window the server answers 429 with retry-after,
        retry-after-ms and x-ratelimit-* headers, and counts what it accepted."""
        async with make_sim(rpm=600, window_s=1.0) as sim, aiohttp.ClientSession() as session:
            body = {"model": "m", "messages": user("x")}
            results = await asyncio.gather(*(_post(session, sim, body) for _ in range(14)))
        statuses = [status for status, _, _ in results]
        assert statuses.count(200) == 10 and statuses.count(429) == 4
        _, headers, payload = next(r for r in results if r[0] == 429)
        assert payload["error"]["code"] == "rate_limit_exceeded"
        assert int(headers["retry-after"]) >= 1
        assert 0 < int(headers["retry-after-ms"]) <= 1000
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-limit-requests"] == "10"
        stats = sim.statistics()
        assert stats.rate_limited == 4 and stats.served == 10 and stats.requests == 14
        assert sim.peak_requests(1.0) == 14
        assert sim.peak_requests(1.0, accepted_only=True) == 10

    async def test_tpm_window_enforced(self, make_sim: Any) -> None:
        """Past tpm*W/60 tokens in a window the server answers 429 (tokens)."""
        async with make_sim(tpm=6000, window_s=1.0) as sim, aiohttp.ClientSession() as session:
            body = {"model": "m", "messages": user("y" * 120)}  # 37 + 32 tokens
            results = [await _post(session, sim, body) for _ in range(3)]
        assert [r[0] for r in results] == [200, 429, 429]
        assert "tokens per window" in results[1][2]["error"]["message"]

    async def test_faults_at_seeded_rates(self, make_sim: Any) -> None:
        """Injected faults occur at about their rates, the same ones for the same seed."""
        counts = []
        for _ in range(2):
            async with (
                make_sim(error_500_rate=0.2, malformed_rate=0.1, seed=11) as sim,
                aiohttp.ClientSession() as session,
            ):
                body = {"model": "m", "messages": user("x")}
                statuses = [(await _post_raw(session, sim, body)) for _ in range(200)]
            counts.append(sim.statistics().faults)
            assert statuses.count(500) == counts[-1]["error_500"]
        assert counts[0] == counts[1]
        assert 20 <= counts[0]["error_500"] <= 60 and 5 <= counts[0]["malformed"] <= 35


async def _post_raw(session: aiohttp.ClientSession, sim: Simulator, body: dict[str, Any]) -> int:
    async with session.post(sim.base_url + "/chat/completions", json=body) as resp:
        await resp.read()
        return resp.status


class TestServer:
    async def test_models_and_unknown_model(self, make_sim: Any) -> None:
        """GET /v1/models lists the served models; another model name gets 404."""
        async with (
            make_sim(models={"a": ModelSettings(), "b": ModelSettings()}) as sim,
            aiohttp.ClientSession() as session,
        ):
            async with session.get(sim.base_url + "/models") as resp:
                listed = [m["id"] for m in (await resp.json())["data"]]
            status, _, payload = await _post(session, sim, {"model": "c", "messages": user("x")})
        assert listed == ["a", "b"]
        assert status == 404 and payload["error"]["code"] == "model_not_found"

    async def test_bad_body_is_400(self, sim: Simulator) -> None:
        """A body that is not a chat request gets 400 and counts as a client error."""
        async with aiohttp.ClientSession() as session:
            status, _, _ = await _post(session, sim, {"nope": 1})
        assert status == 400 and sim.statistics().client_errors == 1

    def test_running_in_thread(self) -> None:
        """The sync form serves from a background thread until the block ends."""
        with Simulator(SimulatorConfig()).running_in_thread() as sim:
            request = urllib.request.Request(
                sim.base_url + "/chat/completions",
                data=json.dumps({"model": "m", "messages": user("hey")}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as resp:
                payload = json.loads(resp.read())
            with urllib.request.urlopen(
                sim.base_url.removesuffix("/v1") + "/sim/statistics?window=1", timeout=10
            ) as resp:
                stats = json.loads(resp.read())
        assert payload["choices"][0]["message"]["content"] == "Echo: hey"
        assert stats["served"] == 1 and stats["peak_requests"] == 1
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(sim.base_url + "/models", timeout=2)

    @pytest.mark.parametrize(
        ("kwargs", "fragment"),
        [
            ({"host": "0.0.0.0"}, "loopback"),
            ({"error_500_rate": 0.7, "drop_rate": 0.5}, "add up to 1.2"),
            ({"rpm": 0}, "`rpm` must be positive"),
            ({"pass_rate": 2}, "`pass_rate`"),
        ],
    )
    def test_config_validation(self, kwargs: dict[str, Any], fragment: str) -> None:
        """A bad simulator setting is refused with a message naming it."""
        with pytest.raises(ModelConfigError, match=fragment):
            SimulatorConfig(**kwargs)

    async def test_runs_once(self, sim: Simulator) -> None:
        """A simulator that ran cannot be started again."""
        with pytest.raises(RuntimeError, match="runs once"):
            async with sim:
                pass


async def _raw(sim: Simulator, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def _read_reply(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(head[0].split()[1]), headers, body


def _chat_request(text: str, *, extra: bytes = b"") -> bytes:
    body = json.dumps({"model": "m", "messages": user(text)}).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


class TestWire:
    async def test_pipelined_keep_alive_requests_answered_in_order(self, sim: Simulator) -> None:
        """Requests sent back to back on one connection are all answered, in order,
        and the connection stays open."""
        reader, writer = await _raw(sim, _chat_request("one") + _chat_request("two"))
        try:
            replies = [await _read_reply(reader), await _read_reply(reader)]
            writer.write(_chat_request("three"))
            replies.append(await _read_reply(reader))
        finally:
            writer.close()
        texts = [json.loads(body)["choices"][0]["message"]["content"] for _, _, body in replies]
        assert texts == ["Echo: one", "Echo: two", "Echo: three"]
        assert all(status == 200 for status, _, _ in replies)
        assert all(h["content-type"] == "application/json" for _, h, _ in replies)

    async def test_chunked_body_split_across_writes(self, sim: Simulator) -> None:
        """A chunked request body (with an extension, split mid-chunk) is reassembled."""
        body = json.dumps({"model": "m", "messages": user("chunky")}).encode()
        head = b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        wire = head + b"%x;ext=1\r\n%b\r\n%x\r\n%b\r\n0\r\n\r\n" % (
            10,
            body[:10],
            len(body) - 10,
            body[10:],
        )
        reader, writer = await _raw(sim, wire[: len(head) + 8])
        try:
            writer.write(wire[len(head) + 8 :])
            status, _, payload = await _read_reply(reader)
        finally:
            writer.close()
        assert status == 200
        assert json.loads(payload)["choices"][0]["message"]["content"] == "Echo: chunky"

    async def test_connection_close_is_honoured(self, sim: Simulator) -> None:
        """`Connection: close` gets the reply with `Connection: close`, then EOF."""
        reader, writer = await _raw(sim, _chat_request("bye", extra=b"Connection: close\r\n"))
        try:
            status, headers, _ = await _read_reply(reader)
            rest = await reader.read()
        finally:
            writer.close()
        assert status == 200 and headers["connection"] == "close" and rest == b""

    @pytest.mark.parametrize(
        ("wire", "status"),
        [
            (b"GET /v1/nothing HTTP/1.1\r\n\r\n", 404),
            (b"GET /v1/chat/completions HTTP/1.1\r\n\r\n", 405),
            (b"POST /v1/models HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
            (b"NOT HTTP\r\n\r\n", 400),
            (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
            (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999\r\n\r\n", 413),
        ],
    )
    async def test_bad_requests_get_their_status(
        self, make_sim: Any, wire: bytes, status: int
    ) -> None:
        """Unknown paths, wrong methods, malformed requests and bodies over
        max_body_bytes get 404/405/400/413."""
        async with make_sim(max_body_bytes=1000) as sim:
            reader, writer = await _raw(sim, wire)
            try:
                got, _, _ = await _read_reply(reader)
            finally:
                writer.close()
        assert got == status

    async def test_dropped_connection_and_disconnect_end_the_request(self, make_sim: Any) -> None:
        """A drop fault closes the connection without a reply; a client that leaves
        mid-latency is no longer counted in flight."""
        async with make_sim(drop_rate=1.0) as sim:
            reader, writer = await _raw(sim, _chat_request("x"))
            try:
                assert await reader.read() == b""
            finally:
                writer.close()
            assert sim.statistics().faults["drop"] == 1
            assert sim.statistics().in_flight == 0
        async with make_sim(latency_ms=60_000) as sim:
            reader, writer = await _raw(sim, _chat_request("x"))
            await until(lambda: sim.statistics().in_flight == 1)
            writer.close()
            await until(lambda: sim.statistics().in_flight == 0)
        assert sim.statistics().served == 0

    async def test_api_key_required(self, make_sim: Any) -> None:
        """With api_key set, a request without the right Bearer token gets 401 and
        one with it gets 200."""
        async with make_sim(api_key="sk-right") as sim:
            reader, writer = await _raw(sim, _chat_request("x"))
            try:
                bad, _, _ = await _read_reply(reader)
                writer.write(_chat_request("x", extra=b"Authorization: Bearer sk-right\r\n"))
                good, _, _ = await _read_reply(reader)
            finally:
                writer.close()
        assert (bad, good) == (401, 200)
