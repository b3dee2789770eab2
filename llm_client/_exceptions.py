"""Exceptions of the model client.

    LLMError                 a model call that was given up; carries status and message
"""

from __future__ import annotations


class LLMError(Exception):
    """A model call failed for good (after any retries). Never carries the API key."""

    def __init__(self, message: str, *, status: int | None = None, model: str | None = None) -> None:
        self.status = status
        self.model = model
        self.message = message
        super().__init__(message if status is None else f"HTTP {status}: {message}")
