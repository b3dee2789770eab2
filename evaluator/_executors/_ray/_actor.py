"""The node actor: what runs on each node of the cluster, one per node and executor.

The verl layering: Ray places batches on nodes and handles the loss of a node; on the
node, the batch runs under the same local supervision as on one machine, a
:class:`~evaluator._executors._process._executor.ProcessExecutor` (per-call hard timeout
with kill, crash isolation, ``memory_limit_mb``, ``max_calls_per_worker``). A user fault
is that call's outcome here, never a Ray error, so Ray has nothing to retry.

The actor is an asyncio actor with five methods, all plain calls (no streaming
generators, which Ray Client does not support):

- :meth:`NodeActor.boot` imports the user's file (from the shipped copy of its folder, or
  by the driver's path) and opens the local executor; a file or an import missing on the
  node comes back as a :class:`BootFailure` naming the node, not as an exception.
- :meth:`NodeActor.run` takes a batch (``seq``, the pickled call rows, the piece size)
  and returns at once; the batch runs as *pieces*, each a submit to the local executor,
  so that the work of a piece that finished is never lost with the node.
- :meth:`NodeActor.events` is the driver's long poll: it waits until something happened
  and returns everything that did, a list of events: the outcomes of a finished piece
  (``OUT``), a model request from a call (``LLM``).
- :meth:`NodeActor.reply` answers a model request (the driver's model client answered it,
  within the run's one rate budget, metered to the calling example).
- :meth:`NodeActor.cancel` cancels batches; :meth:`NodeActor.close` closes the local
  executor (its worker processes are reaped).

What crosses is plain data (bytes, tuples, dicts): over Ray Client, the client server
unpickles it on the way. Outcomes travel as the process executor's workers send them:
``score`` outcomes as msgpack (:class:`~evaluator._executors._process._wire.WireOutcome`),
others pickled; a value that cannot be pickled is that call's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pickle
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..._call import _failures as failures
from ..._call._calls import Call, Outcome, RunCall, ScoreCall
from ..._call._context import Stage
from ..._call._results import ErrorInfo
from ..._exceptions import ContractError
from .._process._relay import rebuild_error
from .._process._wire import PICKLE_PROTOCOL

if TYPE_CHECKING:
    from ..._call._loader import UserFunction
    from .._process._executor import ProcessExecutor

__all__ = [
    "ENCODED_MSGPACK",
    "ENCODED_PICKLE",
    "FAILED",
    "LLM",
    "OUT",
    "ActorSpec",
    "BootFailure",
    "BootInfo",
    "NodeActor",
    "from_wire",
    "to_wire",
]

#: Event tags: ``(OUT, seq, start, count, work_ns, encoding, body)``,
#: ``(FAILED, seq, kind, message)`` (the batch failed on the node as a whole) and
#: ``(LLM, request, token, stage, instruction, input, options)``.
OUT = 0
LLM = 1
FAILED = 2
#: How a piece's outcomes are encoded.
ENCODED_MSGPACK = 1
ENCODED_PICKLE = 2


class ActorSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a node actor loads and how it runs it."""

    path: str
    """The user's file on the driver (in a shipped folder, the file of that name)."""
    module_name: str
    """The module name the driver imported the file under (objects of its classes pickle
    by it)."""
    name: str
    stage: Stage
    timeout: float
    workers: int
    max_calls_per_worker: int | None = None
    memory_limit_mb: int | None = None
    has_llm: bool = False


class BootInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A node actor is ready."""

    node_id: str
    address: str
    pid: int
    workers: int
    module_name: str
    """The module name of the user's file on the node (the driver aliases it)."""


class BootFailure(msgspec.Struct, frozen=True, kw_only=True):
    """A node actor could not load the user's file: the node's own words."""

    node_id: str
    address: str
    message: str
    line: int | None = None


def to_wire(answer: BootInfo | BootFailure) -> dict[str, Any]:
    """A boot's answer as plain data: over Ray Client, the client server unpickles what
    crosses, and it may not have the engine (or this version of it) installed."""
    fields: dict[str, Any] = msgspec.structs.asdict(answer)
    fields["failed"] = isinstance(answer, BootFailure)
    return fields


