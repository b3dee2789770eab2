"""The API key against servers that echo it back in every place a response has.

A raw asyncio TCP server on 127.0.0.1 reads the request's ``Authorization`` header and
answers with it (or the bare key) in the status line, a header name, a header value
(Content-Length, Content-Encoding, Retry-After), a chunk size, a chunked trailer, an
error body, a broken 200 body, a response cut short. Keys of every length from 1 to 64
(hypothesis), of key characters and of any printable ASCII. Through both transports
(the lean HTTP/1.1 one and aiohttp), the ``LLMError`` (message, args, attributes, cause,
context), every ``RetryDetails.reason`` and every log record must be free of the key;
and so must everything a real ``skynet-eval run`` leaves: the results file, the HTML
report, the JSON report, stdout and stderr.

A key of 8 characters or more must not appear at all; a shorter one must not appear as a
token (the rule of ``llm_client/_redact.py``: "a" inside "malformed" is not the key).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import os
import re
import string
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from llm_client import (
    AiohttpTransport,
    HTTPTransport,
    LLMError,
    ModelClient,
    ModelClientError,
    ModelConfig,
    RetryDetails,
)
from llm_client._redact import REDACTED, SUBSTRING_MIN
from llm_client._retry import server_wait

ROOT = Path(__file__).resolve().parents[2]
KEY_VAR = "SKYNET_ECHO_TEST_KEY"

KEY_CHARS = string.ascii_letters + string.digits + "-_.~+/="
HARD_CHARS = "".join(c for c in string.printable if not c.isspace())
# A short key of punctuation alone (")", "--") is the syntax of every message and repr,
# not a key anyone is issued: a short key has a letter or digit (llm_client/_redact.py).
keys = st.one_of(
    st.text(st.sampled_from(KEY_CHARS), min_size=1, max_size=64),
    st.text(st.sampled_from(HARD_CHARS), min_size=1, max_size=64),
).filter(lambda key: len(key) >= SUBSTRING_MIN or any(c.isalnum() for c in key))


def _forms(key: str) -> set[str]:
    slashed = key.replace("\\", "\\\\")
    return {
        key,
        key.lower(),
        json.dumps(key)[1:-1],
        repr(key)[1:-1],
        slashed.replace("'", "\\'"),
        slashed.replace('"', '\\"'),
    }


def leaks(key: str, text: str) -> bool:
    """Whether ``text`` shows ``key`` (as sent, lowercased, JSON- or repr-escaped):
    anywhere for a key of 8 characters or more, as a token for a shorter one."""
    text = text.replace(REDACTED, " ")
    for form in _forms(key):
        if len(key) >= SUBSTRING_MIN:
            found = form.lower() in text.lower()
        else:
            left = r"(?<![A-Za-z0-9])" if form[0].isalnum() else ""
            right = r"(?![A-Za-z0-9])" if form[-1].isalnum() else ""
            found = re.search(left + re.escape(form) + right, text, re.IGNORECASE) is not None
        if found:
            return True
    return False


def _chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%b\r\n" % (len(c), c) for c in chunks)
    return body + b"0\r\n" + trailer + b"\r\n"


def _json_error(auth: bytes) -> bytes:
    text = auth.decode("latin-1")
    return json.dumps(
        {
            "error": {
                "message": f"Incorrect API key provided: {text}. Headers: {{'Authorization': "
                f"'{text}'}}",
                "code": text,
            }
        }
    ).encode("latin-1")


# Each shape: (the response to a request carrying ``auth``, the key; what the error says
# on the lean transport, so the test knows it exercised that path).
Shape = Callable[[bytes, bytes], bytes]
SHAPES: dict[str, tuple[Shape, str]] = {
    "status line": (lambda a, k: b"HTTP/1.1 " + a + b"\r\n\r\n", "status"),
    "bare key as status": (lambda a, k: b"HTTP/1.1 " + k + b" x\r\n\r\n", ""),
    "header line": (lambda a, k: b"HTTP/1.1 200 OK\r\n" + a + b"\r\n\r\n", ""),
    "header name": (lambda a, k: b"HTTP/1.1 200 OK\r\n" + k + b" : 1\r\n\r\n", "header"),
    "content-length": (
        lambda a, k: b"HTTP/1.1 200 OK\r\nContent-Length: " + k + b"x\r\n\r\n",
        "Content-Length",
    ),
    "content-encoding": (
        lambda a, k: (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Encoding: x" + a + b"\r\n\r\n{}"
        ),
        "Content-Encoding",
    ),
    "chunk size": (
        lambda a, k: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + k + b"z\r\n",
        "chunk size",
    ),
    "chunked trailer": (
        lambda a, k: (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + _chunked(b"not json: " + a, trailer=b"X-Echo: " + a + b"\r\n")
        ),
        "malformed response body",
    ),
    "401 json": (
        lambda a, k: (
            b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(_json_error(a)), _json_error(a))
        ),
        "HTTP 401",
    ),
    "500 text": (
        lambda a, k: (
            b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n<p>%b %b</p>"
            % (len(a) + len(k) + 8, a, k)
        ),
        "HTTP 500",
    ),
    "200 broken body": (
        lambda a, k: (
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b"
            % (len(a) * 2 + 400, b"x" * 400 + a + a)
        ),
        "malformed response body",
    ),
    "429 retry-after": (
        lambda a, k: (
            b"HTTP/1.1 429 Slow\r\nRetry-After: "
            + k
            + b"\r\nContent-Length: %d\r\n\r\n%b" % (len(_json_error(a)), _json_error(a))
        ),
        "HTTP 429",
    ),
    "cut short": (
        lambda a, k: b"HTTP/1.1 200 OK\r\nContent-Length: 9999\r\nX-Echo: " + a + b"\r\n\r\n" + a,
        "connection dropped",
    ),
}


class EchoServer:
    """A raw HTTP/1.1 server that answers each request with ``shape(auth, key)`` and closes."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            auth, length = b"", 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.lower() == b"authorization":
                    auth = value.strip()
                elif name.lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(self.shape(auth, auth.removeprefix(b"Bearer ")))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> EchoServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def _deep_text(value: Any) -> str:
    """Every text reachable from an exception: its str and repr, and the strings among
    its args, attributes, cause and context, recursively (numbers are not text: a count
    of 0 is not the key "0")."""
    seen: set[int] = set()
    parts: list[str] = []

    def walk(v: Any, depth: int) -> None:
        if depth > 8 or id(v) in seen:
            return
        seen.add(id(v))
        if isinstance(v, (str, BaseException)):
            parts.append(repr(v))
        if isinstance(v, BaseException):
            parts.append(str(v))
            walk(v.args, depth + 1)
            walk(vars(v), depth + 1)
            walk(v.__cause__, depth + 1)
            walk(v.__context__, depth + 1)
        elif isinstance(v, dict):
            for item in v.values():
                walk(item, depth + 1)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item, depth + 1)

    walk(value, 0)
    return "\n".join(parts)


