"""The engine's end of routed SDK calls: which model client serves a request, and metering.

A routed request (``_intercept.py``) arrives with the call's token and stage. The gateway:

1. finds the endpoint and the model: the base URL is the request's URL up to the routed
   path (``https://api.openai.com/v1`` of ``.../v1/chat/completions``), the model the
   body's ``model``;
2. with ``route_to`` (``--simulator``), sends it there instead: the request's model
   becomes the stage's configured model when it is not one of the configured models, and
   the SDK's key is not sent;
3. picks the client: a configured model (``--model``, ``--metric-model``, reflection)
   with that model name and base URL serves it, with its governor, retries and prices;
   any other (base URL, key, model) gets a client of its own with default settings (its
   budget learned from the provider's headers, or from 429s), kept for the Evaluator's
   life; the key is the SDK's own, from its ``Authorization`` (or ``x-api-key``) header;
4. forwards it (``ModelClient.forward``) under :func:`~._audit.engine_io`, and meters the
   reply into the example (program calls into its observation, metric calls into the
   judge's usage), failures included (retries, 429s).

A request of a thread that user code started, in the engine's process, comes with the
token :data:`~._owner.UNATTRIBUTED` (the gateway opens that route, ``_owner.open_route``):
it is served all the same, and the stage's examples running then, and every later one,
are unmeasured, since none of them can be charged with it. With ``route_to`` the gateway
also seals the audit hook to the simulator (``_audit.seal``) and sets the environment
user code and its children see (``_environ.simulated``).

:meth:`Gateway.note_bypass` marks an example's cost unmeasured (the audit hook, a request
the layer does not route); from then on every later example of that stage is unmeasured
too, since a connection kept open may carry its calls unseen.

Forwards hopped in from threads run as tasks of the engine's loop; the gateway tracks
them and cancels those still running when the Evaluator closes, so that no user thread
stays blocked on a call that will never end (its SDK sees a connection error).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import msgspec

from llm_client._fair import sharing

from .._call._context import Stage
from . import _audit, _environ, _intercept, _owner
from ._request import SDKRequest

if TYPE_CHECKING:
    from llm_client import Forwarded, ModelClient

    from .._models import ModelRouter

__all__ = ["NO_MODEL", "Gateway", "ModelPort"]

_T = TypeVar("_T")

#: What ``skynet.llm`` says when its stage has no model (the facade says the same).
NO_MODEL = (
    "skynet.llm() has no model to call: set --metric-model (or --reflection-model) for a "
    "metric, --model for a program, or pass models= to Evaluator"
)
_AUTH = frozenset({"authorization", "x-api-key", "api-key"})


class _Model(msgspec.Struct):
    model: Any = None


_model_decoder = msgspec.json.Decoder(_Model)


def _model_of(body: bytes) -> str | None:
    try:
        model = _model_decoder.decode(body).model
    except msgspec.DecodeError:
        return None
    return model if isinstance(model, str) and model.strip() else None


def _key_of(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        lower = name.lower()
        if lower == "authorization" and value[:7].lower() == "bearer ":
            return value[7:].strip() or None
        if lower in ("x-api-key", "api-key"):
            return value.strip() or None
    return None


class Gateway:
    """Routed SDK calls of one Evaluator (see the module docstring)."""

    def __init__(self, router: ModelRouter, route_to: str | None = None) -> None:
        self._router = router
        self._route_to = route_to.rstrip("/") if route_to else None
        self._clients: dict[tuple[str, str, str], asyncio.Future[ModelClient]] = {}
        self._stack = contextlib.AsyncExitStack()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._open = False
        self._route: Any = None
        self._sealed: tuple[str, int] | None = None
        self.routed = 0

    async def __aenter__(self) -> Gateway:
        from .._executors._bridge import LoopBridge

        await self._stack.__aenter__()
        _intercept.activate()
        _audit.activate()
        _owner.activate()
        loop = asyncio.get_running_loop()
        port = ModelPort(self._router, self)
        self._route = _owner.open_route(
            lambda stage: LoopBridge(loop, port, _owner.UNATTRIBUTED, stage)
        )
        if self._route_to is not None:
            parts = urlsplit(self._route_to)
            if parts.hostname:
                self._sealed = (parts.hostname, parts.port or 80)
                _audit.seal(*self._sealed)
            # What the processes user code starts inherit: no key, the simulator.
            self._stack.enter_context(_environ.simulated(self._route_to))
        self._open = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def clients(self) -> list[ModelClient]:
        """The clients opened for SDK calls of models nobody configured."""
        return [f.result() for f in self._clients.values() if f.done() and not f.exception()]

    async def aclose(self) -> None:
        """Cancel forwards still running, close the clients, unpatch (idempotent)."""
        if not self._open:
            return
        self._open = False
        _owner.close_route(self._route)
        _owner.deactivate()
        _intercept.deactivate()
        _audit.deactivate()
        if self._sealed is not None:
            _audit.unseal(*self._sealed)
            self._sealed = None
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self._stack.aclose()

    # -- a routed call ------------------------------------------------------------------

    async def forward(self, token: int, stage: Stage, request: SDKRequest) -> Forwarded:
        """Send one routed request through the right model client; meter its reply."""
        if not self._open:
            from llm_client import ClientClosedError

            raise ClientClosedError("the Evaluator is closed: no model call can be made")
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        if token == _owner.UNATTRIBUTED:
            # Marked before it is sent: a failed or cancelled call was made all the same.
            self._router.mark_unattributed(stage, _unattributed(request))
        try:
            with _audit.engine_io(), sharing(self._router.share_of(token)):
                return await self._forward(token, stage, request)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _forward(self, token: int, stage: Stage, request: SDKRequest) -> Forwarded:
        parts = urlsplit(request.url)
        suffix = _intercept.model_path(request.method, parts.path) or ""
        path = parts.path.rstrip("/")
        base = f"{parts.scheme}://{parts.netloc}{path[: len(path) - len(suffix)]}"
        model = _model_of(request.body) or "(unnamed)"
        headers, body, url = request.headers, request.body, request.url
        self._router.know_key(_key_of(headers))  # kept out of results, whatever it reaches
        if self._route_to is not None:
            model, body = self._served_model(stage, model, body)
            base = self._route_to
            query = f"?{parts.query}" if parts.query else ""
            url = f"{base}{suffix}{query}"
            headers = [(k, v) for k, v in headers if k.lower() not in _AUTH]
        opening = 0.0
        client = self._router.configured_client(model, base)
        if client is None:
            started = time.perf_counter()
            client = await self._client(base, _key_of(headers), model)
            opening = time.perf_counter() - started
        self.routed += 1
        sent = self._router.clock()
        where = client.config.base_url
        try:
            reply = await client.forward(
                request.method, url, dict(headers), body, timeout=request.timeout
            )
        except Exception as exc:
            self._router.record_failure(token, stage, exc, sent, where)
            raise
        if opening > 0.001:
            # Opening the client (prices, the governor) is the engine's wait, not the
            # program's time: counted as queued, as the governor's wait is.
            reply = msgspec.structs.replace(reply, queued_ms=reply.queued_ms + opening * 1000)
        if reply.ok:
            self._router.record(token, stage, reply, sent, where)
        else:
            self._router.record_failure(token, stage, reply, sent, where)
        return reply

    def _served_model(self, stage: Stage, model: str, body: bytes) -> tuple[str, bytes]:
        """With ``route_to``: the model that serves the request there (the stage's own
        when the request names none of the configured ones), and the body naming it."""
        if self._router.is_configured(model):
            return model, body
        own = self._router.model_for(stage)
        if own is None or own == model:
            return model, body
        try:
            payload = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return model, body
        if not isinstance(payload, dict):
            return model, body
        payload["model"] = own
        return own, msgspec.json.encode(payload)

    async def _client(self, base: str, key: str | None, model: str) -> ModelClient:
        """The client of (base URL, key, model), opened on first use and kept."""
        digest = hashlib.sha256(key.encode()).hexdigest() if key else ""
        slot = (base.rstrip("/"), digest, model)
        pending = self._clients.get(slot)
        if pending is None:
            pending = self._clients[slot] = asyncio.get_running_loop().create_future()
            try:
                client = await self._open_client(base, key, model)
            except BaseException as exc:
                del self._clients[slot]
                pending.set_exception(exc)
                pending.exception()  # retrieved: the caller below raises it
                raise
            pending.set_result(client)
            return client
        return await asyncio.shield(pending)

    async def _open_client(self, base: str, key: str | None, model: str) -> ModelClient:
        from llm_client import ModelClient, ModelConfig

        config = ModelConfig(model=model, base_url=base, api_key_env=None)
        client = ModelClient(config, api_key=key)
        return await self._stack.enter_async_context(client)

    # -- what was not seen ----------------------------------------------------------------

    def note_bypass(self, token: int, stage: Stage, what: str) -> None:
        """``what`` went around the metered paths in call ``token``: its cost, and every
        later example's of that stage, is unmeasured."""
        if token == _owner.UNATTRIBUTED:
            self._router.mark_unattributed(stage, f"{what}, from a thread user code started")
        else:
            self._router.mark_unmeasured(token, stage, what)


