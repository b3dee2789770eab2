"""An async client for OpenAI-compatible chat completions, with a rate governor."""

from ._exceptions import LLMError as LLMError

__all__ = ["LLMError"]
