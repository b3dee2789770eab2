"""The driver's connection to Ray, the nodes it can use, and what it ships to them.

``ray.init`` is process-wide, so the connection is too: every Ray executor of the
process (the program's and the metric's, several Evaluators) shares it, counted by
:func:`connect` and :func:`release`. With no address the engine starts a local instance
and shuts it down when its last executor closes; with an address it connects (and
disconnects at the end, leaving the cluster running). When Ray was already initialised
in the process by someone else (a script that runs on Ray, the tests), that connection is
used as it is and never shut down.

Both calls block (starting a local instance takes seconds): the executor runs them in a
thread. Connecting is bounded: ``ray.init`` runs in a daemon thread of its own and
:func:`connect` gives up after :data:`CONNECT_TIMEOUT_S` with an error that says what it
waited for, so a connection Ray never completes is never a silent hang (nor one that
keeps the process from exiting). That thread lives as long as the connection: Ray starts
a local instance's processes with ``PR_SET_PDEATHSIG``, which kills them when the
*thread* that started them ends (a thread that returned after ``ray.init`` took the
instance's GCS with it: "Failed to connect to GCS within 60 seconds").

Ray Client (``ray://``) has a fault of its own, worked around here (issue 14). Its proxy
on the head node starts a server process per client with ``subprocess.Popen`` and a
``preexec_fn``, from a gRPC handler thread; ``preexec_fn`` makes CPython run the at-fork
handlers, Python code, in the child of a process full of gRPC threads, and that child
now and then dies of a segmentation fault before it executes anything (seen in
``threading``'s ``_at_fork_reinit``, in ``filelock``'s at-fork handler, in
``_fork_exec``): on this repository's two-core machine, 5 first connections in 27 after
``ray start``, more under load. The proxy then answers the client "Starting Ray client
server failed" (or psutil's ``ZombieProcess``, when the child died between its two looks
at it), but Ray's client, closing the failed connection, joins its streams' threads with
no timeout while the proxy holds them open: the data stream for the reconnect grace
period (30 s), the log stream until it gives up waiting for the dead server's channel
(``RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S``, 30 s by default, 120 s in the tests).
``ray.init`` hung that long, silently. So, for a ``ray://`` address, closing each stream
waits at most :data:`CLIENT_CLOSE_S` (the threads are daemons, and the client closes the
channel right after, which ends them), and a connection whose server died as it started
is made again, :data:`CLIENT_ATTEMPTS` times in all: each is a new server.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..._exceptions import ConfigError

__all__ = [
    "CLIENT_ATTEMPTS",
    "CLIENT_CLOSE_S",
    "CONNECT_TIMEOUT_S",
    "Connection",
    "NodeInfo",
    "alive_nodes",
    "connect",
    "import_ray",
    "release",
]

log = logging.getLogger("evaluator.ray")

#: ``ray.init`` (every Ray Client attempt included) gives up after this long: well past
#: what Ray itself allows a connection (its client's channel retries, the proxy's 30 s
#: for a client's server), so that only a connection that will never complete hits it.
CONNECT_TIMEOUT_S = 180.0
#: Ray Client: connections made in all when the cluster's server for one died as it
#: started (see the module docstring).
CLIENT_ATTEMPTS = 3
#: Ray Client: closing a connection waits at most this long for each stream's thread.
CLIENT_CLOSE_S = 5.0
#: What Ray Client's proxy answers when the server it started for a client died at once:
#: its own words, or psutil's when the server died between the proxy's two looks at it.
SERVER_DIED = "Starting Ray client server failed"
SERVER_VANISHED = ("in start_specific_server", ("ZombieProcess", "NoSuchProcess"))

_FIX_ADDRESS = (
    "start a cluster with `ray start --head` (it prints the address to use; on its "
    "machine 'auto' finds it), set RAY_AUTH_MODE=token if the cluster uses Ray's token "
    "authentication (the default of `ray start`), or leave `ray_address` unset for a "
    "local instance"
)


def import_ray() -> ModuleType:
    """The ``ray`` module, or a ``ConfigError`` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            f"is 'ray' but Ray is not installed ({exc}); install it with "
            "`pip install 'skynet-eval[ray]'`",
            option="execution",
            value="ray",
        ) from None
    return ray


