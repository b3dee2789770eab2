"""Fair shares between tenants: who a call is for, and the queue that serves them by weight.

A *tenant* is whoever a piece of work is done for (a caller of one ``Evaluator``, a job of
a service); its *weight* is its share of a contended budget relative to the other tenants
that want it at the same time. :class:`Share` names both; :func:`sharing` puts one in force
for the calls made inside it (a context variable, so it follows ``await`` and the tasks
started inside, and nothing is bound to a loop).

:class:`FairQueue` is start-time fair queueing (SFQ, Goyal, Vin and Cheng 1996) over
per-tenant FIFO queues:

* each tenant has a *finish tag*: the virtual time at which the service it was given so
  far, divided by its weight, ends;
* a tenant that becomes backlogged gets the start tag ``max(V, its finish tag)``, where
  ``V`` is the start tag of the item served last; serving its head item of cost ``c``
  moves its finish tag to ``start + c / weight`` and its next item starts there;
* the backlogged tenant with the lowest start tag is served next (ties: arrival order).

Why this and not deficit round robin: both give every backlogged tenant its weight's share
with a bounded lag, and both are work-conserving (an idle tenant's share goes to the
others at once, and an idle spell earns no credit: the ``max(V, ...)``). DRR needs a
quantum at least as large as the largest item to keep O(1) per item, and serves a
tenant's whole quantum in a burst; costs here vary by orders of magnitude (one request
of 10 tokens or of 30,000), and SFQ charges each item its own cost with no quantum to
tune, interleaves tenants item by item, and fits the heap the governor already kept.
Within one tenant, items keep their order by ``seq`` (a retry keeps its place).
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from ._spend import Spend

__all__ = [
    "FairQueue",
    "Share",
    "current_share",
    "sharing",
    "tenant_problem",
    "validate_weight",
    "weight_problem",
]

T = TypeVar("T")


def weight_problem(weight: Any) -> str | None:
    """What is wrong with ``weight``, worded to follow its name (None: nothing)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        return (
            "must be a positive number (a share relative to the other tenants, 1.0 by "
            f"default), got {type(weight).__name__} {weight!r}"
        )
    if not math.isfinite(weight) or weight <= 0:
        return (
            "must be a positive finite number (a share relative to the other tenants, "
            f"1.0 by default), got {weight!r}"
        )
    return None


def tenant_problem(tenant: Any) -> str | None:
    """What is wrong with ``tenant``, worded to follow its name (None: nothing)."""
    try:
        hash(tenant)
    except TypeError:
        return f"must be hashable (a name, a number, a tuple), got {type(tenant).__name__}"
    return None


def validate_weight(weight: Any, where: str = "weight") -> float:
    """``weight`` as a float, or a ``ValueError`` naming ``where`` and how to fix it."""
    problem = weight_problem(weight)
    if problem is not None:
        raise ValueError(f"`{where}` {problem}")
    return float(weight)


class Share:
    """A tenant and its weight. Equal tenants share one queue whatever their weights
    (the latest weight given is the one in force). ``spend``: the spending ledger the
    calls made under this share reserve against (``_spend.py``; None: no limit)."""

    __slots__ = ("spend", "tenant", "weight")

    def __init__(self, tenant: Hashable, weight: float = 1.0, spend: Spend | None = None) -> None:
        problem = tenant_problem(tenant)
        if problem is not None:
            raise ValueError(f"`tenant` {problem}")
        self.tenant = tenant
        self.weight = validate_weight(weight)
        self.spend = spend

    def __repr__(self) -> str:
        return f"Share(tenant={self.tenant!r}, weight={self.weight:g})"


_current: contextvars.ContextVar[Share | None] = contextvars.ContextVar(
    "llm_client_share", default=None
)


def current_share() -> Share | None:
    """The share in force for calls made here (None: the shared default tenant)."""
    return _current.get()


