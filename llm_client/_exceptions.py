"""Exceptions of the model client: one root, a model call's failure apart from usage errors.

    ModelClientError               every exception llm_client raises on purpose
     ├── LLMError                  a model call failed for good, after any retries: status,
     │    │                        model, provider code, attempts (the engine's `llm_error`)
     │    ├── RequestTooLargeError   a request whose token reservation exceeds the whole TPM
     │    │                          budget: it can never be sent
     │    └── BudgetExhaustedError   a call not sent: its worst case does not fit what is
     │                               left of a spending limit (``_spend.py``; the engine's
     │                               `budget_exhausted`)
     ├── TransportError            one HTTP attempt got no usable response (connect, timeout,
     │                             disconnected); raised by transports, caught by the client,
     │                             which retries or gives up with an LLMError
     ├── ModelConfigError          usage: a ModelConfig, SimulatorConfig or ModelSettings
     │                             field out of range, or the key's variable unset (ValueError)
     └── ClientClosedError         usage: a ModelClient used outside its ``async with``
                                   (RuntimeError)

Why usage errors are not LLMErrors: an ``LLMError`` says the model was asked and did not
answer, which an evaluation counts against the call (``llm_error``) and a caller may wait
out; a bad config or a closed client is the caller's own mistake, which no retry fixes and
the message says how to fix.

Every exception pickles whole, with every attribute, so that one raised in the engine
arrives in a worker process (and back) as it was raised.

Messages never carry an API key: every text the client makes or passes on (provider
messages, what a transport quotes, an unexpected exception out of a transport) goes through
the client's :class:`~llm_client._redact.Redactor` before it leaves ``llm_client``, and
transport exceptions are not chained.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "BudgetExhaustedError",
    "ClientClosedError",
    "LLMError",
    "ModelClientError",
    "ModelConfigError",
    "RequestTooLargeError",
    "TransportError",
    "TransportErrorKind",
]

TransportErrorKind = Literal["connect", "timeout", "disconnected", "other"]


class ModelClientError(Exception):
    """The root of every exception the model client raises on purpose."""

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickling replays ``self.args`` into ``__init__``: keyword-only data is
        # lost, and a constructor that needs more than the message fails. Rebuild from the
        # arguments and the attributes instead, without running ``__init__`` again.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(
    cls: type[ModelClientError], args: tuple[Any, ...], state: dict[str, Any]
) -> ModelClientError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class LLMError(ModelClientError):
    """A model call failed for good (after any retries). Never carries the API key.

    ``status`` is the last HTTP status seen (None when no response came: a connect error,
    a timeout, a refused request); ``code`` the provider's error code or type when it sent
    one (``"insufficient_quota"``, ``"rate_limit_exceeded"``); ``attempts`` how many HTTP
    attempts were made, ``retries`` how many of them were retries and ``rate_limited`` how
    many were answered 429, so that a call that failed still counts in the statistics.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        model: str | None = None,
        code: str | None = None,
        attempts: int = 0,
        retries: int = 0,
        rate_limited: int = 0,
    ) -> None:
        self.status = status
        self.model = model
        self.message = message
        self.code = code
        self.attempts = attempts
        self.retries = retries
        self.rate_limited = rate_limited
        super().__init__(message if status is None else f"HTTP {status}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only data does not survive the default pickling (which replays
        # ``self.args``); a relayed error must arrive whole, with its counts. Rebuilt
        # through the constructor, so the message is formatted as it was.
        return (
            _rebuild,
            (
                type(self),
                self.message,
                {
                    "status": self.status,
                    "model": self.model,
                    "code": self.code,
                    "attempts": self.attempts,
                    "retries": self.retries,
                    "rate_limited": self.rate_limited,
                },
                self.__dict__,
            ),
        )


def _rebuild(
    cls: type[LLMError], message: str, data: dict[str, Any], state: dict[str, Any]
) -> LLMError:
    error = cls(message, **data)
    error.__dict__.update(state)
    return error


class RequestTooLargeError(LLMError):
    """A request needs more tokens than the whole per-minute budget: it can never be sent."""


class BudgetExhaustedError(LLMError):
    """A model call was not sent: it does not fit what is left of a spending limit."""


class TransportError(ModelClientError):
    """No usable response to one attempt; ``kind`` says why, in the retry logic's terms.

    ``response_started``: the status line had arrived (a timeout then is a body timeout,
    which the client retries only once). ``detail`` names host and port, never headers.
    """

    def __init__(self, kind: TransportErrorKind, detail: str, *, response_started: bool) -> None:
        self.kind = kind
        self.detail = detail
        self.response_started = response_started
        super().__init__(f"{kind}: {detail}")


class ModelConfigError(ModelClientError, ValueError):
    """A configuration field is out of range; the message names the field and the value.

    ``field`` is the field's name (``"rpm"``, ``"models['judge']"``) and ``value`` what it
    was given, so that a command line can name its own flag; both None when the error is
    about no single field.
    """

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        self.message = message
        self.field = field
        self.value = value
        super().__init__(message)


class ClientClosedError(ModelClientError, RuntimeError):
    """The client is not open: use it inside ``async with ModelClient(...)``."""

    def __init__(self, message: str, *, model: str | None = None) -> None:
        self.message = message
        self.model = model
        super().__init__(message)
