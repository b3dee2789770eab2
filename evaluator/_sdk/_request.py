"""An SDK's HTTP request as it crosses from user code to the engine (a thread hop or a
worker's relay): plain data, so that it pickles and encodes as it is."""

from __future__ import annotations

import msgspec

__all__ = ["CannotRoute", "SDKRequest", "SimulatorOnly"]


class CannotRoute(RuntimeError):  # a condition, not a failure of the call
    """This request cannot reach the engine from where it was made (a synchronous SDK
    call on the engine's own event loop): it goes out as the SDK meant, unmeasured."""


class SimulatorOnly(ConnectionRefusedError):
    """A connection user code opened under ``--simulator`` to somewhere else than the
    simulator: refused before it is made (the SDK sees a refused connection)."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"skynet-eval refused a connection to {where}: this run serves its models from "
            "the simulator (--simulator), and user code may connect to nothing else. Model "
            "calls through skynet.llm or an SDK the engine routes (openai, litellm, "
            "dspy.LM) reach the simulator; run without --simulator to reach other hosts"
        )
        self.where = where

    def __reduce__(self) -> tuple[type[SimulatorOnly], tuple[str]]:
        return (SimulatorOnly, (self.where,))


class SDKRequest(msgspec.Struct, frozen=True, array_like=True):
    """One request an SDK was about to send.

    ``headers`` keep their order and repeats; the key among them is the SDK's own and
    never leaves the engine's model client (it is not logged, and a reply that echoes it
    is scrubbed). ``timeout`` is the SDK's read timeout for one attempt (None: the
    model client's default).
    """

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes
    timeout: float | None = None

    def __repr__(self) -> str:
        # The headers hold the API key: never in a repr, a log line or a traceback.
        return f"SDKRequest({self.method} {self.url}, {len(self.body)} bytes)"
