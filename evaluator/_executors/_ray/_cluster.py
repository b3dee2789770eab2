"""The driver's connection to Ray, the nodes it can use, and what it ships to them.

``ray.init`` is process-wide, so the connection is too: every Ray executor of the
process (the program's and the metric's, several Evaluators) shares it, counted by
:func:`connect` and :func:`release`. With no address the engine starts a local instance
and shuts it down when its last executor closes; with an address it connects (and
disconnects at the end, leaving the cluster running). When Ray was already initialised
in the process by someone else (a script that runs on Ray, the tests), that connection is
used as it is and never shut down.

Both calls block (starting a local instance takes seconds): the executor runs them in a
thread.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..._exceptions import ConfigError

__all__ = ["Connection", "NodeInfo", "alive_nodes", "connect", "import_ray", "release"]

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


def connect(address: str | None) -> Connection:
    """Join (or open) the process's connection to Ray; blocks. Pair with :func:`release`.

    Raises ``ConfigError`` (option ``ray_address``) when the cluster cannot be reached,
    or when the process is already connected to another address.
    """
    ray = import_ray()
    with _lock:
        state = _state
        if state.users == 0 and not ray.is_initialized():
            _init(ray, address)
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
        else:
            ray.init(address=address, **options)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        if address is None:
            raise ConfigError(
                f"is 'ray' but a local Ray instance could not start: {exc}",
                option="execution",
                value="ray",
            ) from None
        raise ConfigError(
            f"{address!r} cannot be reached: {type(exc).__name__}: {exc}; {_FIX_ADDRESS}",
            option="ray_address",
            value=address,
        ) from None


def release() -> None:
    """Leave the connection; the last one out shuts down what the engine opened. Blocks."""
    ray = import_ray()
    with _lock:
        state = _state
        state.users = max(0, state.users - 1)
        if state.users == 0 and state.owned:
            state.owned = state.local = False
            state.address = None
            ray.shutdown()


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
