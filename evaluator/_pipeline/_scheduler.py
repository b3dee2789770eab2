"""Fair shares between the callers of one Evaluator: tenants, weights, executor slots.

Every call of ``evaluate_many``, ``stream`` or ``evaluate`` runs for a *tenant* with a
*weight* (:func:`caller_share`: by default the calling task, weight 1). Two budgets are
shared between the tenants that want them at the same time, by weight:

* **executor slots**: each stage's :class:`FairSlots` gate admits chunks into its
  executor, start-time fair queueing by weight over the tenants waiting
  (``llm_client._fair.FairQueue``), so a caller with a long backlog cannot fill an
  executor's own FIFO queue ahead of a caller that came later;
* **model budgets** (requests and tokens): each model call is made under its tenant's
  :class:`~llm_client.Share` (:class:`TenantBook` finds it by the call's token), and the
  model's rate governor queues it by the same rule.

Both are work-conserving: a tenant alone gets every slot and the whole budget, and what
an idle tenant leaves is lent to the others at once (LiteLLM's proxy reserves a share
per priority only above saturation, and lends idle capacity below it; so does this).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Hashable

from llm_client import Share
from llm_client._fair import FairQueue, tenant_problem, weight_problem

from .._exceptions import ConfigError

__all__ = ["FairSlots", "TenantBook", "caller_share"]


def caller_share(tenant: Hashable | None, weight: float) -> Share:
    """The share of one call: ``tenant`` (None: the calling task) with ``weight``.

    A user mistake is a :class:`ConfigError` naming the parameter and how to fix it.
    """
    problem = weight_problem(weight)
    if problem is not None:
        raise ConfigError(problem, option="weight", value=weight)
    if tenant is None:
        tenant = ("caller", id(asyncio.current_task()))
    problem = tenant_problem(tenant)
    if problem is not None:
        raise ConfigError(problem, option="tenant", value=tenant)
    return Share(tenant, float(weight))


class TenantBook:
    """The share of each call token in flight, kept as token ranges (one per chunk).

    Tokens grow with each chunk (``Flow.next_token``), so a chunk's range is appended at
    the end and found by bisection: the cost is per chunk, never per example.
    """

    __slots__ = ("_bases", "_entries")

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._entries: dict[int, tuple[int, Share | None]] = {}

    def add(self, base: int, n: int, share: Share | None) -> None:
        """Tokens ``base .. base + n - 1`` are ``share``'s."""
        if self._bases and base < self._bases[-1]:
            bisect.insort(self._bases, base)
        else:
            self._bases.append(base)
        self._entries[base] = (base + n, share)

    def discard(self, base: int) -> None:
        if self._entries.pop(base, None) is not None:
            i = bisect.bisect_left(self._bases, base)
            del self._bases[i]

    def share_of(self, token: int) -> Share | None:
        """The share of call ``token`` (None once its chunk is done)."""
        i = bisect.bisect_right(self._bases, token) - 1
        if i < 0:
            return None
        end, share = self._entries[self._bases[i]]
        return share if token < end else None

    def __len__(self) -> int:
        return len(self._bases)


class _Ticket:
    __slots__ = ("future", "units")

    def __init__(self, units: int, future: asyncio.Future[None]) -> None:
        self.units = units
        self.future = future


def _left(ticket: _Ticket) -> bool:
    return ticket.future.done()


class FairSlots:
    """A weighted fair gate in front of one executor: chunks in, by tenant, by weight.

    ``capacity()`` is the calls the gate lets into the executor at once (read at each
    admission: the flow's chunk size changes as it measures). A chunk is admitted while
    the gate has room, and takes as many units as it has calls, at most the room left:
    one large chunk of cheap calls is admitted rather than never, and a chunk does not
    wait for a whole gate's room behind the few calls of another that a slow call holds
    up (its units come back call by call, as the flow reports them done). Waiting
    tenants are served by start-time fair queueing, each chunk charged the units it
    asked for; within a tenant, in arrival order. While the executor is ``idle()`` (a
    worker free, nothing queued: the units in use are calls held up behind a slow one)
    the next chunk is admitted whatever the units say.
    Cancel-safe: a ticket cancelled while waiting leaves the line, one admitted in the
    same tick hands its units back.
    """

    def __init__(
        self, capacity: Callable[[], int], idle: Callable[[], bool] = lambda: False
    ) -> None:
        self._capacity = capacity
        self._idle = idle
        self._queue: FairQueue[_Ticket] = FairQueue(_left)
        self._seq = 0
        self.used = 0
        self.waiting = 0
        self.admitted = 0

    async def acquire(self, share: Share | None, n: int) -> int:
        """Wait for room for ``n`` calls of ``share``; the units to :meth:`release`."""
        capacity = self._capacity()
        units = max(1, min(n, capacity))
        self._seq += 1
        if not self.waiting and (self.used < capacity or self._idle()):
            self._queue.charge(share, units)
            units = max(1, min(units, capacity - self.used))
            self._take(units)
            return units
        ticket = _Ticket(units, asyncio.get_running_loop().create_future())
        self._queue.push(share, ticket, self._seq)
        self.waiting += 1
        self._dispatch()
        try:
            await ticket.future
        except asyncio.CancelledError:
            if ticket.future.done() and not ticket.future.cancelled():
                self.release(ticket.units)  # admitted in the same tick as the cancellation
            else:
                ticket.future.cancel()
                self.waiting -= 1
                self._dispatch()
            raise
        return ticket.units

    def release(self, units: int) -> None:
        """Hand ``units`` back and admit whoever fits next (called as calls finish: the
        capacity is read only when someone waits)."""
        self.used -= units
        if self.waiting:
            self._dispatch()

    def poke(self) -> None:
        """Admit whoever fits now (the executor may have become idle)."""
        if self.waiting:
            self._dispatch()

    def _take(self, units: int) -> None:
        self.used += units
        self.admitted += 1

    def _dispatch(self) -> None:
        capacity = self._capacity()
        queue = self._queue
        while (head := queue.peek()) is not None:
            if self.used >= capacity and not self._idle():
                return
            queue.pop(head.units)
            self.waiting -= 1
            head.units = max(1, min(head.units, capacity - self.used))
            self._take(head.units)
            head.future.set_result(None)