def from_wire(fields: dict[str, Any]) -> BootInfo | BootFailure:
    """The answer :func:`to_wire` sent."""
    fields = dict(fields)
    if fields.pop("failed"):
        return msgspec.convert(fields, BootFailure)
    return msgspec.convert(fields, BootInfo)


def _node() -> tuple[str, str]:
    import ray

    address = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]  # untyped in Ray
    return ray.get_runtime_context().get_node_id(), str(address)


def _alias(module_name: str, fn: UserFunction, folder: Path) -> None:
    """Make the driver's module name of the user's file import the node's copy.

    Objects of classes the file defines pickle by module name, and module names follow
    the path (``_loader``), which differs in the shipped copy. The actor registers the
    driver's name; its worker processes find it through a one-line module in
    ``folder``, on the ``sys.path`` they inherit.
    """
    if module_name == fn.module_name or fn.module is None:
        return
    sys.modules[module_name] = fn.module
    folder.mkdir(exist_ok=True)
    (folder / f"{module_name}.py").write_text(
        "import sys\nfrom evaluator._call._loader import import_path\n"
        f"sys.modules[__name__] = import_path({str(fn.path)!r}, guard_engine=False)\n",
        encoding="utf-8",
    )
    sys.path.append(str(folder))


def _encode(stage: Stage, outcomes: list[Outcome]) -> tuple[int, bytes]:
    if stage == "score":
        try:
            return ENCODED_MSGPACK, msgspec.msgpack.encode(outcomes)
        except (TypeError, OverflowError):
            pass  # an extra msgpack cannot carry (a huge int): pickle it
    try:
        return ENCODED_PICKLE, pickle.dumps(outcomes, PICKLE_PROTOCOL)
    except Exception:
        safe = [_picklable(o, stage) for o in outcomes]
        return ENCODED_PICKLE, pickle.dumps(safe, PICKLE_PROTOCOL)


def _picklable(outcome: Outcome, stage: Stage) -> Outcome:
    try:
        pickle.dumps(outcome, PICKLE_PROTOCOL)
    except Exception as exc:
        error = failures.unsendable_value(stage, exc)
        return Outcome(None, error, outcome.started_ns, outcome.ended_ns)
    return outcome