@dataclass(frozen=True, slots=True)
class Connection:
    """The process's connection to Ray, as one executor sees it."""

    local: bool
    """The engine started the instance here: the nodes see this machine's files."""


@dataclass(slots=True)
class _State:
    users: int = 0
    owned: bool = False
    local: bool = False
    address: str | None = None


_lock = threading.Lock()
_state = _State()
#: Set when a ``ray.init`` given up on returns (it cannot be stopped).
_unfinished: threading.Event | None = None
#: Set when the connection the engine opened is shut down: the thread that opened it
#: waits for it (see the module docstring).
_closed = threading.Event()


def connect(address: str | None) -> Connection:
    """Join (or open) the process's connection to Ray; blocks. Pair with :func:`release`.

    Raises ``ConfigError`` (option ``ray_address``) when the cluster cannot be reached,
    or when the process is already connected to another address.
    """
    ray = import_ray()
    with _lock:
        state = _state
        if state.users == 0 and not ray.is_initialized():
            _init_within(ray, address, CONNECT_TIMEOUT_S)
            state.owned, state.local, state.address = True, address is None, address
        elif state.owned and address != state.address:
            raise ConfigError(
                f"is {address!r} but this process is already connected to "
                f"{state.address or 'a local instance'!r}: one process talks to one Ray "
                "cluster; use the same `ray_address` for every executor",
                option="ray_address",
                value=address,
            )
        state.users += 1
        return Connection(local=state.local)


def _init_within(ray: ModuleType, address: str | None, limit: float) -> None:
    """:func:`_init` in a daemon thread, given up after ``limit`` seconds with a
    ``ConfigError`` that says what did not come: the call itself cannot be stopped, and
    a daemon thread left waiting on it keeps neither this call nor the exit waiting.
    Connected, the thread waits until :func:`release` shuts the connection down."""
    global _unfinished, _closed
    if _unfinished is not None and not _unfinished.is_set():
        raise _error(
            address,
            "an earlier connection to Ray in this process has not finished yet (it was "
            f"given up after {limit:g} s)",
        )
    outcome: list[BaseException | None] = []
    answered = threading.Event()
    closed = _closed = threading.Event()

    def run() -> None:
        try:
            _init(ray, address)
        except BaseException as exc:
            outcome.append(exc)
            answered.set()
            return
        outcome.append(None)
        answered.set()
        closed.wait()  # the processes Ray started from this thread live while it does

    thread = threading.Thread(target=run, name="skynet-eval ray connection", daemon=True)
    thread.start()
    answered.wait(limit)
    if not outcome:
        _unfinished = answered
        if address is None:
            waited = "a local Ray instance did not start"
        elif address.startswith("ray://"):
            waited = (
                "Ray Client's server did not accept the connection (the head node's "
                "ray_client_server*.err in its /tmp/ray/session_latest/logs say why)"
            )
        else:
            waited = "the cluster did not accept the connection"
        raise _error(address, f"{waited} within {limit:g} s (ray.init did not return)")
    error = outcome[0]
    if error is not None:
        raise error


def _error(address: str | None, problem: str) -> ConfigError:
    if address is None:
        return ConfigError(f"is 'ray' but {problem}", option="execution", value="ray")
    return ConfigError(
        f"{address!r}: {problem}; {_FIX_ADDRESS}", option="ray_address", value=address
    )