def _unattributed(request: SDKRequest) -> str:
    parts = urlsplit(request.url)
    return (
        f"a model call ({request.method} {parts.hostname or ''}{parts.path}) from a thread "
        "that user code started, which the engine cannot tie to one example"
    )


class ModelPort:
    """What the executors hand each call's bridge: ``skynet.llm`` (the router's handler,
    when the stage has a model) and the routed SDK calls (the gateway)."""

    __slots__ = ("_gateway", "_router")

    def __init__(self, router: ModelRouter, gateway: Gateway) -> None:
        self._router = router
        self._gateway = gateway

    async def __call__(
        self, token: int, stage: Stage, instruction: str, input: str | None, options: dict[str, Any]
    ) -> str:
        if self._router.model_for(stage) is None:
            raise RuntimeError(NO_MODEL)
        # The model client's own connections are not a bypass; the call is its tenant's.
        with _audit.engine_io(), sharing(self._router.share_of(token)):
            return await self._router.handler(token, stage, instruction, input, options)

    def forward(self, token: int, stage: Stage, request: SDKRequest) -> Awaitable[Forwarded]:
        return self._gateway.forward(token, stage, request)

    def note_bypass(self, token: int, stage: Stage, what: str) -> None:
        self._gateway.note_bypass(token, stage, what)
