"""The driver's handles on the node actors: boot, roster, loss, replacement, new nodes.

A :class:`Member` is one node actor as the driver sees it: its node, its worker count,
the batches it holds and how many calls. The :class:`Roster` keeps one member per alive
node: it boots them (:meth:`Roster.open` at the start, :meth:`Roster.watch` afterwards,
for nodes that join and for a node whose actor was lost while the node lives on),
records a loss (:meth:`Roster.lost`: the actor is killed, the node's losses counted; a
node whose actors were lost :data:`MAX_NODE_LOSSES` times is used no more) and closes
them all (:meth:`Roster.close`: each actor closes its local executor, then is killed).

Boot failures are told apart: the user's file or one of its imports missing on a node is
the user's to fix, raised as a ``ContractError`` naming the node when the executor opens
(a node that joins later and cannot load the file is left out, and said so in the
statistics); a node that dies while its actor boots is simply not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import Counter
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from ..._call._loader import UserFunction
from ..._exceptions import STEP_FILE, ConfigError, ContractError
from .._process._queue import Batch
from . import _boot
from ._actor import ActorSpec, BootFailure, BootInfo, from_wire
from ._cluster import NodeInfo, alive_nodes, import_ray
from ._ship import bundle

if TYPE_CHECKING:
    from ray.actor import ActorHandle

__all__ = ["BOOT_TIMEOUT_S", "MAX_NODE_LOSSES", "Member", "RayBatch", "Roster", "RosterEvents"]

#: A node actor that has not loaded the file and opened its executor by then is given up.
BOOT_TIMEOUT_S = 120.0
#: How long closing waits for the actors to close their local executors before killing.
CLOSE_TIMEOUT_S = 10.0
#: How often the roster looks for nodes that joined (and is woken at once by a loss).
REFRESH_S = 5.0
#: A node whose actors were lost this many times is used no more.
MAX_NODE_LOSSES = 3
#: A member's calls in flight at most: about this much of its workers' time...
WINDOW_NS = 2_000_000_000
#: ...and calls of unknown cost, this many per worker until the first outcomes are in.
PROBE_PER_WORKER = 2
MAX_IN_FLIGHT = 1 << 16


class RayBatch:
    """A batch placed on a member: which of its positions have their outcome."""

    __slots__ = ("batch", "left", "mask")

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.mask = bytearray(batch.size)
        self.left = batch.size

    def gaps(self) -> list[tuple[int, int]]:
        """The runs of positions still without an outcome."""
        mask, size, out, at = self.mask, self.batch.size, [], 0
        while at < size:
            lo = mask.find(0, at)
            if lo < 0:
                break
            hi = mask.find(1, lo)
            hi = size if hi < 0 else hi
            out.append((lo, hi))
            at = hi
        return out


class Member:
    """One node actor, as the driver sees it."""

    __slots__ = (
        "address",
        "batches",
        "calls_done",
        "handle",
        "in_flight",
        "node_id",
        "pid",
        "poller",
        "state",
        "workers",
    )

    def __init__(self, handle: ActorHandle[Any], node: NodeInfo, workers: int) -> None:
        self.handle = handle
        self.node_id = node.node_id
        self.address = node.address
        self.workers = workers
        self.state: Literal["booting", "ready", "lost", "closed"] = "booting"
        self.batches: dict[int, RayBatch] = {}
        self.in_flight = 0
        self.calls_done = 0
        self.pid = 0
        self.poller: asyncio.Task[None] | None = None

    def room(self, cost_ns: float | None) -> int:
        """How many more calls it may hold: about ``WINDOW_NS`` of its workers' time."""
        if cost_ns is None:
            budget = PROBE_PER_WORKER * self.workers
        else:
            budget = int(WINDOW_NS * self.workers / max(cost_ns, 1.0))
            budget = min(MAX_IN_FLIGHT, max(budget, 2 * self.workers))
        return budget - self.in_flight

    def busy_ns(self, cost_ns: float | None) -> float:
        """The work it holds, by the estimated cost of a call (0 while unknown)."""
        return 0.0 if cost_ns is None else self.in_flight * cost_ns

    @property
    def name(self) -> str:
        """The node, as statistics and messages name it."""
        return f"{self.address} ({self.node_id[:8]})"


