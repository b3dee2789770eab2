"""A DSPy or GEPA user's judge model, as the engine's ``ModelConfig``.

A DSPy user holds a ``dspy.LM``; a GEPA user names a model the litellm way
(``"openai/gpt-4.1-mini"``); an engine user has a ``ModelConfig`` or ``Models``. The judge's
calls go through the engine's own model client (one rate governor, retries, metering,
prices), which speaks OpenAI-compatible chat completions, so each form becomes a
``ModelConfig`` here:

- the provider prefix gives the base URL and the variable the key is read from, as
  litellm reads them (``PROVIDERS``); a prefix whose provider does not speak that protocol
  is refused with the list of those that do, rather than guessed;
- the LM's ``api_base``/``base_url`` and ``api_key`` win over both; ``temperature``,
  ``max_tokens``, ``timeout`` and ``num_retries`` go on the config; the other request
  options an LM may carry (``top_p``, ``stop``, ``seed``...) become per-call defaults;
  anything else (``headers``, ``api_version``...) is refused by name, never dropped.

An ``api_key`` given as a value (``dspy.LM(..., api_key=...)``) stays in memory
(:class:`KeyedModelConfig`): a ``ModelConfig`` otherwise names an environment variable, so
that a config can be printed and logged; this one prints ``'[api key]'`` in its place and
refuses to be pickled.

Also here, shared by the DSPy and GEPA adapters: combining ``lm``/``reflection_lm`` with
``models``, checking the keys before any call, reading a ``simulator`` option, and serving
the models from that simulator.
"""

from __future__ import annotations

import contextlib
import hmac
import math
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec

from llm_client import ModelConfig, ModelConfigError

from ._exceptions import ConfigError
from ._models import Models

if TYPE_CHECKING:
    from llm_client import SimulatorConfig

__all__ = [
    "PROVIDERS",
    "JudgeModels",
    "KeyedModelConfig",
    "check_keys",
    "litellm_name",
    "model_config",
    "resolve_models",
    "served",
    "simulator_config",
]


@dataclass(frozen=True, slots=True)
class Provider:
    """Where a litellm provider prefix sends an OpenAI-compatible chat completion."""

    base_url: str | None  # None: the user must give api_base
    base_env: tuple[str, ...]  # variables that override the base URL, in litellm's order
    key_env: str | None
    key_optional: bool = False  # a local server: no key unless its variable is set
    path: str = ""  # appended to the base URL: where the OpenAI-compatible API lives


#: The provider prefixes the engine can call, with litellm's defaults (litellm 1.x,
#: ``main.py`` and ``get_llm_provider_logic.py``). A name without a prefix is OpenAI's,
#: as for dspy and litellm.
PROVIDERS: dict[str, Provider] = {
    "openai": Provider(
        "https://api.openai.com/v1", ("OPENAI_BASE_URL", "OPENAI_API_BASE"), "OPENAI_API_KEY"
    ),
    "hosted_vllm": Provider(
        None, ("HOSTED_VLLM_API_BASE",), "HOSTED_VLLM_API_KEY", key_optional=True
    ),
    "ollama": Provider(
        "http://localhost:11434",
        ("OLLAMA_API_BASE",),
        "OLLAMA_API_KEY",
        key_optional=True,
        path="/v1",
    ),
    "ollama_chat": Provider(
        "http://localhost:11434",
        ("OLLAMA_API_BASE",),
        "OLLAMA_API_KEY",
        key_optional=True,
        path="/v1",
    ),
    "openrouter": Provider(
        "https://openrouter.ai/api/v1", ("OPENROUTER_API_BASE",), "OPENROUTER_API_KEY"
    ),
    "groq": Provider("https://api.groq.com/openai/v1", ("GROQ_API_BASE",), "GROQ_API_KEY"),
    "mistral": Provider("https://api.mistral.ai/v1", ("MISTRAL_API_BASE",), "MISTRAL_API_KEY"),
}

#: Request fields ``ModelClient.complete`` takes as options, beyond what a config holds.
_REQUEST_OPTIONS = frozenset(
    {
        "max_completion_tokens",
        "top_p",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "response_format",
        "reasoning_effort",
        "user",
        "extra_body",
    }
)
#: dspy's own keys in ``LM.kwargs`` that are not request fields and change no reply.
_DSPY_ONLY = frozenset({"rollout_id"})


