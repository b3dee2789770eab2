"""Model settings: one frozen, validated struct per model endpoint."""

from __future__ import annotations

import math
import os

import msgspec

from ._exceptions import ModelConfigError
from ._hedge import Hedge, as_hedge

__all__ = ["ModelConfig"]


def _positive(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelConfigError(f"`{name}` must be a number, got {value!r}", field=name, value=value)
    if not math.isfinite(value) or value <= 0:
        raise ModelConfigError(f"`{name}` must be positive, got {value!r}", field=name, value=value)


def _non_negative(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelConfigError(f"`{name}` must be a number, got {value!r}", field=name, value=value)
    if not math.isfinite(value) or value < 0:
        raise ModelConfigError(
            f"`{name}` must be zero or more, got {value!r}", field=name, value=value
        )


def _int_at_least(name: str, value: int | None, low: int, high: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelConfigError(
            f"`{name}` must be an integer, got {value!r}", field=name, value=value
        )
    if not low <= value <= high:
        raise ModelConfigError(
            f"`{name}` must be between {low} and {high}, got {value}", field=name, value=value
        )


OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_KEY_ENV = "OPENAI_API_KEY"


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach one model and how hard to push it.

    ``base_url`` is an OpenAI-compatible endpoint ending before ``/chat/completions``
    (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1`` for vLLM, llama.cpp or
    Ollama). The API key is read from the environment variable ``api_key_env`` when the
    client opens (``None``: send no key), so a config can be printed, logged and pickled
    without leaking it. Left unset it is ``OPENAI_API_KEY``, whose key goes to OpenAI's
    base URL only: a config for another server that does not name its key's variable is
    refused when the key is read, rather than sent OpenAI's key.

    Limits: ``rpm``/``tpm`` (None: unlimited) feed the rate governor shared by every client
    of the same (base URL, key, model); ``max_concurrency`` caps requests in flight: the
    governor keeps in flight what the budget allows at the measured latency (Little's law),
    or, with no budget known, grows while latency stays flat (``_concurrency.py``),
    starting from 64 and never past this cap.
    ``rate_margin`` paces that fraction below ``rpm``/``tpm``, so that arrival jitter
    between this process and the server's own window does not trip the server's limiter.
    ``timeout`` bounds one HTTP attempt, ``deadline`` (None: none) the whole call including
    queueing and retries; ``max_retries`` counts attempts after the first.

    Prices are overrides in USD per million tokens; unset ones come from genai-prices.
    ``max_tokens``, ``temperature`` and ``reasoning_effort`` are defaults for every call (a
    call's own options win); ``reasoning_effort`` is sent as the chat completions field of
    that name (``"low"``, ``"high"``...: what the model accepts is the server's to say).

    ``hedge`` (None: off) sends a second copy of a call that has waited past a quantile of
    the model's recent latencies, within the rate budget: a number is the quantile
    (``0.95``), a :class:`~llm_client._hedge.Hedge` sets the rest (``_hedge.py``).
    """

    model: str
    base_url: str = OPENAI_BASE_URL
    #: Unset: OpenAI's variable, for OpenAI's base URL only (see :meth:`api_key`).
    api_key_env: str | msgspec.UnsetType | None = msgspec.UNSET
    rpm: float | None = None
    tpm: float | None = None
    max_concurrency: int = 1024
    rate_margin: float = 0.02
    timeout: float = 60.0
    deadline: float | None = None
    max_retries: int = 6
    price_input: float | None = None
    price_output: float | None = None
    price_cached_input: float | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None
    hedge: Hedge | float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ModelConfigError(
                f"`model` must be a non-empty string, got {self.model!r}",
                field="model",
                value=self.model,
            )
        if not isinstance(self.base_url, str) or not self.base_url.startswith(
            ("http://", "https://")
        ):
            raise ModelConfigError(
                f"`base_url` must start with http:// or https://, got {self.base_url!r}",
                field="base_url",
                value=self.base_url,
            )
        if (
            self.api_key_env is not None
            and self.api_key_env is not msgspec.UNSET
            and (not isinstance(self.api_key_env, str) or not self.api_key_env.strip())
        ):
            raise ModelConfigError(
                "`api_key_env` must name an environment variable (or be None for a server "
                f"without keys), got {self.api_key_env!r}",
                field="api_key_env",
                value=self.api_key_env,
            )
        _positive("rpm", self.rpm)
        _positive("tpm", self.tpm)
        _int_at_least("max_concurrency", self.max_concurrency, 1, 100_000)
        if isinstance(self.rate_margin, bool) or not isinstance(self.rate_margin, int | float):
            raise ModelConfigError(
                f"`rate_margin` must be a number, got {self.rate_margin!r}",
                field="rate_margin",
                value=self.rate_margin,
            )
        if not 0 <= self.rate_margin <= 0.5:
            raise ModelConfigError(
                f"`rate_margin` must be between 0 and 0.5, got {self.rate_margin!r}",
                field="rate_margin",
                value=self.rate_margin,
            )
        _positive("timeout", self.timeout)
        _positive("deadline", self.deadline)
        _int_at_least("max_retries", self.max_retries, 0, 100)
        _non_negative("price_input", self.price_input)
        _non_negative("price_output", self.price_output)
        _non_negative("price_cached_input", self.price_cached_input)
        _int_at_least("max_tokens", self.max_tokens, 1, 10_000_000)
        if self.temperature is not None:
            _non_negative("temperature", self.temperature)
            if self.temperature > 2:
                raise ModelConfigError(
                    f"`temperature` must be between 0 and 2, got {self.temperature!r}",
                    field="temperature",
                    value=self.temperature,
                )
        if self.reasoning_effort is not None and (
            not isinstance(self.reasoning_effort, str) or not self.reasoning_effort.strip()
        ):
            raise ModelConfigError(
                "`reasoning_effort` must be a non-empty string such as 'low' or 'high', got "
                f"{self.reasoning_effort!r}",
                field="reasoning_effort",
                value=self.reasoning_effort,
            )
        if self.hedge is not None and not isinstance(self.hedge, Hedge):
            # One form from here on: the client reads a Hedge.
            msgspec.structs.force_setattr(self, "hedge", as_hedge(self.hedge))

    @property
    def endpoint(self) -> str:
        """The chat completions URL."""
        return self.base_url.rstrip("/") + "/chat/completions"

    def api_key(self) -> str | None:
        """Read the key from the environment; a missing variable is a clear error, and so
        is an unset ``api_key_env`` with a base URL other than OpenAI's."""
        env = self.api_key_env
        if env is None:
            return None
        if env is msgspec.UNSET:
            if self.base_url.rstrip("/") != OPENAI_BASE_URL:
                raise ModelConfigError(
                    f"model {self.model!r} at {self.base_url} names no `api_key_env`, and "
                    f"the default {OPENAI_KEY_ENV} is sent only to {OPENAI_BASE_URL}: pass "
                    "api_key_env='<the variable holding this server's key>', or "
                    "api_key_env=None for a server that takes no key",
                    field="api_key_env",
                    value=None,
                )
            env = OPENAI_KEY_ENV
        key = os.environ.get(env)
        if not key:
            raise ModelConfigError(
                f"environment variable {env} (the `api_key_env` of model "
                f"{self.model!r}) is not set: export it, or pass api_key_env=None for a "
                "server that takes no key",
                field="api_key_env",
                value=env,
            )
        return key
