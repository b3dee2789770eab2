"""The simulator's HTTP/1.1 server on the wire: keep-alive, pipelining, chunked bodies,
``Connection: close``, bad requests, dropped connections."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_client import Simulator
from tests._helpers import until

from ..conftest import user
from .conftest import chat_request, raw, read_reply


class TestHttpServer:
    async def test_pipelined_keep_alive_requests_answered_in_order(self, sim: Simulator) -> None:
        """Requests sent back to back on one connection are all answered, in order,
        and the connection stays open."""
        reader, writer = await raw(sim, chat_request("one") + chat_request("two"))
        try:
            replies = [await read_reply(reader), await read_reply(reader)]
            writer.write(chat_request("three"))
            replies.append(await read_reply(reader))
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
        reader, writer = await raw(sim, wire[: len(head) + 8])
        try:
            writer.write(wire[len(head) + 8 :])
            status, _, payload = await read_reply(reader)
        finally:
            writer.close()
        assert status == 200
        assert json.loads(payload)["choices"][0]["message"]["content"] == "Echo: chunky"

    async def test_connection_close_is_honoured(self, sim: Simulator) -> None:
        """`Connection: close` gets the reply with `Connection: close`, then EOF."""
        reader, writer = await raw(sim, chat_request("bye", extra=b"Connection: close\r\n"))
        try:
            status, headers, _ = await read_reply(reader)
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
            reader, writer = await raw(sim, wire)
            try:
                got, _, _ = await read_reply(reader)
            finally:
                writer.close()
        assert got == status

    async def test_dropped_connection_and_disconnect_end_the_request(self, make_sim: Any) -> None:
        """A drop fault closes the connection without a reply; a client that leaves
        mid-latency is no longer counted in flight."""
        async with make_sim(drop_rate=1.0) as sim:
            reader, writer = await raw(sim, chat_request("x"))
            try:
                assert await reader.read() == b""
            finally:
                writer.close()
            assert sim.statistics().faults["drop"] == 1
            assert sim.statistics().in_flight == 0
        async with make_sim(latency_ms=60_000) as sim:
            reader, writer = await raw(sim, chat_request("x"))
            await until(lambda: sim.statistics().in_flight == 1)
            writer.close()
            await until(lambda: sim.statistics().in_flight == 0)
        assert sim.statistics().served == 0
