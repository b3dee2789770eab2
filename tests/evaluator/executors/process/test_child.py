"""The worker process's own loop, driven over its socket by the test as the engine would."""

from __future__ import annotations

import mmap
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec
import pytest

from evaluator._call._calls import RunCall, ScoreCall
from evaluator._executors._process import _pool
from evaluator._executors._process._wire import (
    BATCH,
    EXIT_FATAL,
    EXIT_MEMORY,
    FATAL,
    HEADER,
    INDEX,
    KIND_PICKLE,
    KIND_PICKLED_RESULT,
    KIND_RESULT,
    LLM,
    LLM_REPLY,
    PICKLE_PROTOCOL,
    READY,
    RESULT_HEADER,
    SEQ,
    START,
    STATE_SLOTS,
    STOP,
    ResultMsg,
    WorkerInit,
    call_row,
    control,
)
from llm_client import LLMError

METRIC = """
import os, sys, time
from pathlib import Path
from skynet import llm

def score(input, output, expected=None):
    mode = input["mode"]
    if mode == "modules":
        names = sorted(m for m in sys.modules if m.split(".")[0] in ("evaluator", "llm_client", "asyncio"))
        return 1.0, {"feedback": " ".join(names)}
    if mode == "raise":
        raise ValueError(f"bad {input['i']}")
    if mode == "wait":
        marker = Path(input["marker"])
        while not marker.exists():
            time.sleep(0.005)
    if mode == "llm":
        return 1.0, {"feedback": llm("judge", input=str(output))}
    if mode == "memory":
        block = bytearray(1024 * 1024 * 1024)
        return float(len(block)), {"feedback": "allocated"}
    return float(output == expected), {"feedback": "ok", "pid": os.getpid()}
"""

PROGRAM = """
def run(artifact, input):
    if input == "raise":
        raise RuntimeError("program failed")
    return f"{artifact}:{input}"
"""


class Worker:
    """One worker process, started as the pool starts it, and its socket's other end."""

    def __init__(self, path: Path, name: str, stage: Literal["run", "score"], **init: Any) -> None:
        ours, theirs = socket.socketpair()
        state_fd = _pool._state_fd()
        self.state_map = mmap.mmap(state_fd, STATE_SLOTS * 8)
        self.state = memoryview(self.state_map).cast("q")
        argv = [sys.executable, "-c", _pool._BOOT, _pool._ROOT]
        argv += [str(theirs.fileno()), str(state_fd), str(os.getpid())]
        self.proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(), state_fd))
        theirs.close()
        os.close(state_fd)
        self.sock = ours
        self.sock.settimeout(30)
        self.buf = bytearray()
        options: dict[str, Any] = {"has_llm": False, "memory_limit_mb": None, **init}
        self.send(
            pickle.dumps(
                WorkerInit(
                    sys_path=list(sys.path), path=str(path), name=name, stage=stage, **options
                ),
                PICKLE_PROTOCOL,
            )
        )

    def send(self, body: bytes) -> None:
        self.sock.sendall(HEADER.pack(len(body), KIND_PICKLE) + body)

    def recv(self) -> tuple[int, bytes]:
        while True:
            if len(self.buf) >= HEADER.size:
                length, kind = HEADER.unpack_from(self.buf)
                if len(self.buf) >= HEADER.size + length:
                    body = bytes(self.buf[HEADER.size : HEADER.size + length])
                    del self.buf[: HEADER.size + length]
                    return kind, body
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("the worker closed its socket")
            self.buf += data

    def control(self) -> Any:
        kind, body = self.recv()
        assert kind == KIND_PICKLE
        return pickle.loads(body)

    def batch(self, seq: int, calls: list[Any]) -> None:
        self.send(control(BATCH, seq, [call_row(c) for c in calls]))

    def results(self) -> list[Any]:
        """The outcomes of one batch, across its partial flushes, up to the final one."""
        outcomes: list[Any] = []
        while True:
            kind, body = self.recv()
            if kind == KIND_RESULT:
                msg = msgspec.msgpack.decode(body, type=ResultMsg)
                outcomes += msg.outcomes
                final = msg.final
            else:
                assert kind == KIND_PICKLED_RESULT
                *_, final, _count = RESULT_HEADER.unpack_from(body)
                outcomes += pickle.loads(body[RESULT_HEADER.size :])
            if final:
                return outcomes

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.state.release()
            self.state_map.close()