class _Secret:
    """An API key held in memory: never printed, compared in constant time, never pickled."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'[api key]'"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((_Secret, self._value))

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "an API key given as a value is not pickled; set it in an environment "
            "variable and name it in ModelConfig(api_key_env=...) instead"
        )


class KeyedModelConfig(ModelConfig, frozen=True, kw_only=True):
    """A ``ModelConfig`` whose key was given as a value (``dspy.LM(api_key=...)``).

    The key is held in memory (its repr is ``'[api key]'``) and read by the model client
    through :meth:`api_key`, like a key from the environment.
    """

    key: _Secret

    def api_key(self) -> str | None:
        return self.key.reveal()


def _refuse(option: str, problem: str, value: Any) -> NoReturn:
    raise ConfigError(problem, option=option, value=value)


def _supported() -> str:
    return ", ".join(f"{prefix}/" for prefix in PROVIDERS) + " (or no prefix, for OpenAI)"


def _provider(model: str, option: str) -> tuple[Provider, str]:
    prefix, slash, name = model.partition("/")
    if not slash:
        prefix, name = "openai", model
    provider = PROVIDERS.get(prefix)
    if provider is None:
        _refuse(
            option,
            f"names {model!r}, whose provider {prefix!r} skynet-eval cannot call: the "
            f"engine speaks OpenAI-compatible chat completions. Supported prefixes: "
            f"{_supported()}. For another OpenAI-compatible server use 'openai/<model>' "
            "with api_base='https://...', or pass an llm_client.ModelConfig",
            model,
        )
    if not name.strip():
        _refuse(option, f"names {model!r}, which has no model after the prefix", model)
    return provider, name


def litellm_name(model: str, option: str) -> tuple[str, str, str | None] | None:
    """A litellm-style name (``openai/gpt-4o-mini``, ``groq/llama-3.1-8b``) as the
    model's own name, its provider's base URL and the variable its key is in (None: a
    local server that takes none unless set); None for a name without a known prefix."""
    prefix, slash, _ = model.partition("/")
    if not slash or prefix not in PROVIDERS:
        return None
    provider, name = _provider(model, option)
    key_env = provider.key_env
    if provider.key_optional and key_env is not None and not os.environ.get(key_env):
        key_env = None
    return name, _base_url(provider, None, model, option), key_env


def _base_url(provider: Provider, given: Any, model: str, option: str) -> str:
    base = given
    if base is None:
        base = next((os.environ[v] for v in provider.base_env if os.environ.get(v)), None)
    if base is None:
        base = provider.base_url
    if base is None:
        _refuse(
            option,
            f"names {model!r}, which needs the server's address: pass api_base='http://...' "
            f"(or set {provider.base_env[0]})",
            model,
        )
    if not isinstance(base, str):
        _refuse(option, f"has an api_base that is not a string: {base!r}", model)
    base = base.rstrip("/")
    if provider.path and not base.endswith(provider.path):
        base += provider.path
    return base


def _pop_base(kwargs: dict[str, Any], model: str, option: str) -> Any:
    api_base, base_url = kwargs.pop("api_base", None), kwargs.pop("base_url", None)
    if api_base is not None and base_url is not None and api_base != base_url:
        _refuse(option, f"({model!r}) gives both api_base and base_url; give one", model)
    return api_base if api_base is not None else base_url


def _number(kwargs: dict[str, Any], name: str, model: str, option: str) -> Any:
    value = kwargs.pop(name, None)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        _refuse(option, f"({model!r}) has {name}={value!r}; it must be a number", model)
    return value


def _from_name(
    model: str, kwargs: dict[str, Any], option: str, num_retries: Any = None
) -> tuple[ModelConfig, dict[str, Any]]:
    """A litellm-style model name and an LM's keyword arguments as a config and options."""
    provider, name = _provider(model, option)
    kwargs = {k: v for k, v in kwargs.items() if v is not None and k not in _DSPY_ONLY}
    fields: dict[str, Any] = {
        "model": name,
        "base_url": _base_url(provider, _pop_base(kwargs, model, option), model, option),
    }
    for field in ("temperature", "max_tokens", "timeout"):
        value = _number(kwargs, field, model, option)
        if value is not None:
            fields[field] = value
    if num_retries is not None:
        fields["max_retries"] = num_retries
    key = kwargs.pop("api_key", None)
    unknown = sorted(k for k in kwargs if k not in _REQUEST_OPTIONS)
    if unknown:
        _refuse(
            option,
            f"({model!r}) carries {', '.join(map(repr, unknown))}, which the engine's model "
            "client cannot send (it sends the request fields and an Authorization key only); "
            "remove them, or pass an llm_client.ModelConfig",
            model,
        )
    options = dict(kwargs)
    try:
        if key is not None:
            if not isinstance(key, str) or not key:
                _refuse(option, f"({model!r}) has an api_key that is not a string", model)
            return KeyedModelConfig(**fields, api_key_env=None, key=_Secret(key)), options
        key_env = provider.key_env
        if provider.key_optional and key_env is not None and not os.environ.get(key_env):
            key_env = None
        return ModelConfig(**fields, api_key_env=key_env), options
    except ModelConfigError as exc:
        raise ConfigError(f"({model!r}): {exc}", option=option, value=model) from None


