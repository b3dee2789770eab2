"""Never $0 for what was not measured: connections around the metered paths, seen by the
audit hook in the engine and in workers; a program with no model call costs a measured $0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evaluator import Evaluator
from evaluator._call._context import CallContext, call_context
from evaluator._sdk import _audit
from llm_client import Simulator, SimulatorConfig
from tests._helpers import PROCESS, write

from .conftest import ACCEPT, examples

RAW_HTTP = """
import json
import urllib.request

def run(artifact, input):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": input["q"]}]})
    request = urllib.request.Request(
        artifact + "/chat/completions", data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as reply:
        return json.loads(reply.read())["choices"][0]["message"]["content"]
"""

#: One connection kept open for the whole run: only the first example connects.
KEEP_ALIVE = """
import http.client
import json
from urllib.parse import urlsplit

_conn = None

def run(artifact, input):
    global _conn
    if _conn is None:
        parts = urlsplit(artifact)
        _conn = http.client.HTTPConnection(parts.hostname, parts.port)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": input["q"]}]})
    _conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    return json.loads(_conn.getresponse().read())["choices"][0]["message"]["content"]
"""

REWARD_METRIC = """
from skynet import reward

SPEC = {
    "weights": {"accuracy": 0.5, "speed": 0.0, "cost": 0.5},
    "accuracy": {},
    "speed": {"reference": 1000},
    "cost": {"reference": 0.01},
}

def score(input, output, expected=None):
    return reward(SPEC, 1.0, "Fine.")
"""


class TestUnmeasured:
    @pytest.mark.parametrize("execution", ["thread", PROCESS])
    async def test_raw_http_is_unmeasured_with_the_host_named(
        self, tmp_path: Path, execution: str
    ) -> None:
        """A program that calls a model over raw HTTP: its cost is None with a note naming
        the host, the reward's cost part is 0 with that reason, the report says
        unmeasured."""
        program = write(tmp_path, "program.py", RAW_HTTP)
        metric = write(tmp_path, "metric.py", REWARD_METRIC)
        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(
                metric, program, execution="inline", program_execution=execution, timeout=60
            ) as ev,
        ):
            results = await ev.evaluate_many(sim.base_url, examples(3))
            report = await ev.evaluate(sim.base_url, examples(2))
        host = f"127.0.0.1:{sim.port}"
        for result in results:
            assert result.output.startswith("Echo: question")
            assert result.observation.cost_usd is None
            assert any(host in note for note in result.observation.notes), result
            assert result.scores["cost"] == 0.0
            assert "cost 0 (cost not measured: a network connection to " + host in result.feedback
        assert report.program_cost_usd is None and report.program_cost_unmeasured == 2

    async def test_a_kept_open_connection_keeps_later_examples_unmeasured(
        self, tmp_path: Path
    ) -> None:
        """Only the first example opens the connection; every later one reuses it unseen,
        and is unmeasured too, the note saying why."""
        program = write(tmp_path, "program.py", KEEP_ALIVE)
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(
                metric,
                program,
                execution="inline",
                program_execution="thread",
                workers=1,
                timeout=60,
            ) as ev,
        ):
            first = await ev.evaluate_many(sim.base_url, examples(1))
            later = await ev.evaluate_many(sim.base_url, examples(3))
            assert ev.program is not None and ev.program.module is not None
            ev.program.module._conn.close()  # the program's own connection, kept open
        assert sim.statistics().served == 4
        assert first[0].observation.cost_usd is None
        assert "that no metered model call made" in first[0].observation.notes[0]
        for result in later:
            assert result.observation.cost_usd is None
            assert "seen earlier in this run" in " ".join(result.observation.notes)

    @pytest.mark.parametrize("execution", ["thread", PROCESS, "inline", "async"])
    async def test_no_model_call_is_a_measured_zero(self, tmp_path: Path, execution: str) -> None:
        """A program that makes no model call and opens no connection costs $0, measured."""
        source = (
            "async def run(artifact, input):\n    return input['q'].upper()\n"
            if execution == "async"
            else "def run(artifact, input):\n    return input['q'].upper()\n"
        )
        program = write(tmp_path, "program.py", source)
        metric = write(tmp_path, "metric.py", REWARD_METRIC)
        async with Evaluator(
            metric, program, execution="inline", program_execution=execution, timeout=60
        ) as ev:
            results = await ev.evaluate_many(None, examples(3))
        for result in results:
            assert result.observation.cost_usd == 0.0 and result.observation.notes == ()
            assert result.scores["cost"] == 1.0


class _Recorder:
    """A bridge that records what the hook tells it (the hook's dispatch is under test)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def note_bypass(self, what: str) -> None:
        self.notes.append(what)


class TestHook:
    def test_reports_only_inside_a_call_and_outside_engine_io(self, sim_socket: Any) -> None:
        """A connect is reported only while a user call runs and not under engine_io, and
        names host and port; a Unix socket is never reported."""
        import socket

        recorder = _Recorder()
        host, port = sim_socket
        _audit.activate()
        try:
            socket.create_connection((host, port)).close()  # no call: nothing
            with call_context(CallContext("e1", "run", None, recorder)):
                with _audit.engine_io():
                    socket.create_connection((host, port)).close()  # the engine's own
                socket.create_connection((host, port)).close()  # the user's
                left, right = socket.socketpair()
                left.close()
                right.close()
        finally:
            _audit.deactivate()
        assert recorder.notes == [
            f"a network connection to {host}:{port} that no metered model call made"
        ]

    def test_quiet_while_no_evaluator_is_open(self, sim_socket: Any) -> None:
        """With nothing active, the hook reports nothing even inside a call context."""
        import socket

        recorder = _Recorder()
        with call_context(CallContext("e1", "run", None, recorder)):
            socket.create_connection(sim_socket).close()
        assert recorder.notes == []


@pytest.fixture
def sim_socket() -> Any:
    """A listening socket on 127.0.0.1 to connect to."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[:2]
    finally:
        server.close()
