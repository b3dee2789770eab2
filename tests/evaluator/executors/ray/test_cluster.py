"""The driver's connection to Ray: bounded in time, and again when Ray Client's server for
it dies as it starts (issue 14). A stand-in for the ``ray`` module plays the cluster,
except in the last test, which checks the bound on Ray Client's own class."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from evaluator._exceptions import ConfigError
from evaluator._executors._ray import _cluster

# A real Ray instance or cluster (the mark implies slow).
pytestmark = pytest.mark.ray

#: The real one: the tests but the last replace it with a no-op.
bound_client_closes = _cluster._bound_client_closes
ADDRESS = "ray://127.0.0.1:10001"
#: What Ray Client's ``ray.init`` raised when the proxy's server for it died at birth
#: (the proxy's traceback, shortened).
SERVER_DIED = ConnectionAbortedError(
    "Initialization failure from server:\nTraceback (most recent call last):\n"
    '  File ".../ray/util/client/server/proxier.py", line 770, in Datapath\n'
    "RuntimeError: Starting Ray client server failed. See ray_client_server_23000.err "
    "for detailed logs.\n"
)


class FakeRay:
    """``ray.init`` raising the given errors in turn, then returning (or blocking)."""

    def __init__(self, *errors: BaseException, block: threading.Event | None = None) -> None:
        self.errors = list(errors)
        self.block = block
        self.calls: list[dict[str, Any]] = []
        self.threads: list[threading.Thread] = []
        self.connected = False

    def init(self, **options: Any) -> None:
        self.calls.append(options)
        self.threads.append(threading.current_thread())
        if self.errors:
            raise self.errors.pop(0)
        if self.block is not None:
            self.block.wait()
        self.connected = True

    def is_initialized(self) -> bool:
        return self.connected

    def shutdown(self) -> None:
        self.connected = False


@pytest.fixture(autouse=True)
def _no_leftovers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no unfinished connection; Ray's class is left alone. After
    it, every connecting thread it started ends (each waits for its connection to be
    shut down, which a test of ``_init_within`` alone never does), so that the tests
    after it that count threads find none of them."""
    monkeypatch.setattr(_cluster, "_unfinished", None)
    monkeypatch.setattr(_cluster, "_bound_client_closes", lambda: None)
    events: list[threading.Event] = []

    class Recorded(threading.Event):
        def __init__(self) -> None:
            super().__init__()
            events.append(self)

    class Threading:  # the module, as `_cluster` sees it, with its Events recorded
        Event = Recorded

        def __getattr__(self, name: str) -> Any:
            return getattr(threading, name)

    monkeypatch.setattr(_cluster, "threading", Threading())
    before = set(threading.enumerate())
    yield
    for event in events:
        event.set()
    for thread in set(threading.enumerate()) - before:
        if thread.name == "skynet-eval ray connection":
            thread.join(5)
            assert not thread.is_alive()


def test_a_connection_that_never_completes_is_an_error_in_bounded_time() -> None:
    """A ray.init that never returns is a ConfigError naming the address, what did not
    come and the limit, once the limit is up; a second connection is refused while the
    first still waits, rather than mixed with it."""
    release = threading.Event()
    ray = FakeRay(block=release)
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError) as raised:
            _cluster._init_within(ray, ADDRESS, 0.3)  # type: ignore[arg-type]
        assert 0.3 <= time.monotonic() - started < 5
        message = str(raised.value)
        assert ADDRESS in message and "within 0.3 s" in message
        assert "Ray Client's server did not accept the connection" in message
        assert raised.value.option == "ray_address"
        with pytest.raises(ConfigError, match="has not finished yet"):
            _cluster._init_within(ray, ADDRESS, 0.3)  # type: ignore[arg-type]
        assert len(ray.calls) == 1
    finally:
        release.set()


def test_the_thread_that_connects_lives_as_long_as_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread that ran ray.init lives until release shuts the connection down: Ray
    kills a local instance's processes when the thread that started them ends."""
    ray = FakeRay()
    monkeypatch.setattr(_cluster, "import_ray", lambda: ray)
    monkeypatch.setattr(_cluster, "_state", _cluster._State())
    connection = _cluster.connect(None)
    assert connection.local and ray.connected
    (thread,) = ray.threads
    time.sleep(0.2)
    assert thread.is_alive() and thread is not threading.current_thread()
    _cluster.release()
    thread.join(5)
    assert not thread.is_alive() and not ray.connected


def test_a_local_instance_that_does_not_start_is_an_execution_error() -> None:
    """Without an address the error is the execution option's: the local instance did
    not start in time."""
    release = threading.Event()
    try:
        with pytest.raises(ConfigError, match="a local Ray instance did not start") as raised:
            _cluster._init_within(FakeRay(block=release), None, 0.2)  # type: ignore[arg-type]
        assert raised.value.option == "execution"
    finally:
        release.set()