async def _call(shape: Shape, key: str, transport: Any) -> tuple[BaseException, list[str]]:
    """One call against an echo server: the exception it ended with, and the retry reasons."""
    reasons: list[str] = []

    def on_retry(details: RetryDetails) -> None:
        reasons.append(details.reason)

    async with EchoServer(shape) as server:
        config = ModelConfig(
            model="m",
            base_url=f"http://127.0.0.1:{server.port}/v1",
            api_key_env=KEY_VAR,
            max_retries=1,
            timeout=5,
            price_input=0.0,
            price_output=0.0,
        )
        async with ModelClient(config, transport=transport, on_retry=on_retry, seed=1) as client:
            try:
                await client.complete([{"role": "user", "content": "hi"}])
            except (LLMError, ModelClientError) as exc:
                return exc, reasons
    raise AssertionError("the call succeeded against a server that only echoes")


TRANSPORTS: dict[str, Callable[[], Any]] = {"http11": HTTPTransport, "aiohttp": AiohttpTransport}

CONTROL_KEY = "qz7-control-x9"


@functools.cache
def _house_text(shape: str, transport: str) -> str:
    """What the client says for ``shape`` whatever the key: the text of one call made
    with a fixed control key. Hypothesis draws keys from the code's own constants too
    ("LLMERROR" is the class name in every repr); a key that is a word of that text is
    the house's own wording, not an echo."""
    os.environ[KEY_VAR] = CONTROL_KEY
    try:
        exc, reasons = asyncio.run(_call(SHAPES[shape][0], CONTROL_KEY, TRANSPORTS[transport]()))
    finally:
        del os.environ[KEY_VAR]
    return (_deep_text(exc) + "\n".join(reasons)).replace(CONTROL_KEY, " ")


@pytest.mark.slow  # 12 examples of each shape and transport, each a server and a client
@pytest.mark.parametrize("transport", list(TRANSPORTS))
@pytest.mark.parametrize("shape", list(SHAPES))
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(key=keys)
def test_an_echoed_key_never_leaves_the_client(
    shape: str, transport: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server echoing the key (as a Bearer header or bare) in one place of its
    response: the LLMError and every retry reason and log record are free of it, and
    the error still says what went wrong."""
    build, says = SHAPES[shape]
    # A key that reads as a wait in a Retry-After header ("7", "1e5", an HTTP date) is a
    # wait the client honours, up to 120 s: the test's own timeout would cut it (and
    # Hypothesis would replay it, as long again). A wait is not what this test is about.
    assume(shape != "429 retry-after" or (server_wait({"retry-after": key}) or 0.0) < 1.0)
    assume(not leaks(key, _house_text(shape, transport)))
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    os.environ[KEY_VAR] = key
    try:
        exc, reasons = asyncio.run(_call(build, key, TRANSPORTS[transport]()))
    finally:
        del os.environ[KEY_VAR]
    text = _deep_text(exc) + "\n".join(reasons)
    # The model client's and the engine's records (asyncio's own hold numbers that a
    # one-digit key would match without being in them).
    ours = [r for r in caplog.records if r.name.split(".")[0] in ("llm_client", "evaluator")]
    text += "\n".join(r.getMessage() + repr(r.__dict__) for r in ours)
    assert not leaks(key, text), f"{key!r} in {text[:3000]}"
    # A key of plain key characters keeps the response's shape (a ":" in a key makes the
    # "header name" a valid header, say): then the error names what was wrong.
    plain = len(key) >= SUBSTRING_MIN and set(key) <= set(KEY_CHARS)
    if transport == "http11" and says and plain:
        assert says in str(exc), str(exc)


# -- a real run: every output -------------------------------------------------------------

JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}")
    return (1.0 if reply.startswith("PASS") else 0.0), {"feedback": reply}
"""

CATCHING_JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    try:
        reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}")
    except Exception as exc:  # a metric that puts the model's error in its feedback
        return 0.0, {"feedback": f"the judge failed: {exc!r} / {exc}", "error": repr(exc)}
    return 1.0, {"feedback": reply}
"""


def _page_data(html: str) -> str:
    """The page's compressed blocks (the table and every example's details), inflated as
    the browser inflates them: a search of the page's text alone cannot see into them."""
    blocks = re.findall(
        r'<script type="[^"]+" id="report-(?:columns|details)">(.*?)</script>', html, re.S
    )
    assert len(blocks) == 2
    texts = [zlib.decompress(base64.b64decode(b)).decode() for b in blocks]
    return "\n".join([*texts, repr(json.loads(texts[0]))])


class _ThreadedEcho:
    """An :class:`EchoServer` on its own loop in a thread, for a subprocess to call."""

    def __init__(self, shape: Shape) -> None:
        import threading

        self.shape = shape
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with EchoServer(self.shape) as server:
            self.port = server.port
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> _ThreadedEcho:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


# Shapes the client gives up on at once or after one retry (a transport error is retried
# with backoff six times: the client-level test above covers those paths, this one every
# output of a run).
_RUNS = [
    (metric, shape, key)
    for key in ("k", "sk-1", "ollama", "sk-proj-" + "Ab1_" * 14)
    for metric, shapes in (
        (CATCHING_JUDGE, ("401 json", "200 broken body")),
        (JUDGE, ("401 json",)),
    )
    for shape in shapes
]


@pytest.mark.slow  # a CLI run in a subprocess per case
@pytest.mark.parametrize(
    ("metric", "shape", "key"),
    _RUNS,
    ids=[f"{'catching' if m is CATCHING_JUDGE else 'judge'}-{s}-{k[:8]}" for m, s, k in _RUNS],
)
def test_a_real_run_leaves_the_key_nowhere(
    tmp_path: Path, key: str, shape: str, metric: str
) -> None:
    """``skynet-eval run`` with the key in OPENAI_API_KEY and a judge model that echoes
    it: the results file, the HTML report (--report), the JSON report, stdout and stderr
    hold no copy of it, whether the metric lets the error through or puts it in its
    feedback; and the failure is reported."""
    (tmp_path / "metric.py").write_text(textwrap.dedent(metric))
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "input": {}, "output": f"o{i}"}) + "\n" for i in range(4))
    )
    out, page = tmp_path / "r.jsonl", tmp_path / "r.html"
    with _ThreadedEcho(SHAPES[shape][0]) as server:
        argv = [
            sys.executable, "-m", "evaluator", "run",
            "--metric", str(tmp_path / "metric.py"), "--data", str(data),
            "--metric-model", "m", "--base-url", f"http://127.0.0.1:{server.port}/v1",
            "--api-key-env", "OPENAI_API_KEY",
            "--price-input", "0", "--price-output", "0",
            "--output", str(out), "--report", str(page), "--json", "--timeout", "30",
        ]  # fmt: skip
        done = subprocess.run(
            argv,
            env={**os.environ, "OPENAI_API_KEY": key, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode in (0, 1), done.stderr
    outputs = {"stdout": done.stdout, "stderr": done.stderr}
    if metric is CATCHING_JUDGE:
        # The metric catches the model's error and puts it in its feedback: the run
        # completes and writes every example.
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == 6  # a header, 4 results and the line that records the run's end
        outputs["results file"] = out.read_text()
        # the decoded strings too: JSON escapes would hide a key with quotes from a search
        outputs["results"] = repr(rows)
        html = page.read_text()
        # What the run put in the page: its data blocks (every result), and the markup
        # around them. The page's own script, style and help text are constants, which
        # hold one-letter words ("j/k move"): for a one-character key only the data says
        # anything.
        outputs["report page data"] = _page_data(html)
        if len(key) > 1:
            outputs["report page"] = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S)
        told = outputs["results file"]
    else:
        # The model's error reaches the contract check, which stops the run and says why.
        assert done.returncode == 1 and not out.exists(), done.stderr
        told = done.stderr
    for name, text in outputs.items():
        assert not leaks(key, text), f"{key!r} in the {name}: {text[:3000]}"
    assert "model 'm'" in told  # the failure is told, without the key
