"""Under ``--simulator``, the environment that user code and the processes it starts see.

The engine's hooks live in its own process and its workers; a process the user's code
starts (``subprocess``, ``os.system``, ``multiprocessing``) has none of them. What it does
get is the environment, so while a gateway serves SDK calls from the simulator
(:func:`simulated`):

* every variable that looks like a secret (a name ending in ``_KEY``, ``_TOKEN``,
  ``_SECRET``, ``_PASSWORD``: ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``) holds
  :data:`PLACEHOLDER` instead: no real key reaches a child, and an SDK that insists on a
  key still builds its client;
* the SDKs' base-URL variables (``OPENAI_BASE_URL`` and the like, and any
  ``*_BASE_URL`` / ``*_API_BASE`` already set) name the simulator;
* for the children only, the proxy variables (``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``ALL_PROXY``) name the simulator too, and ``NO_PROXY`` only the simulator's own
  address: a client that honours them (``urllib``, ``requests``, ``httpx``, ``curl``)
  sends a request for any other host to the simulator, which refuses it, instead of to
  that host;
* :data:`SIMULATOR_ENV` holds the simulator's URL: a worker process seals its audit hook
  to it (``_audit.seal``) at boot.

The engine's process sees the same, but the proxies, while the gateway is open (its
variables are restored when it closes): user code there reads the placeholder, not the
key. The engine itself
has read every key it needs before (a configured model's client opens first) and sends
none under ``--simulator``.

Not protected: a child that opens its own sockets to a literal address (the proxy
variables are a convention, not a wall); such a child reaches that address, though
without any key the engine's environment held.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

__all__ = ["PLACEHOLDER", "SIMULATOR_ENV", "simulated"]

#: The value secret-looking variables hold under ``--simulator``.
PLACEHOLDER = "skynet-eval-simulator-no-key"
#: The simulator's URL, for the worker processes (and visible to every child).
SIMULATOR_ENV = "SKYNET_EVAL_SIMULATOR"

_SECRET_ENDINGS = ("_KEY", "_KEYS", "_TOKEN", "_SECRET", "_PASSWORD")
_BASE_URLS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "LITELLM_API_BASE")
_BASE_ENDINGS = ("_BASE_URL", "_API_BASE")
_PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
_NO_PROXY = "NO_PROXY"

_lock = threading.Lock()
_depth = 0
_saved: dict[str, str | None] = {}
_saved_children: dict[str, str | None] = {}


def _wanted(url: str) -> tuple[dict[str, str], dict[str, str]]:
    """What ``os.environ`` holds under the simulator, and what only the children see."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    seen = {SIMULATOR_ENV: url}
    for name in os.environ:
        upper = name.upper()
        if upper.endswith(_SECRET_ENDINGS):
            seen[name] = PLACEHOLDER
        elif upper.endswith(_BASE_ENDINGS):
            seen[name] = url
    for name in _BASE_URLS:
        seen[name] = url
    children: dict[str, str] = {}
    for name in _PROXIES:
        children[name] = children[name.lower()] = origin
    children[_NO_PROXY] = children[_NO_PROXY.lower()] = parts.netloc
    return seen, children


@contextlib.contextmanager
def simulated(url: str) -> Iterator[None]:
    """The environment of a ``--simulator`` run, while inside (nested: the outermost
    one's; restored when the last ends).

    The proxies are set for the children only (``os.putenv``, not ``os.environ``): in
    the engine's process they would reach the engine's own clients, and outlive the run
    in what caches them (``urllib``'s opener); user code there is held by the sealed
    audit hook instead. A child started with ``env=`` built from ``os.environ`` gets the
    placeholder keys, not the proxies.
    """
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            seen, children = _wanted(url)
            for name, value in seen.items():
                _saved[name] = os.environ.get(name)
                os.environ[name] = value
            for name, value in children.items():
                _saved_children[name] = os.environ.get(name)
                os.putenv(name, value)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for name, old in _saved.items():
                    if old is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = old
                for name, old in _saved_children.items():
                    if old is None:
                        os.unsetenv(name)
                    else:
                        os.putenv(name, old)
                _saved.clear()
                _saved_children.clear()
