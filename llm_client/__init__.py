"""An async client for OpenAI-compatible chat completions, with a rate governor.

``ModelClient.complete`` sends a chat completion it builds; ``ModelClient.forward`` sends a
request an SDK built (chat completions, the Responses API, Anthropic messages; streamed or
not) through the same governor, retries and pricing.

The product is the client (``_client``, ``_forward``, ``_usage``, ``_config``,
``_governor``, ``_hedge``, ``_fair``, ``_budget``, ``_retry``, ``_pricing``, ``_wire``,
``_exceptions``, ``_redact``); ``_transports/`` is how its requests reach a server, and
``_simulator/`` a local OpenAI-compatible server to test and measure it against.
``docs/architecture/llm-client.md`` draws the whole. Imports nothing else of skynet-eval's;
nothing here binds to an event loop at import.

Names are imported when first used (a module ``__getattr__``, as ``evaluator`` does):
``import llm_client`` loads only :class:`TokenUsage`, which the engine's results and
every worker process hold, never the client itself. Type checkers read the explicit
re-exports below.
"""

import importlib
import typing

# Eager: the token counts' one definition, which the engine's call layer (every worker
# process) imports; it loads no more of the client than ``_usage`` and ``_wire``.
from ._usage import TokenUsage as TokenUsage

if typing.TYPE_CHECKING:
    from ._client import Completion as Completion
    from ._client import ModelClient as ModelClient
    from ._config import ModelConfig as ModelConfig
    from ._exceptions import BudgetExhaustedError as BudgetExhaustedError
    from ._exceptions import ClientClosedError as ClientClosedError
    from ._exceptions import LLMError as LLMError
    from ._exceptions import ModelClientError as ModelClientError
    from ._exceptions import ModelConfigError as ModelConfigError
    from ._exceptions import RequestTooLargeError as RequestTooLargeError
    from ._fair import Share as Share
    from ._fair import current_share as current_share
    from ._fair import sharing as sharing
    from ._forward import Forwarded as Forwarded
    from ._governor import GovernorStatistics as GovernorStatistics
    from ._governor import RateGovernor as RateGovernor
    from ._hedge import Hedge as Hedge
    from ._hedge import HedgeStatistics as HedgeStatistics
    from ._redact import Redactor as Redactor
    from ._retry import RetryDetails as RetryDetails
    from ._simulator import ModelSettings as ModelSettings
    from ._simulator import Simulator as Simulator
    from ._simulator import SimulatorConfig as SimulatorConfig
    from ._simulator import SimulatorStatistics as SimulatorStatistics
    from ._spend import Spend as Spend
    from ._transports import AiohttpTransport as AiohttpTransport
    from ._transports import HTTPRequest as HTTPRequest
    from ._transports import HTTPResponse as HTTPResponse
    from ._transports import HTTPTransport as HTTPTransport
    from ._transports import MockTransport as MockTransport
    from ._transports import Transport as Transport
    from ._transports import TransportError as TransportError
    from ._usage import TokenUsage as TokenUsage

#: Where each lazily imported public name lives.
_WHERE = {
    "Completion": "._client",
    "ModelClient": "._client",
    "ModelConfig": "._config",
    "BudgetExhaustedError": "._exceptions",
    "ClientClosedError": "._exceptions",
    "LLMError": "._exceptions",
    "ModelClientError": "._exceptions",
    "ModelConfigError": "._exceptions",
    "RequestTooLargeError": "._exceptions",
    "Share": "._fair",
    "current_share": "._fair",
    "sharing": "._fair",
    "Forwarded": "._forward",
    "GovernorStatistics": "._governor",
    "RateGovernor": "._governor",
    "Hedge": "._hedge",
    "HedgeStatistics": "._hedge",
    "Redactor": "._redact",
    "RetryDetails": "._retry",
    "ModelSettings": "._simulator",
    "Simulator": "._simulator",
    "SimulatorConfig": "._simulator",
    "SimulatorStatistics": "._simulator",
    "Spend": "._spend",
    "AiohttpTransport": "._transports",
    "HTTPRequest": "._transports",
    "HTTPResponse": "._transports",
    "HTTPTransport": "._transports",
    "MockTransport": "._transports",
    "Transport": "._transports",
    "TransportError": "._transports",
}

__all__ = [
    "AiohttpTransport",
    "BudgetExhaustedError",
    "ClientClosedError",
    "Completion",
    "Forwarded",
    "GovernorStatistics",
    "HTTPRequest",
    "HTTPResponse",
    "HTTPTransport",
    "Hedge",
    "HedgeStatistics",
    "LLMError",
    "MockTransport",
    "ModelClient",
    "ModelClientError",
    "ModelConfig",
    "ModelConfigError",
    "ModelSettings",
    "RateGovernor",
    "Redactor",
    "RequestTooLargeError",
    "RetryDetails",
    "Share",
    "Simulator",
    "SimulatorConfig",
    "SimulatorStatistics",
    "Spend",
    "TokenUsage",
    "Transport",
    "TransportError",
    "current_share",
    "sharing",
]


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    # The public names only: the client's modules are not the package's API.
    return sorted(__all__)
