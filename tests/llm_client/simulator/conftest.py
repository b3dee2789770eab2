"""Helpers for the simulator tests: requests over aiohttp and over a raw socket."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from multidict import CIMultiDict

from llm_client import Simulator

from ..conftest import user


async def post(session: aiohttp.ClientSession, sim: Simulator, body: dict[str, Any]) -> Any:
    async with session.post(sim.base_url + "/chat/completions", json=body) as resp:
        return resp.status, CIMultiDict(resp.headers), await resp.json(content_type=None)


async def post_status(session: aiohttp.ClientSession, sim: Simulator, body: dict[str, Any]) -> int:
    async with session.post(sim.base_url + "/chat/completions", json=body) as resp:
        await resp.read()
        return resp.status


async def raw(sim: Simulator, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def read_reply(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(head[0].split()[1]), headers, body


def chat_request(text: str, *, extra: bytes = b"") -> bytes:
    body = json.dumps({"model": "m", "messages": user(text)}).encode()
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )
