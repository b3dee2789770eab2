"""Model calls from threads and processes the user's code starts (issue 24, item 1).

The call context is a context variable, which a user's thread does not inherit: by the
context alone, a program that calls its model from a ``ThreadPoolExecutor`` or a
``threading.Thread``, or over ``urllib`` from a thread or a subprocess, was 0 calls and a
measured $0, and under ``--simulator`` its calls went to the real base URL with the real
key. Each variation runs in the thread and the process executors, against a real listener
on 127.0.0.1 standing in for the provider (it must receive nothing under the simulator)
and the project's simulator:

* calls from a worker process's threads belong to the one call the worker runs: routed,
  counted and priced into that example;
* calls from a user thread in the engine's process go through the engine (and to the
  simulator), are counted, and make the stage's examples unmeasured with the reason;
* a connection of user code to anywhere but the simulator is refused under the simulator,
  in every thread, and the example is unmeasured with the reason;
* a subprocess gets no key and the simulator as its base URL and proxy, and the example
  that started it is unmeasured with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator import Evaluator, Models
from evaluator._data._dataset import Example
from evaluator._sdk import _audit
from evaluator._sdk._environ import PLACEHOLDER, simulated
from llm_client import Simulator, SimulatorConfig

pytestmark = pytest.mark.timeout(180)

SECRET = "sk-proj-THREADSEAMSECRET0123456789abcdefXYZ"
EXECUTIONS = ["thread", "process"]

#: The openai client's call, shared by the programs below.
ASK = """
import openai

def ask(artifact, q):
    client = openai.OpenAI(base_url=artifact["url"], api_key=artifact["key"], max_retries=0)
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": q}]
    ).choices[0].message.content
"""

POOL = (
    ASK
    + """
import concurrent.futures

def run(artifact, input):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda q: ask(artifact, q), [input["q"], "again " + input["q"]]))
"""
)

#: One pool for the module's life: its threads are started by the first call only.
SHARED_POOL = (
    ASK
    + """
import concurrent.futures

POOL = concurrent.futures.ThreadPoolExecutor(2)

def run(artifact, input):
    return list(POOL.map(lambda q: ask(artifact, q), [input["q"], "again " + input["q"]]))
"""
)

THREAD = (
    ASK
    + """
import threading

def run(artifact, input):
    got = []
    worker = threading.Thread(target=lambda: got.append(ask(artifact, input["q"])))
    worker.start()
    worker.join()
    got.append(ask(artifact, "again " + input["q"]))  # and one from the call's own thread
    return got
"""
)

#: Four threads at once: in a worker, their requests share one socket to the engine.
CONCURRENT = (
    ASK
    + """
import concurrent.futures
import threading

def run(artifact, input):
    barrier = threading.Barrier(4, timeout=60)

    def one(i):
        barrier.wait()  # all four in flight together
        return ask(artifact, f"{i} {input['q']}")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(4)))
"""
)

#: The sync client called on the engine's loop: it cannot be routed, so it goes out as
#: the SDK meant, which under the simulator is refused.
SYNC_ON_THE_LOOP = (
    ASK
    + """
async def run(artifact, input):
    try:
        return ask(artifact, input["q"])
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
"""
)

#: Async code handing the sync client to the loop's default thread pool.
IN_EXECUTOR = (
    ASK
    + """
import asyncio

async def run(artifact, input):
    loop = asyncio.get_running_loop()
    return [await loop.run_in_executor(None, ask, artifact, input["q"])]
"""
)

URLLIB_THREAD = """
import json
import threading
import urllib.request

def run(artifact, input):
    got = []

    def post():
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": input["q"]}]})
        request = urllib.request.Request(
            artifact["url"] + "/chat/completions", data=body.encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer " + artifact["key"]},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                got.append("reply: " + reply.read().decode()[:80])
        except Exception as exc:
            got.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=post)
    worker.start()
    worker.join()
    return got[0]
"""

#: http.client from a thread: a client that knows no proxy, to a literal address.
RAW_THREAD = """
import http.client
import threading
from urllib.parse import urlsplit

def run(artifact, input):
    got = []

    def post():
        parts = urlsplit(artifact["url"])
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            conn.request("POST", "/v1/chat/completions", "{}", {"Authorization": "Bearer " + artifact["key"]})
            got.append("reply " + str(conn.getresponse().status))
        except Exception as exc:
            got.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    worker = threading.Thread(target=post)
    worker.start()
    worker.join()
    return got[0]
"""

#: A child process posting to the URL it is given, with the key it finds in its
#: environment; it prints the key it saw and what became of the request.
CHILD = """
import json, os, sys, urllib.request
key = os.environ.get("OPENAI_API_KEY", "")
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
request = urllib.request.Request(
    sys.argv[1] + "/chat/completions", data=body,
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + key},
)
try:
    with urllib.request.urlopen(request, timeout=30) as reply:
        outcome = "reply " + str(reply.status)
except Exception as exc:
    outcome = type(exc).__name__
print(json.dumps({"key": key, "outcome": outcome}))
"""

SUBPROCESS = f"""
import json
import subprocess
import sys

CHILD = {CHILD!r}

def run(artifact, input):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, artifact["url"]], capture_output=True, text=True, timeout=60
    )
    return json.loads(done.stdout)
"""

#: The same child through a shell (os.popen).
POPEN = f"""
import json
import os
import shlex
import sys

CHILD = {CHILD!r}

def run(artifact, input):
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-c", CHILD, artifact["url"]])
    with os.popen(command) as out:
        return json.loads(out.read())
"""

#: A child that calls the model with the openai SDK configured from its environment only.
SDK_CHILD = """
import openai
client = openai.OpenAI(max_retries=0)
print(client.chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "from a child"}]
).choices[0].message.content)
"""

SDK_SUBPROCESS = f"""
import subprocess
import sys

CHILD = {SDK_CHILD!r}

def run(artifact, input):
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    return done.stdout.strip() or done.stderr[-300:]
"""

ACCEPT = """
def score(input, output, expected=None):
    return 1.0, {"feedback": "ok"}
"""


class Provider:
    """A real listener on 127.0.0.1 playing the provider: it counts the connections it
    accepts and what they sent (a request reaching it is what the tests forbid)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(5)
                try:
                    self.received.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 500 Nope\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    self.received.append(b"")

    def close(self) -> None:
        # close() alone does not wake a thread blocked in accept() on Linux; shutdown does.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(10)
        assert not self._thread.is_alive(), "the provider's thread did not end"


@pytest.fixture
def provider() -> Iterator[Provider]:
    server = Provider()
    try:
        yield server
    finally:
        server.close()


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def examples(n: int) -> list[Example]:
    return [Example(id=f"e{i}", input={"q": f"question {i}"}) for i in range(n)]


async def _run(
    tmp_path: Path,
    source: str,
    execution: str,
    artifact_url: str,
    sim: Simulator,
    *,
    simulated: bool = True,
    n: int = 3,
) -> tuple[list[Any], Any]:
    program = write(tmp_path, "program.py", source)
    metric = write(tmp_path, "metric.py", ACCEPT)
    models = Models(sdk_base_url=sim.base_url) if simulated else None
    # The metric inline and one program worker: what is tried is the program's threads
    # (each worker process imports the openai SDK, a second of CPU on a loaded machine).
    async with Evaluator(
        metric,
        program,
        execution="inline",
        program_execution=execution,
        workers=1,
        models=models,
        timeout=120,
    ) as ev:
        results = await ev.evaluate_many({"url": artifact_url, "key": SECRET}, examples(n))
        stats = ev.statistics().models
    for result in results:
        assert result.error is None, result.error
    return results, stats


def _notes(result: Any) -> str:
    return " ".join(result.observation.notes)


@pytest.fixture
async def sim() -> Any:
    async with Simulator(SimulatorConfig()) as server:
        yield server


@pytest.mark.process
class TestThreadsUnderTheSimulator:
    @pytest.mark.parametrize("execution", EXECUTIONS)
    @pytest.mark.parametrize(
        "source", [POOL, SHARED_POOL, THREAD], ids=["pool", "shared", "thread"]
    )
    async def test_sdk_calls_from_threads_reach_the_simulator_only(
        self, tmp_path: Path, provider: Provider, sim: Simulator, execution: str, source: str
    ) -> None:
        """An openai client pointed at the provider, called from the program's threads:
        every call is served by the simulator, none reaches the provider, all are counted."""
        results, stats = await _run(tmp_path, source, execution, provider.url, sim)
        assert provider.received == []
        for i, result in enumerate(results):
            assert sorted(result.output) == sorted(
                [f"Echo: question {i}", f"Echo: again question {i}"]
            )
        assert sim.statistics().served == 6
        assert stats.program_calls == 6 and stats.sdk_calls == 6

    @pytest.mark.parametrize("source", [POOL, THREAD], ids=["pool", "thread"])
    async def test_in_a_worker_they_belong_to_its_call(
        self, tmp_path: Path, provider: Provider, sim: Simulator, source: str
    ) -> None:
        """A worker process runs one call at a time: its threads' calls are that
        example's, counted and priced into its observation."""
        results, _ = await _run(tmp_path, source, "process", provider.url, sim)
        for result in results:
            assert result.observation.llm_calls == 2, result.observation
            assert result.observation.cost_usd is not None and result.observation.cost_usd > 0
            assert result.observation.notes == ()

    @pytest.mark.parametrize(
        "source", [POOL, SHARED_POOL, THREAD], ids=["pool", "shared", "thread"]
    )
    async def test_in_the_engines_process_they_are_unmeasured_with_the_reason(
        self, tmp_path: Path, provider: Provider, sim: Simulator, source: str
    ) -> None:
        """A user thread in the engine's process cannot be tied to one example: the
        examples' cost is unmeasured, the note saying why, never $0."""
        results, stats = await _run(tmp_path, source, "thread", provider.url, sim)
        for result in results:
            assert result.observation.cost_usd is None, result.observation
            assert "from a thread that user code started" in _notes(result)
        assert stats.program_cost_usd is None

    async def test_concurrent_threads_of_one_worker_share_its_socket(
        self, tmp_path: Path, provider: Provider, sim: Simulator
    ) -> None:
        """Four threads of one worker in flight together: each gets its own reply."""
        results, _ = await _run(tmp_path, CONCURRENT, "process", provider.url, sim, n=2)
        for i, result in enumerate(results):
            assert result.output == [f"Echo: {k} question {i}" for k in range(4)]
            assert result.observation.llm_calls == 4
        assert provider.received == []

    async def test_the_loops_thread_pool_under_async_code(
        self, tmp_path: Path, provider: Provider, sim: Simulator
    ) -> None:
        """Async code running the sync client in the loop's default pool: its threads
        are started from the call, so the call is routed, counted, unmeasured."""
        results, stats = await _run(tmp_path, IN_EXECUTOR, "async", provider.url, sim)
        assert provider.received == []
        assert [r.output for r in results] == [[f"Echo: question {i}"] for i in range(3)]
        assert stats.sdk_calls == 3
        for result in results:
            assert result.observation.cost_usd is None
            assert "from a thread that user code started" in _notes(result)

    @pytest.mark.parametrize(
        ("source", "execution", "raised"),
        [
            (RAW_THREAD, "thread", "SimulatorOnly: "),
            (RAW_THREAD, "process", "SimulatorOnly: "),
            (SYNC_ON_THE_LOOP, "async", "APIConnectionError: "),
        ],
        ids=["raw-thread", "raw-process", "sync-client-on-the-loop"],
    )
    async def test_a_connection_past_the_simulator_is_refused(
        self,
        tmp_path: Path,
        provider: Provider,
        sim: Simulator,
        source: str,
        execution: str,
        raised: str,
    ) -> None:
        """http.client from a user thread to the provider's address, and a sync client
        inside ``async def`` (it cannot be routed, so it went out to the URL it names,
        with its key): refused before connecting, the provider sees nothing, the example
        is unmeasured with the reason."""
        results, _ = await _run(tmp_path, source, execution, provider.url, sim)
        assert provider.received == []
        for result in results:
            assert result.output.startswith(raised), result.output
            assert result.observation.cost_usd is None
            assert "refused under --simulator" in _notes(result)

    @pytest.mark.parametrize("execution", EXECUTIONS)
    async def test_urllib_from_a_thread_goes_no_further_than_the_simulator(
        self, tmp_path: Path, provider: Provider, sim: Simulator, execution: str
    ) -> None:
        """urllib from a user thread: refused in the engine's process; in a worker, which
        the engine started with the simulator as its proxy, sent to the simulator (which
        does not serve it). Never to the provider; unmeasured either way."""
        results, _ = await _run(tmp_path, URLLIB_THREAD, execution, provider.url, sim)
        assert provider.received == []
        for result in results:
            assert not result.output.startswith("reply"), result.output
            assert result.observation.cost_usd is None
            if execution == "thread":
                assert "skynet-eval refused a connection to 127.0.0.1" in result.output
                assert "refused under --simulator" in _notes(result)
            else:
                assert f"127.0.0.1:{sim.port} that no metered model call made" in _notes(result)


@pytest.mark.process
class TestSubprocessesUnderTheSimulator:
    @pytest.mark.parametrize("execution", EXECUTIONS)
    @pytest.mark.parametrize(
        ("source", "program"), [(SUBPROCESS, "python"), (POPEN, "/bin/sh")], ids=["run", "popen"]
    )
    async def test_a_child_gets_no_key_and_no_way_past_the_simulator(
        self,
        tmp_path: Path,
        provider: Provider,
        sim: Simulator,
        execution: str,
        source: str,
        program: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """A child posting to the provider with the key from its environment: it finds
        a placeholder, its request goes to the simulator (the proxy), the provider sees
        nothing, and the example that started it is unmeasured with the reason."""
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        results, _ = await _run(tmp_path, source, execution, provider.url, sim, n=2)
        assert provider.received == []
        for result in results:
            assert result.output["key"] == PLACEHOLDER
            assert result.output["outcome"] != "reply 200"
            assert result.observation.cost_usd is None
            named = os.path.basename(program)
            assert f"a process it started ({named}" in _notes(result), _notes(result)
        assert os.environ["OPENAI_API_KEY"] == SECRET  # given back when the run closed

    async def test_a_childs_sdk_is_served_by_the_simulator(
        self, tmp_path: Path, sim: Simulator, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A child's openai client, configured from its environment alone, reaches the
        simulator with the placeholder key."""
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
        results, _ = await _run(tmp_path, SDK_SUBPROCESS, "thread", "unused", sim, n=1)
        assert results[0].output == "Echo: from a child"
        assert results[0].observation.cost_usd is None
        assert "OPENAI_BASE_URL" not in os.environ


class TestThreadsWithoutTheSimulator:
    @pytest.mark.parametrize("execution", EXECUTIONS)
    async def test_never_a_measured_zero(
        self, tmp_path: Path, sim: Simulator, execution: str
    ) -> None:
        """Without the simulator (the model at its own URL), calls from threads are
        counted; the cost is measured where the call is known, unmeasured elsewhere."""
        results, stats = await _run(tmp_path, POOL, execution, sim.base_url, sim, simulated=False)
        assert stats.program_calls == 6
        for result in results:
            cost = result.observation.cost_usd
            if execution == "process":
                assert cost is not None and cost > 0
            else:
                assert cost is None and "cannot tie to one example" in _notes(result)

    async def test_a_thread_no_call_started_is_not_the_engines(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """The embedding application's own thread, calling a model while a run is open,
        is left alone: not routed, and no example is marked for it."""
        import openai

        program = write(tmp_path, "program.py", "def run(artifact, input):\n    return 1\n")
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with Evaluator(
            metric, program, program_execution="thread", models=Models(sdk_base_url=sim.base_url)
        ) as ev:
            got: list[str] = []

            def own() -> None:
                client = openai.OpenAI(base_url=sim.base_url, api_key="sk-app", max_retries=0)
                reply = client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "app"}]
                )
                got.append(str(reply.choices[0].message.content))

            await asyncio.to_thread(own)
            results = await ev.evaluate_many(None, examples(2))
            stats = ev.statistics().models
        assert got == ["Echo: app"]
        assert stats.sdk_calls == 0
        assert all(r.observation.cost_usd == 0.0 for r in results)


class TestTheEnvironment:
    @settings(max_examples=60, deadline=None)
    @given(
        names=st.lists(
            st.tuples(
                st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True),
                st.sampled_from(["_KEY", "_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_key"]),
            ).map("".join),
            min_size=1,
            max_size=5,
            unique_by=str.upper,
        ),
        value=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=8, max_size=40),
    )
    def test_no_secret_survives_and_all_come_back(self, names: list[str], value: str) -> None:
        """Whatever the secret-looking variables are called, none holds its value under
        the simulator, the SDKs' base URL and the proxies name it, and every variable is
        as it was afterwards."""
        before = dict(os.environ)
        url = "http://127.0.0.1:9/v1"
        try:
            for name in names:
                os.environ[name] = value
            inside_before = dict(os.environ)
            with simulated(url):
                for name in names:
                    assert os.environ[name] == PLACEHOLDER
                assert value not in os.environ.values()
                assert os.environ["OPENAI_BASE_URL"] == url
                # The proxies are the children's only: this process's clients are not sent
                # through the simulator (nor keep it as their proxy once the run is over).
                assert os.environ.get("HTTPS_PROXY") == before.get("HTTPS_PROXY")
            assert dict(os.environ) == inside_before
        finally:
            os.environ.clear()
            os.environ.update(before)


class TestTheSeal:
    def test_a_port_the_simulator_gave_back_is_not_allowed(self) -> None:
        """Once a run's simulator is gone its port is forgotten: the OS may hand it to a
        listener that is not a simulator (this class of break was seen here: a stand-in
        provider on a dead simulator's port was let through)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        _audit.seal("127.0.0.1", port)
        _audit.seal("127.0.0.1", port)  # two runs on one simulator
        _audit.unseal("127.0.0.1", port)
        assert ("127.0.0.1", port) in _audit._allowed
        _audit.unseal("127.0.0.1", port)
        assert ("127.0.0.1", port) not in _audit._allowed
        assert _audit._sealed == 0