#: The same, when the server died between the proxy's poll() and its look at the
#: server's command line.
SERVER_VANISHED = ConnectionAbortedError(
    "Initialization failure from server:\nTraceback (most recent call last):\n"
    '  File ".../ray/util/client/server/proxier.py", line 396, in start_specific_server\n'
    "    cmd = psutil_proc.cmdline()\n"
    "psutil.ZombieProcess: PID still exists but it's a zombie (pid=22440)\n"
)


@pytest.mark.parametrize("died", [SERVER_DIED, SERVER_VANISHED], ids=["failed", "zombie"])
def test_a_client_server_that_died_as_it_started_is_made_again(
    died: ConnectionAbortedError, caplog: pytest.LogCaptureFixture
) -> None:
    """The proxy's "Starting Ray client server failed" (or psutil's ZombieProcess from
    its start_specific_server) is followed by a new connection (a new server), with a
    warning saying so; the run goes on."""
    ray = FakeRay(died)
    with caplog.at_level(logging.WARNING, logger="evaluator.ray"):
        _cluster._init_within(ray, ADDRESS, 10)  # type: ignore[arg-type]
    assert [call["address"] for call in ray.calls] == [ADDRESS, ADDRESS]
    assert "connecting again (2 of 3)" in caplog.text


def test_a_client_server_that_dies_every_time_is_a_clear_error() -> None:
    """After CLIENT_ATTEMPTS servers that died at birth, a ConfigError that says so and
    where the head node logs why."""
    ray = FakeRay(*[SERVER_DIED] * _cluster.CLIENT_ATTEMPTS)
    with pytest.raises(ConfigError) as raised:
        _cluster._init_within(ray, ADDRESS, 10)  # type: ignore[arg-type]
    assert len(ray.calls) == _cluster.CLIENT_ATTEMPTS == 3
    message = str(raised.value)
    assert "exited as it started, 3 times" in message
    assert "last: RuntimeError: Starting Ray client server failed" in message
    assert "ray_client_server_PORT.err" in message


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError("ray client connection timeout"),
        # A server that could not start for a reason of its own: no second try.
        ConnectionAbortedError(
            'Initialization failure from server:\n  File "proxier.py", line 360, in '
            "start_specific_server\nRuntimeError: Failed to create runtime_env for Ray "
            "client server"
        ),
    ],
    ids=["unreachable", "runtime-env"],
)
def test_other_connection_errors_are_not_tried_again(error: ConnectionError) -> None:
    """A cluster that cannot be reached, or a server that cannot start for a reason of
    its own, is an error at once: only a server that died as it started is worth a
    second connection."""
    ray = FakeRay(error)
    with pytest.raises(ConfigError, match=f"cannot be reached: {type(error).__name__}"):
        _cluster._init_within(ray, ADDRESS, 10)  # type: ignore[arg-type]
    assert len(ray.calls) == 1


@pytest.mark.parametrize("kind", ["log", "data"])
def test_closing_a_ray_client_stream_waits_a_bounded_time(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray Client's LogstreamClient.close and DataClient.close wait for their stream's
    thread with no limit (what hung the failed connections); once bounded they return
    after CLIENT_CLOSE_S, and Ray's own close still ran (it queued the end of the
    request stream)."""
    pytest.importorskip("grpc")  # Ray Client: the extra ray[client]
    from ray.util.client.dataclient import DataClient
    from ray.util.client.logsclient import LogstreamClient

    for cls in (LogstreamClient, DataClient):
        monkeypatch.setattr(cls, "close", cls.close)  # restored after the test
    monkeypatch.setattr(_cluster, "_closes_bounded", False)
    monkeypatch.setattr(_cluster, "CLIENT_CLOSE_S", 0.3)
    stuck = threading.Event()

    def client() -> Any:
        """A stream client as Ray's close sees it, its thread stuck on the stream."""
        thread = threading.Thread(target=stuck.wait, daemon=True)
        thread.start()
        if kind == "log":
            log: Any = object.__new__(LogstreamClient)
            log.request_queue, log.log_thread = queue.Queue(), thread
            return log
        data: Any = object.__new__(DataClient)
        data.lock = threading.Lock()
        data.cv = threading.Condition(lock=data.lock)
        data._in_shutdown, data.request_queue, data.data_thread = False, queue.Queue(), thread
        return data

    try:
        unbounded = client()
        closer = threading.Thread(target=unbounded.close, daemon=True)
        closer.start()
        closer.join(1.0)
        assert closer.is_alive(), "Ray's close returned: the bound may be dropped"

        bound_client_closes()
        bounded = client()
        started = time.monotonic()
        bounded.close()
        assert 0.3 <= time.monotonic() - started < 3
        queued = [bounded.request_queue.get_nowait() for _ in range(bounded.request_queue.qsize())]
        assert queued[-1] is None
    finally:
        stuck.set()