@pytest.fixture
def metric(tmp_path: Path) -> Path:
    path = tmp_path / "metric.py"
    path.write_text(textwrap.dedent(METRIC))
    return path


@pytest.fixture
def worker(metric: Path) -> Iterator[Worker]:
    w = Worker(metric, "score", "score")
    yield w
    w.close()


def _score(i: int, mode: str = "ok", output: Any = "a", **extra: Any) -> ScoreCall:
    return ScoreCall(i, f"e{i}", {"mode": mode, "i": i, **extra}, output, "a")


def _kinds(outcomes: list[Any]) -> list[str]:
    return [o.error.kind if o.error else "ok" for o in outcomes]


class TestStartUp:
    def test_ready_after_loading_and_lean(self, worker: Worker) -> None:
        """A worker reports ready with its pid once the file is loaded, and its boot
        imported neither the engine's event-loop side nor the model client (of
        ``llm_client``, only the token counts a result holds)."""
        assert worker.control() == (READY, worker.proc.pid)
        worker.batch(1, [_score(0, "modules")])
        (outcome,) = worker.results()
        loaded = outcome.value.feedback.split()
        assert "evaluator._executors._process._child" in loaded
        for heavy in (
            "asyncio",
            "llm_client._client",
            "evaluator._pipeline",
            "evaluator._executors._process._pool",
            "evaluator._executors._process._executor",
            "evaluator._models",
        ):
            assert heavy not in loaded, loaded
        assert {m for m in loaded if m.startswith("llm_client")} <= {
            "llm_client",
            "llm_client._usage",
            "llm_client._wire",
        }, loaded

    def test_a_file_that_cannot_load_is_fatal(self, tmp_path: Path) -> None:
        """A file that fails to import in the worker is reported with its cause, and the
        worker exits with EXIT_FATAL."""
        bad = tmp_path / "bad.py"
        bad.write_text("raise RuntimeError('not here')\ndef score(i, o, e=None): ...\n")
        w = Worker(bad, "score", "score")
        try:
            tag, message = w.control()
            assert tag == FATAL and "not here" in message and str(bad) in message
            assert w.proc.wait(10) == EXIT_FATAL
        finally:
            w.close()


class TestBatches:
    def test_score_outcomes_in_order_as_msgpack(self, worker: Worker) -> None:
        """A batch of score calls comes back in order, as msgpack, each with its kind."""
        worker.control()
        calls = [_score(0), _score(1, output="b"), _score(2, "raise"), _score(3)]
        worker.batch(7, calls)
        outcomes = worker.results()
        assert _kinds(outcomes) == ["ok", "ok", "metric_error", "ok"]
        assert [o.value.score for o in outcomes if o.value] == [1.0, 0.0, 1.0]
        assert "bad 2" in outcomes[2].error.message
        assert all(o.ended_ns >= o.started_ns > 0 for o in outcomes)

    def test_run_outcomes_are_pickled(self, tmp_path: Path) -> None:
        """The run stage's outputs, any picklable value, come back pickled."""
        path = tmp_path / "program.py"
        path.write_text(PROGRAM)
        w = Worker(path, "run", "run")
        try:
            w.control()
            w.batch(1, [RunCall(0, 0, "v1", "x"), RunCall(1, 1, "v1", "raise")])
            outcomes = w.results()
            assert outcomes[0].value == "v1:x"
            assert _kinds(outcomes) == ["ok", "program_error"]
        finally:
            w.close()

    def test_the_running_call_is_published(self, worker: Worker, tmp_path: Path) -> None:
        """While a call runs, the shared state holds its batch, its index and its start;
        between calls the start is 0."""
        worker.control()
        marker = tmp_path / "go"
        worker.batch(5, [_score(0), _score(1, "wait", marker=str(marker))])
        deadline = time.monotonic() + 20
        while worker.state[START] == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert (worker.state[SEQ], worker.state[INDEX]) == (5, 1)
        assert 0 < worker.state[START] <= time.perf_counter_ns()
        marker.write_text("")
        assert _kinds(worker.results()) == ["ok", "ok"]
        assert worker.state[START] == 0

    def test_stop_and_hang_up_end_the_worker(self, metric: Path) -> None:
        """STOP makes a worker exit 0; so does the engine closing its end of the socket."""
        w = Worker(metric, "score", "score")
        try:
            w.control()
            w.send(control(STOP))
            assert w.proc.wait(10) == 0
        finally:
            w.close()
        w = Worker(metric, "score", "score")
        w.control()
        w.sock.close()
        assert w.proc.wait(10) == 0
        w.close()

    def test_memory_error_under_the_limit_reports_and_exits(self, metric: Path) -> None:
        """MemoryError under memory_limit_mb: the call's outcome is worker_crash naming the
        limit, sent before the worker exits with EXIT_MEMORY."""
        w = Worker(metric, "score", "score", memory_limit_mb=300)
        try:
            w.control()
            w.batch(1, [_score(0), _score(1, "memory"), _score(2)])
            outcomes = _until_exit(w)
            assert _kinds(outcomes) == ["ok", "worker_crash"]
            assert "memory limit of 300 MB exceeded" in outcomes[1].error.message
            assert w.proc.wait(10) == EXIT_MEMORY
        finally:
            w.close()