def _from_lm(lm: Any, option: str) -> tuple[ModelConfig, dict[str, Any]]:
    model = lm.model
    engine = getattr(lm, "engine", "auto")
    if not isinstance(engine, str):
        _refuse(
            option,
            f"is a dspy.LM ({model!r}) with a custom engine, which owns its own connection; "
            "pass an llm_client.ModelConfig for the judge instead",
            model,
        )
    model_type = getattr(lm, "model_type", "chat")
    if model_type != "chat":
        _refuse(
            option,
            f"is a dspy.LM ({model!r}) with model_type={model_type!r}; the engine sends chat "
            "completions: use model_type='chat'",
            model,
        )
    return _from_name(model, dict(lm.kwargs), option, getattr(lm, "num_retries", None))


def model_config(spec: Any, *, option: str) -> tuple[ModelConfig, dict[str, Any]]:
    """``spec`` (a ``dspy.LM``, a ``ModelConfig`` or a litellm-style model name) as a config
    and the per-call request options it carries; ``ConfigError`` naming ``option`` else."""
    if isinstance(spec, ModelConfig):
        return spec, {}
    if isinstance(spec, str):
        return _from_name(spec, {}, option)
    if isinstance(getattr(spec, "model", None), str) and isinstance(
        getattr(spec, "kwargs", None), dict
    ):
        return _from_lm(spec, option)
    _refuse(
        option,
        "must be a dspy.LM, an llm_client.ModelConfig or a model name such as "
        f"'openai/gpt-4o-mini', got {type(spec).__name__}",
        spec,
    )


@dataclass(frozen=True, slots=True)
class JudgeModels:
    """The models of an adapter, the options its judge's calls carry, and which argument
    named each model (for error messages)."""

    models: Models
    options: Mapping[str, Any]
    named_by: Mapping[str, str]  # "metric" / "reflection" / "program" -> the argument