class NodeActor:
    """One node's actor; see the module docstring. Wrapped by ``ray.remote`` on the driver."""

    def __init__(self) -> None:
        self._spec: ActorSpec | None = None
        self._fn: UserFunction | None = None
        self._executor: ProcessExecutor | None = None
        self._events: list[tuple[Any, ...]] = []
        self._ready: asyncio.Event | None = None
        self._tasks: dict[int, set[asyncio.Task[None]]] = {}
        self._replies: dict[int, asyncio.Future[bytes]] = {}
        self._requests = itertools.count(1)

    async def boot(self, spec_fields: dict[str, Any], folder: str | None) -> dict[str, Any]:
        """Import the user's file and open the local executor; a :class:`BootInfo` or a
        :class:`BootFailure`, as :func:`to_wire` sends it.

        ``folder`` is the shipped copy of the file's folder (None: the file is read at the
        driver's path, as on the engine's own local instance).
        """
        from ..._call._loader import load_function
        from .._process._executor import ProcessExecutor

        spec = msgspec.convert(spec_fields, ActorSpec)
        node_id, address = _node()
        path = Path(folder, Path(spec.path).name) if folder else Path(spec.path)
        if not path.is_file():
            message = (
                f"the file is not on this node (no {path}); put it at the same path on every "
                "node, or give a cluster address so that its folder is shipped"
            )
            return to_wire(BootFailure(node_id=node_id, address=address, message=message))
        try:
            fn = load_function(path, spec.name, guard_engine=False)
        except ContractError as exc:
            failure = BootFailure(
                node_id=node_id, address=address, message=exc.message, line=exc.line
            )
            return to_wire(failure)
        if folder is not None:
            _alias(spec.module_name, fn, Path(folder).parent / "alias")
        self._spec, self._fn = spec, fn
        self._ready = asyncio.Event()
        executor = ProcessExecutor(
            fn,
            spec.stage,
            timeout=spec.timeout,
            workers=spec.workers,
            llm_handler=self._llm if spec.has_llm else None,
            max_calls_per_worker=spec.max_calls_per_worker,
            memory_limit_mb=spec.memory_limit_mb,
        )
        await executor.__aenter__()
        self._executor = executor
        info = BootInfo(
            node_id=node_id,
            address=address,
            pid=os.getpid(),
            workers=spec.workers,
            module_name=fn.module_name,
        )
        return to_wire(info)

    # -- batches ----------------------------------------------------------------------

    async def run(self, seq: int, payload: bytes, piece: int) -> None:
        """Start batch ``seq`` (pickled call rows) in pieces of ``piece`` calls; returns
        at once, the outcomes follow as events. Never raises: the driver does not wait
        for this call, so a failure here is the batch's outcome."""
        spec, fn = self._spec, self._fn
        assert spec is not None and fn is not None
        try:
            rows = pickle.loads(payload)
        except Exception as exc:
            # Pickled on the driver, not rebuildable here: a class or module the node lacks.
            self._failed(seq, failures.unsendable_arguments(fn, spec.stage, exc))
            return
        try:
            make = ScoreCall if spec.stage == "score" else RunCall
            calls: list[Call] = [make(*row) for row in rows]
            tasks = self._tasks.setdefault(seq, set())
            for start in range(0, len(calls), max(1, piece)):
                chunk = calls[start : start + piece]
                task = asyncio.create_task(self._piece(seq, start, chunk))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}"
            self._failed(seq, failures.ray_actor_failed(detail))

    async def _piece(self, seq: int, start: int, calls: list[Call]) -> None:
        executor, spec = self._executor, self._spec
        assert executor is not None and spec is not None
        try:
            outcomes = await executor.submit(calls)
            work = 0
            for outcome in outcomes:
                if outcome.started_ns:
                    work += outcome.ended_ns - outcome.started_ns
            encoding, body = _encode(spec.stage, outcomes)
        except RuntimeError:  # the local executor closed under it: the actor is closing
            return
        except Exception as exc:
            self._failed(seq, failures.ray_actor_failed(f"{type(exc).__name__}: {exc}"))
            return
        self._push((OUT, seq, start, len(outcomes), work, encoding, body))

    async def cancel(self, seqs: list[int]) -> None:
        """Cancel batches: their calls already in a worker process finish and are dropped."""
        for seq in seqs:
            for task in self._tasks.pop(seq, set()):
                task.cancel()

    # -- events -----------------------------------------------------------------------

    def _failed(self, seq: int, error: ErrorInfo) -> None:
        self._push((FAILED, seq, error.kind, error.message))

    def _push(self, event: tuple[Any, ...]) -> None:
        self._events.append(event)
        if self._ready is not None:
            self._ready.set()

    async def events(self) -> list[tuple[Any, ...]]:
        """Everything that happened since the last call; waits until something has."""
        ready = self._ready
        assert ready is not None
        await ready.wait()
        ready.clear()
        events, self._events = self._events, []
        return events

    async def _llm(
        self, token: int, stage: Stage, instruction: str, input: str | None, options: Any
    ) -> str:
        """The local executor's model handler: ask the driver, wait for its reply."""
        request = next(self._requests)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._replies[request] = future
        self._push((LLM, request, token, stage, instruction, input, options))
        try:
            body = await future
        finally:
            self._replies.pop(request, None)
        _, _, ok, payload = pickle.loads(body)
        if ok:
            return str(payload)
        raise rebuild_error(payload)

    async def reply(self, request: int, body: bytes) -> None:
        """The driver's answer to model request ``request``."""
        future = self._replies.get(request)
        if future is not None and not future.done():
            future.set_result(body)

    # -- closing ----------------------------------------------------------------------

    async def close(self) -> None:
        """Cancel every batch and close the local executor (its workers are reaped)."""
        for tasks in self._tasks.values():
            for task in tasks:
                task.cancel()
        self._tasks.clear()
        executor, self._executor = self._executor, None
        if executor is not None:
            with contextlib.suppress(Exception):
                await executor.__aexit__(None, None, None)