class RosterEvents(Protocol):
    """What the roster tells the executor."""

    def member_ready(self, member: Member) -> None:
        """``member`` can take batches."""

    def member_lost(self, member: Member) -> None:
        """``member``'s node is gone: settle its batches, then call :meth:`Roster.lost`."""

    def no_nodes(self, why: str) -> None:
        """No node is left to run anything: the pending calls must fail."""


class Roster:
    """One member per alive node; see the module docstring."""

    def __init__(
        self, fn: UserFunction, spec: ActorSpec, *, workers: int | None, events: RosterEvents
    ) -> None:
        self.fn = fn
        self.spec = spec
        self.workers = workers
        self.events = events
        self.booting: set[str] = set()
        self.members: dict[str, Member] = {}
        self.every: list[Member] = []
        self.losses: Counter[str] = Counter()
        self.excluded: dict[str, str] = {}
        self.dead_nodes: set[str] = set()
        self.bundle: Any = None
        """The object-store reference of the zip every actor boots from (``_ship.py``)."""
        self.tasks: set[asyncio.Task[Any]] = set()
        self.wake: asyncio.Event | None = None
        self.actors_lost = 0
        self._remote: Any = None

    # -- the members ------------------------------------------------------------------

    def ready(self) -> list[Member]:
        return [m for m in self.members.values() if m.state == "ready"]

    def roomiest(self, cost_ns: float | None) -> Member | None:
        """The ready member with the most room per worker, if any has room."""
        best, best_share = None, 0.0
        for member in self.members.values():
            if member.state != "ready":
                continue
            room = member.room(cost_ns)
            if room > 0 and room / member.workers > best_share:
                best, best_share = member, room / member.workers
        return best

    def usable_workers(self, cost_ns: float | None) -> int:
        """The workers of the members that can take a batch now."""
        return sum(
            m.workers for m in self.members.values() if m.state == "ready" and m.room(cost_ns) > 0
        )

    # -- boot -------------------------------------------------------------------------

    async def open(self, ship_folder: bool) -> None:
        """Boot one member per alive node; raise what keeps the run from starting.

        ``ship_folder``: send the user's folder with the engine's packages (a cluster),
        or let the actors read the file at the driver's path (the engine's own local
        instance).
        """
        ray = import_ray()
        nodes = await asyncio.to_thread(alive_nodes)
        if not nodes:
            raise ConfigError(
                "the Ray cluster has no alive node with a CPU: add a node (`ray start "
                "--address ...` on a machine), or check the cluster with `ray status`"
            )
        data = await asyncio.to_thread(bundle, self.fn, with_folder=ship_folder)
        self.bundle = await asyncio.to_thread(ray.put, data)
        outcomes = await asyncio.gather(
            *(self.boot(node) for node in nodes), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome
        if not self.ready():
            reasons = "; ".join(sorted(set(self.excluded.values()))) or "no reason given"
            raise ConfigError(f"no Ray node could start the engine's actor: {reasons}")

    def _remote_class(self) -> Any:
        if self._remote is None:
            self._remote = import_ray().remote(_boot.portable())
        return self._remote

    def _create(self, node: NodeInfo) -> ActorHandle[Any]:
        """A new actor on ``node``."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        handle: ActorHandle[Any] = (
            self._remote_class()
            .options(
                # The actor itself waits on its worker processes: it reserves no CPU of
                # its own; its workers use the node's CPUs (see docs/architecture.md).
                num_cpus=0,
                max_restarts=0,
                max_task_retries=0,
                max_concurrency=1000,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            )
            .remote()
        )
        return handle

    async def boot(self, node: NodeInfo) -> Member | None:
        """Start the member of ``node``; None when the node cannot have one.

        Raises ``ContractError`` when the node cannot load the user's file.
        """
        workers = self.workers or node.cpus
        spec = msgspec.structs.asdict(msgspec.structs.replace(self.spec, workers=workers))
        try:
            handle = self._create(node)
        except Exception as exc:  # Ray refused the actor (the node just left, say)
            self.excluded[node.node_id] = f"node {node.address}: no actor ({_first_line(exc)})"
            return None
        member = Member(handle, node, workers)
        self.members[node.node_id] = member
        self.every.append(member)
        try:
            async with asyncio.timeout(BOOT_TIMEOUT_S):
                info = from_wire(await member.handle.boot.remote(self.bundle, spec))
        except TimeoutError:
            self._give_up(member, f"its actor did not start within {BOOT_TIMEOUT_S:g} s")
            return None
        except Exception as exc:
            self._give_up(member, f"its actor died while starting ({_first_line(exc)})")
            return None
        if isinstance(info, BootFailure):
            self._give_up(member, f"it cannot load {self.fn.path.name}")
            raise ContractError(
                STEP_FILE,
                f"cannot be loaded on Ray node {info.address} (node {info.node_id[:8]}): "
                f"{info.message} (a node gets the file's folder and the engine's packages; "
                "anything else the file imports must be installed on every node)",
                path=self.fn.path,
                line=info.line,
            )
        return self._admit(member, info)

    def _admit(self, member: Member, info: BootInfo) -> Member | None:
        if member.state != "booting":
            return None  # lost or closed while it booted
        member.state = "ready"
        member.pid = info.pid
        module = self.fn.module
        if module is not None and info.module_name != self.fn.module_name:
            sys.modules.setdefault(info.module_name, module)  # see _actor._alias
        self.events.member_ready(member)
        return member

    def _give_up(self, member: Member, why: str) -> None:
        self.excluded[member.node_id] = f"node {member.name}: {why}"
        self._kill(member)

    # -- loss and replacement ---------------------------------------------------------

    def lost(self, member: Member) -> None:
        """``member``'s actor died or failed: kill it, count it, look for a replacement."""
        if member.state in ("lost", "closed"):
            return
        member.state = "lost"
        self.actors_lost += 1
        self.losses[member.node_id] += 1
        if self.losses[member.node_id] >= MAX_NODE_LOSSES:
            self.excluded.setdefault(
                member.node_id,
                f"node {member.name}: its actors were lost {MAX_NODE_LOSSES} times",
            )
        self._kill(member)
        if self.wake is not None:
            self.wake.set()

    def _kill(self, member: Member) -> None:
        if self.members.get(member.node_id) is member:
            del self.members[member.node_id]
        if member.state != "lost":
            member.state = "closed"
        with contextlib.suppress(Exception):
            import_ray().kill(member.handle, no_restart=True)

    async def watch(self) -> None:
        """Every ``REFRESH_S`` (or at once after a loss): boot members on nodes without
        one, settle members whose node died; tell the executor when no node is left."""
        wake = self.wake = asyncio.Event()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REFRESH_S):
                    await wake.wait()
            wake.clear()
            await self.refresh()

    async def refresh(self) -> None:
        nodes = await asyncio.to_thread(alive_nodes)
        alive = {node.node_id for node in nodes}
        for member in list(self.members.values()):
            if member.node_id not in alive:
                self.dead_nodes.add(member.node_id)
                self.events.member_lost(member)
        self.dead_nodes.update(node_id for node_id in self.losses if node_id not in alive)
        for node in nodes:
            node_id = node.node_id
            placed = node_id in self.members or node_id in self.excluded
            if not placed and node_id not in self.booting:
                self.booting.add(node_id)
                self.start(self._boot_later(node))
        if not self.members and not self.booting:
            known = "; ".join(sorted(set(self.excluded.values()))) or "the cluster has no node"
            self.events.no_nodes(known)

    async def _boot_later(self, node: NodeInfo) -> None:
        """Boot a member mid-run: a node that cannot load the file is left out."""
        try:
            await self.boot(node)
        except Exception as exc:  # the file cannot be loaded there, or a Ray error
            self.excluded[node.node_id] = f"node {node.address}: {_first_line(exc)}"
        finally:
            self.booting.discard(node.node_id)
            if self.wake is not None and node.node_id not in self.members:
                self.wake.set()

    def start(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- closing ----------------------------------------------------------------------

    async def close(self) -> None:
        """Close every actor's local executor (bounded), then kill every actor."""
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks))
        alive = [m for m in self.every if m.state in ("ready", "booting")]
        if alive:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await asyncio.gather(
                        *(_closed(m) for m in alive if m.state == "ready"),
                        return_exceptions=True,
                    )
        ray = import_ray()
        for member in self.every:
            member.state = "closed"
            with contextlib.suppress(Exception):
                ray.kill(member.handle, no_restart=True)
        self.members.clear()


async def _closed(member: Member) -> None:
    await member.handle.close.remote()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
