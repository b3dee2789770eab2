"""An SDK's HTTP request as it crosses from user code to the engine (a thread hop or a
worker's relay): plain data, so that it pickles and encodes as it is."""

from __future__ import annotations

import msgspec

__all__ = ["CannotRoute", "SDKRequest"]


class CannotRoute(RuntimeError):  # a condition, not a failure of the call
    """This request cannot reach the engine from where it was made (a synchronous SDK
    call on the engine's own event loop): it goes out as the SDK meant, unmeasured."""


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
