"""The user's own model SDKs, routed through the engine's model client.

Programs and metrics often call a model with the official ``openai`` client, ``litellm``
or ``dspy.LM`` rather than ``skynet.llm``. Their calls are taken at the HTTP-client layer
(``_intercept.py``), carried to the engine by the call's bridge (a hop to the loop from a
thread, the relay from a worker process), and served by the engine's model client with
the run's governor, retries, pricing and ``--simulator`` (``_gateway.py``); their usage is
metered into the example like that of ``skynet.llm``; calls from threads the user's
code starts included (``_owner.py``). Connections that go around every metered path, and
processes user code starts, make the example's cost unmeasured (``_audit.py``); under
``--simulator`` those connections are refused, and children get no key
(``_environ.py``). ``docs/architecture/sdk.md`` says why this layer, what a call costs,
and what it cannot see.

Only the request's data is re-exported here: a worker process imports this package at
boot (the relay carries requests), and must not load the gateway's event-loop side.
"""

from ._request import CannotRoute as CannotRoute
from ._request import SDKRequest as SDKRequest

__all__ = ["CannotRoute", "SDKRequest"]