def _init(ray: ModuleType, address: str | None) -> None:
    options: dict[str, Any] = {
        "include_dashboard": False,
        "logging_level": logging.ERROR,
        # The actors' output (the user's prints, in their worker processes) reaches the
        # driver's terminal, as the process executor's workers' does.
        "log_to_driver": True,
    }
    try:
        if address is None:
            # "local", not None: None would join a cluster `ray start` left recorded
            # on this machine, even a dead one.
            ray.init(address="local", **options)
        elif address.startswith("ray://"):
            _init_client(ray, address, options)
        else:
            ray.init(address=address, **options)
    except _ClientServerDied as died:
        raise _error(
            address,
            f"Ray Client's server for this connection exited as it started, "
            f"{died.attempts} times (last: {died.last}; the head node's "
            "ray_client_server_PORT.err in its /tmp/ray/session_latest/logs say why, an "
            "empty one is a crash before it ran)",
        ) from None
    except (ConnectionError, ValueError, RuntimeError) as exc:
        if address is None:
            raise _error(address, f"a local Ray instance could not start: {exc}") from None
        raise _error(address, f"cannot be reached: {type(exc).__name__}: {exc}") from None


class _ClientServerDied(Exception):
    def __init__(self, attempts: int, last: str) -> None:
        super().__init__(attempts, last)
        self.attempts = attempts
        self.last = last


def _server_died(message: str) -> bool:
    """Whether Ray Client's init failed because its server died as the proxy started it."""
    where, errors = SERVER_VANISHED
    return SERVER_DIED in message or (where in message and any(e in message for e in errors))


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1] if lines else message


def _init_client(ray: ModuleType, address: str, options: dict[str, Any]) -> None:
    """``ray.init`` through Ray Client, again while the proxy's server for the
    connection dies as it starts (see the module docstring)."""
    _bound_client_closes()
    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            ray.init(address=address, **options)
            return
        except ConnectionError as exc:
            if not _server_died(str(exc)):
                raise
            if attempt == CLIENT_ATTEMPTS:
                raise _ClientServerDied(attempt, _last_line(str(exc))) from exc
            log.warning(
                "Ray Client at %s: the cluster's server for this connection exited as it "
                "started (a fault of Ray Client's proxy); connecting again (%d of %d)",
                address,
                attempt + 1,
                CLIENT_ATTEMPTS,
            )


_closes_bounded = False


def _bound_client_closes() -> None:
    """Make Ray Client's ``LogstreamClient.close`` and ``DataClient.close`` wait at most
    ``CLIENT_CLOSE_S`` for their stream's thread (Ray's own closes wait with no timeout,
    for as long as the proxy holds the stream open: the log stream while it waits for a
    dead server's channel, the data stream for the reconnect grace period, 30 s).

    Ray's close still runs, unchanged, in a daemon thread; only the wait is bounded. The
    stream threads are daemons too, and the client closes the channel right after,
    which ends the streams and their threads.
    """
    global _closes_bounded
    if _closes_bounded:
        return
    try:
        from ray.util.client.dataclient import DataClient
        from ray.util.client.logsclient import LogstreamClient
    except ImportError:  # a Ray without its client: its own error comes from ray.init
        return
    classes: tuple[Any, ...] = (LogstreamClient, DataClient)
    for cls in classes:
        cls.close = _bounded(cls.close)
    _closes_bounded = True


def _bounded(close: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(close)
    def bounded_close(self: Any) -> None:
        name = f"skynet-eval {type(self).__name__}.close"
        closer = threading.Thread(target=close, args=(self,), name=name, daemon=True)
        closer.start()
        closer.join(CLIENT_CLOSE_S)

    return bounded_close


def release() -> None:
    """Leave the connection; the last one out shuts down what the engine opened. Blocks."""
    ray = import_ray()
    with _lock:
        state = _state
        state.users = max(0, state.users - 1)
        if state.users == 0 and state.owned:
            state.owned = state.local = False
            state.address = None
            try:
                ray.shutdown()
            finally:
                _closed.set()


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node the executor can place an actor on."""

    node_id: str
    address: str
    cpus: int


def alive_nodes() -> list[NodeInfo]:
    """The cluster's alive nodes with at least one CPU, as Ray reports them; blocks."""
    ray = import_ray()
    nodes: list[NodeInfo] = []
    for node in ray.nodes():
        cpus = int(node.get("Resources", {}).get("CPU", 0))
        if node.get("Alive") and cpus >= 1:
            nodes.append(NodeInfo(node["NodeID"], str(node.get("NodeManagerAddress", "?")), cpus))
    return nodes