@contextlib.contextmanager
def sharing(share: Share | None) -> Iterator[None]:
    """Make the calls inside this block (and the tasks started in it) ``share``'s."""
    reset = _current.set(share)
    try:
        yield
    finally:
        _current.reset(reset)


class _Flow:
    """One tenant's state in a :class:`FairQueue`."""

    __slots__ = ("finish", "queue", "queued", "weight")

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.finish = 0.0
        self.queue: list[tuple[int, int, Any]] = []  # (seq, order, item)
        self.queued = False  # has an entry in the ready heap


class FairQueue(Generic[T]):
    """Start-time fair queueing over per-tenant FIFO queues (see the module docstring).

    ``dead(item)`` says an item left the line (a cancelled waiter): it is skipped, never
    served. The caller decides *when* to serve (its budgets); the queue decides *whom*.
    """

    #: Forget idle tenants (their state no longer matters) when this many are known, and
    #: again each time their number doubles: a service whose every request is a tenant of
    #: its own must not keep one entry per request.
    PRUNE_AT = 64

    def __init__(self, dead: Callable[[T], bool]) -> None:
        self._dead = dead
        self._vtime = 0.0
        self._flows: dict[Hashable, _Flow] = {}
        self._ready: list[tuple[float, int, _Flow]] = []
        self._order = itertools.count()
        self._prune_at = self.PRUNE_AT

    def _flow(self, share: Share | None) -> _Flow:
        tenant, weight = (None, 1.0) if share is None else (share.tenant, share.weight)
        flow = self._flows.get(tenant)
        if flow is None:
            if len(self._flows) >= self._prune_at:
                self._prune()
                self._prune_at = max(self.PRUNE_AT, 2 * len(self._flows))
            flow = self._flows[tenant] = _Flow(weight)
        else:
            flow.weight = weight
        return flow

    def push(self, share: Share | None, item: T, seq: int) -> None:
        """Queue ``item`` for ``share``'s tenant, in ``seq`` order within the tenant."""
        flow = self._flow(share)
        heapq.heappush(flow.queue, (seq, next(self._order), item))
        if not flow.queued:
            flow.queued = True
            start = max(self._vtime, flow.finish)
            heapq.heappush(self._ready, (start, next(self._order), flow))

    def peek(self) -> T | None:
        """The item to serve next (None when no live item waits)."""
        ready = self._ready
        while ready:
            flow = ready[0][2]
            if self._skip_dead(flow):
                return flow.queue[0][2]  # type: ignore[no-any-return]
            heapq.heappop(ready)
            flow.queued = False
        return None

    def pop(self, cost: float) -> T:
        """Serve the item :meth:`peek` returned, charging its tenant ``cost``."""
        start, _, flow = heapq.heappop(self._ready)
        item: T = heapq.heappop(flow.queue)[2]
        self._vtime = max(self._vtime, start)
        flow.finish = start + cost / flow.weight
        if self._skip_dead(flow):
            heapq.heappush(self._ready, (flow.finish, next(self._order), flow))
        else:
            flow.queued = False
        return item

    def charge(self, share: Share | None, cost: float) -> None:
        """Service given without queueing (nobody waited): charge it all the same, so
        that a tenant served on the fast path does not also jump the next line."""
        flow = self._flow(share)
        start = max(self._vtime, flow.finish)
        self._vtime = start
        flow.finish = start + cost / flow.weight

    def _skip_dead(self, flow: _Flow) -> bool:
        """Drop ``flow``'s dead head items; whether a live one is left."""
        queue = flow.queue
        while queue and self._dead(queue[0][2]):
            heapq.heappop(queue)
        return bool(queue)

    def _prune(self) -> None:
        vtime = self._vtime
        for tenant, flow in list(self._flows.items()):
            if not flow.queued and not flow.queue and flow.finish <= vtime:
                del self._flows[tenant]

    def tenants(self) -> int:
        """Tenants with an item waiting (or a stale entry about to be dropped)."""
        return sum(1 for flow in self._flows.values() if flow.queued)