def _until_exit(w: Worker) -> list[Any]:
    """The outcomes a worker sends before it closes its socket."""
    outcomes: list[Any] = []
    while True:
        try:
            kind, body = w.recv()
        except EOFError:
            return outcomes
        outcomes += (
            msgspec.msgpack.decode(body, type=ResultMsg).outcomes if kind == KIND_RESULT else []
        )


class TestModelRelay:
    def test_llm_is_relayed_and_other_messages_wait(self, metric: Path) -> None:
        """skynet.llm in a worker sends the request with the call's token and stage and
        blocks until its reply; a batch sent meanwhile runs after the call."""
        w = Worker(metric, "score", "score", has_llm=True)
        try:
            w.control()
            w.batch(1, [_score(41, "llm", output="good")])
            tag, request, token, stage, instruction, input, options = w.control()
            assert (tag, token, stage, instruction, input, options) == (
                LLM,
                41,
                "score",
                "judge",
                "good",
                {},
            )
            w.batch(2, [_score(42)])  # arrives while the call waits for its reply
            w.send(control(LLM_REPLY, request, True, "PASS"))
            (first,) = w.results()
            (second,) = w.results()
            assert first.value.feedback == "PASS" and second.error is None
        finally:
            w.close()

    def test_a_relayed_llm_error_arrives_whole(self, metric: Path) -> None:
        """A failed model call crosses as the pickled LLMError: the call is llm_error and
        the message keeps the status."""
        w = Worker(metric, "score", "score", has_llm=True)
        try:
            w.control()
            w.batch(1, [_score(0, "llm")])
            _, request, *_ = w.control()
            error = LLMError("quota exceeded", status=429, model="judge", retries=2)
            payload = (pickle.dumps(error, PICKLE_PROTOCOL), f"LLMError: {error}")
            w.send(control(LLM_REPLY, request, False, payload))
            (outcome,) = w.results()
            assert outcome.error.kind == "llm_error"
            assert "HTTP 429: quota exceeded" in outcome.error.message
        finally:
            w.close()

    def test_an_error_that_cannot_cross_becomes_its_text(self, metric: Path) -> None:
        """An engine-side error that does not unpickle arrives as a RuntimeError with its
        text: the call fails as the metric's own error, saying what happened."""
        w = Worker(metric, "score", "score", has_llm=True)
        try:
            w.control()
            w.batch(1, [_score(0, "llm")])
            _, request, *_ = w.control()
            w.send(control(LLM_REPLY, request, False, (b"not a pickle", "KeyError: 'x'")))
            (outcome,) = w.results()
            assert outcome.error.kind == "metric_error"
            assert "RuntimeError: KeyError: 'x'" in outcome.error.message
        finally:
            w.close()
