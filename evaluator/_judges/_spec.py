"""One judge model as the user described it: :class:`JudgeSpec`.

A spec is what a models file entry (or a ``--models`` name) says about one judge: the
name the server knows it by, the label rows and ``--reference`` use, where it is served
and which environment variable holds its key, its prices, limits and call options. It
turns into one :class:`llm_client.ModelConfig` per judge, so that each key travels only
with its own base URL: the rate governor and the HTTP client are per config. A mistake
in one is a :class:`~evaluator._exceptions.ModelsFileError`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from llm_client import ModelConfig

from .._exceptions import ConfigError

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_KEY_ENV", "JudgeSpec", "default_key_elsewhere"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def default_key_elsewhere(option: str, base_url: str, model: str) -> ConfigError | None:
    """The refusal of a command line that would send OpenAI's key to another server.

    ``--api-key-env`` not given means the default variable, OPENAI_API_KEY; that key is
    written for OpenAI's base URL and goes nowhere else. A model at another ``base_url``
    (``option``, the flag that named it) with no ``--api-key-env`` given is refused, with
    the flag to fix it, rather than sent no key: a server that needs a key would fail
    every call later, one that needs none is one flag away (``--api-key-env none``).
    None when ``base_url`` is OpenAI's.
    """
    if base_url.rstrip("/") == DEFAULT_BASE_URL:
        return None
    return ConfigError(
        f"names {base_url} (model {model!r}), not OpenAI's server, and --api-key-env is not "
        f"given: {DEFAULT_KEY_ENV}, the default, is sent only to {DEFAULT_BASE_URL}. Name the "
        "variable holding this server's key with --api-key-env VAR, or pass --api-key-env "
        "none for a server that takes no key",
        option=option,
        value=base_url,
    )


#: Spec fields passed to ModelConfig under the same name when they are set.
_CONFIG_FIELDS = (
    "base_url",
    "api_key_env",
    "rpm",
    "tpm",
    "max_concurrency",
    "timeout",
    "max_retries",
    "price_input",
    "price_output",
    "price_cached_input",
    "temperature",
    "max_tokens",
    "reasoning_effort",
    "hedge",
)


class JudgeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One judge: a model behind an OpenAI-compatible base URL, and how to call it.

    ``label`` names the row (unique within a comparison); ``model`` is the name the server
    knows. ``provider`` is the models file's provider table, if any. ``api_key_env`` is
    the *name* of the environment variable holding the key (None: send no key); the key
    itself is read only when the model's client opens. Unset limits, prices and options
    (None) take the ModelConfig defaults. ``source`` says where the spec came from, for
    error messages; ``simulated`` is True once the spec points at a local simulator.
    """

    label: str
    model: str
    provider: str | None = None
    base_url: str = DEFAULT_BASE_URL
    api_key_env: str | None = DEFAULT_KEY_ENV
    rpm: float | None = None
    tpm: float | None = None
    max_concurrency: int | None = None
    timeout: float | None = None
    max_retries: int | None = None
    price_input: float | None = None
    price_output: float | None = None
    price_cached_input: float | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    hedge: float | None = None
    source: str = ""
    simulated: bool = False

    @property
    def served_by(self) -> str:
        """What one simulated provider stands for: the provider table, else the base URL."""
        return self.provider if self.provider is not None else self.base_url

    def config(self) -> ModelConfig:
        """The model client's config; ModelConfigError when a value is out of range."""
        fields: dict[str, Any] = {"model": self.model, "api_key_env": self.api_key_env}
        for name in _CONFIG_FIELDS:
            value = getattr(self, name)
            if value is not None:
                fields[name] = value
        return ModelConfig(**fields)
