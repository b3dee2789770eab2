"""Exceptions of the model client.

    LLMError                      a model call that was given up; carries status and message
     ├── ModelConfigError         a ModelConfig / SimulatorConfig field out of range (ValueError)
     ├── RequestTooLargeError     a request whose token reservation exceeds the whole TPM budget
     └── ClientClosedError        a ModelClient used outside its ``async with`` (RuntimeError)

Messages never carry an API key: provider text is scrubbed before it reaches an exception
(see ``_redact`` in ``_client.py``) and transport exceptions are not chained.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ClientClosedError", "LLMError", "ModelConfigError", "RequestTooLargeError"]


class LLMError(Exception):
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
        # ``self.args``); a relayed error must arrive whole, with its counts.
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


class ModelConfigError(LLMError, ValueError):
    """A configuration field is out of range; the message names the field and the value."""


class RequestTooLargeError(LLMError):
    """A request needs more tokens than the whole per-minute budget: it can never be sent."""


class ClientClosedError(LLMError, RuntimeError):
    """The client is not open: use it inside ``async with ModelClient(...)``."""