def _limit(value: Any, option: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _refuse(option, f"must be a positive number, got {value!r}", value)
    if value <= 0:
        _refuse(option, f"must be a positive number, got {value!r}", value)
    return float(value)


def _one(
    spec: Any, from_models: ModelConfig | None, option: str, field: str
) -> tuple[ModelConfig | None, dict[str, Any], str]:
    if spec is not None and from_models is not None:
        _refuse(
            option,
            f"and `models.{field}` both name the {field} model; pass one of them",
            spec,
        )
    if spec is not None:
        config, options = model_config(spec, option=option)
        return config, options, f"`{option}`"
    return from_models, {}, f"`models.{field}`"


def resolve_models(
    *,
    lm: Any,
    reflection_lm: Any,
    models: Any,
    rpm: Any = None,
    tpm: Any = None,
    lm_option: str = "lm",
    keep_program: bool = False,
) -> JudgeModels:
    """One ``Models`` from the adapter's arguments: ``lm`` (the metric model) and
    ``reflection_lm`` (the fallback) beside ``models``, each model named once; ``rpm`` and
    ``tpm`` set on every model. The per-call options are those of the model that serves
    the metric's ``llm()`` (the metric model, else the reflection model)."""
    if models is not None and not isinstance(models, Models):
        _refuse("models", f"must be an evaluator.Models, got {type(models).__name__}", models)
    given = models or Models()
    metric, metric_options, metric_name = _one(lm, given.metric, lm_option, "metric")
    reflection, reflection_options, reflection_name = _one(
        reflection_lm, given.reflection, "reflection_lm", "reflection"
    )
    program = given.program if keep_program else None
    limits = {
        name: value
        for name, value in (("rpm", _limit(rpm, "rpm")), ("tpm", _limit(tpm, "tpm")))
        if value is not None
    }
    configs = {"metric": metric, "reflection": reflection, "program": program}
    if limits:
        if all(c is None for c in configs.values()):
            name = "rpm" if "rpm" in limits else "tpm"
            _refuse(name, f"limits the judge's model, but no model is given: pass {lm_option}=", 0)
        configs = {k: None if c is None else _replace(c, **limits) for k, c in configs.items()}
    resolved = Models(
        program=configs["program"], metric=configs["metric"], reflection=configs["reflection"]
    )
    named_by = {"metric": metric_name, "reflection": reflection_name, "program": "`models.program`"}
    options = metric_options if metric is not None else reflection_options
    return JudgeModels(resolved, options, named_by)


def _replace(config: ModelConfig, **changes: Any) -> ModelConfig:
    try:
        return msgspec.structs.replace(config, **changes)
    except ModelConfigError as exc:
        raise ConfigError(str(exc)) from None


def check_keys(judge: JudgeModels) -> None:
    """Read every model's key now, so a missing one is one clear error before any call
    (not one failed score per example); the error names the variable, never a value."""
    for field in ("metric", "reflection", "program"):
        config: ModelConfig | None = getattr(judge.models, field)
        if config is None:
            continue
        try:
            config.api_key()
        except ModelConfigError as exc:
            if exc.value is None:  # no variable named for a server other than OpenAI's
                raise ConfigError(f"{judge.named_by[field]}: {exc}") from None
            raise ConfigError(
                f"environment variable {exc.value} is not set; it holds the key of "
                f"model {config.model!r} ({judge.named_by[field]}): export it, give the key "
                "as dspy.LM(..., api_key=...), or pass simulator= to serve the model locally"
            ) from None


def simulator_config(value: Any, option: str = "simulator") -> SimulatorConfig | None:
    """The ``simulator`` option: a ``SimulatorConfig``, a dict of its fields, or the path
    of a JSON file holding one (as ``skynet-eval run --simulator``)."""
    if value is None:
        return None
    from llm_client import SimulatorConfig

    if isinstance(value, SimulatorConfig):
        return value
    if isinstance(value, str | Path):
        try:
            data = Path(value).read_bytes()
        except OSError as exc:
            _refuse(option, f"cannot read {str(value)!r}: {exc.strerror or exc}", value)
        try:
            return msgspec.json.decode(data, type=SimulatorConfig)
        except (msgspec.MsgspecError, ValueError) as exc:
            _refuse(option, f"{str(value)!r}: {exc}", value)
    if isinstance(value, Mapping):
        try:
            return msgspec.convert(dict(value), SimulatorConfig)
        except (msgspec.MsgspecError, ValueError) as exc:
            _refuse(option, f"is not a valid SimulatorConfig: {exc}", value)
    _refuse(
        option,
        "must be an llm_client.SimulatorConfig, a dict of its fields or the path of a "
        f"JSON file, got {type(value).__name__}",
        value,
    )


def _pointed_at(config: ModelConfig, base_url: str) -> ModelConfig:
    """``config`` served by a local simulator: its URL, no key (a plain ModelConfig)."""
    fields = {name: getattr(config, name) for name in ModelConfig.__struct_fields__}
    fields.update(base_url=base_url, api_key_env=None)
    return ModelConfig(**fields)


@contextlib.asynccontextmanager
async def served(models: Models, simulator: SimulatorConfig | None) -> AsyncIterator[Models]:
    """``models`` as they are, or, with a simulator, each pointed at a simulator started
    here on 127.0.0.1 (no key sent) and stopped on the way out."""
    if simulator is None:
        yield models
        return
    from llm_client import Simulator

    async with Simulator(simulator) as sim:
        pointed = {
            field: None if config is None else _pointed_at(config, sim.base_url)
            for field in ("program", "metric", "reflection")
            for config in (getattr(models, field),)
        }
        yield Models(
            program=pointed["program"], metric=pointed["metric"], reflection=pointed["reflection"]
        )
