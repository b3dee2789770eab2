"""From the judges command's flags to ready judges: the thin layer under the CLI.

``judges_from_flags`` turns ``--models``/``--models-file`` and their companions into
:class:`JudgeSpec` s and checks, before any work starts, that every key the run will need
is in the environment; ``serve_judges`` points them at local simulators for
``--simulator``. The CLI only maps its flags onto these.

Simulation: with a simulator config every judge is served on 127.0.0.1, one simulator per
provider (a models file's provider table, else a distinct base URL), each on its own
port, so that providers keep apart as they do for real: their own connections, limits
and faults. Model names must be ones the config serves. No key is sent to a simulator
(it takes none): keys stay in the environment.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from llm_client import ModelConfigError

from .._exceptions import ConfigError, ModelsFileError
from ._compare import MAX_REPEAT
from ._models_file import load_models_file
from ._spec import DEFAULT_BASE_URL, DEFAULT_KEY_ENV, JudgeSpec, default_key_elsewhere

if TYPE_CHECKING:
    from llm_client import SimulatorConfig

__all__ = [
    "check_keys",
    "check_simulated",
    "choose_reference",
    "judges_from_flags",
    "parse_price",
    "serve_judges",
]


def parse_price(text: str) -> tuple[str, float, float]:
    """``--price LABEL=INPUT,OUTPUT`` (USD per million tokens), for argparse's ``type=``."""
    label, sep, rest = text.partition("=")
    parts = rest.split(",")
    try:
        if not sep or len(parts) != 2 or not label.strip():
            raise ValueError
        price_in, price_out = float(parts[0]), float(parts[1])
        if not all(math.isfinite(p) and p >= 0 for p in (price_in, price_out)):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected MODEL=INPUT,OUTPUT in USD per million tokens (zero or more), "
            f"e.g. judge-mini=0.15,0.6; got {text!r}"
        ) from None
    return label.strip(), price_in, price_out


def _key_env(value: str | None) -> str | None:
    """``--api-key-env``: unset means OpenAI's variable; ``none`` means no key."""
    if value is None:
        return DEFAULT_KEY_ENV
    return None if value.strip().lower() == "none" else value


def _from_names(
    names: str, base_url: str | None, api_key_env: str | None, limits: dict[str, Any]
) -> list[JudgeSpec]:
    labels = [m.strip() for m in names.split(",") if m.strip()]
    if not labels:
        raise ConfigError("--models needs at least one model name")
    seen = {m for m in labels if labels.count(m) > 1}
    if seen:
        raise ConfigError(f"--models names {sorted(seen)} more than once; name each model once")
    specs = []
    for name in labels:
        spec = JudgeSpec(
            label=name,
            model=name,
            base_url=base_url or DEFAULT_BASE_URL,
            api_key_env=_key_env(api_key_env),
            source="--models",
            **limits,
        )
        try:
            spec.config()
        except ModelConfigError as exc:
            raise ConfigError(f"--models {name!r}: {exc}") from None
        specs.append(spec)
    return specs


def _with_prices(
    specs: list[JudgeSpec], price: Sequence[tuple[str, float, float]]
) -> list[JudgeSpec]:
    labels = [s.label for s in specs]
    prices: dict[str, tuple[float, float]] = {}
    for label, price_in, price_out in price:
        if label not in labels:
            raise ConfigError(f"--price names model {label!r}, which is not one of {labels}")
        prices[label] = (price_in, price_out)
    out = []
    for spec in specs:
        if spec.label in prices:
            if spec.price_input is not None:
                raise ConfigError(
                    f"--price {spec.label}=... and {spec.source} both set a price: keep one"
                )
            price_in, price_out = prices[spec.label]
            spec = msgspec.structs.replace(spec, price_input=price_in, price_output=price_out)
        out.append(spec)
    return out


def check_keys(specs: Sequence[JudgeSpec], environ: Mapping[str, str] | None = None) -> None:
    """Every judge's key variable is set (not empty): a missing key is a usage error before
    any work, not a failed row after it. Names the variable, never its value."""
    env = os.environ if environ is None else environ
    for spec in specs:
        if spec.api_key_env is None or env.get(spec.api_key_env):
            continue
        var = spec.api_key_env
        if spec.source == "--models":
            raise ConfigError(
                f"environment variable {var} (the --api-key-env of model {spec.label!r}) is not "
                "set: export it, or pass --api-key-env none for a server that takes no key"
            )
        path, _, where = spec.source.partition(": ")
        raise ModelsFileError(
            path,
            f"environment variable {var} (its `api_key_env`) is not set: export {var}, or set "
            'api_key_env = "none" for a server that takes no key',
            where=where or None,
            key="api_key_env",
        )


def check_simulated(specs: Sequence[JudgeSpec], simulator: SimulatorConfig) -> None:
    """Every judge's model name is one the simulator config serves (when it lists any)."""
    served = sorted(simulator.models)
    if not served:
        return
    missing = [s for s in specs if s.model not in simulator.models]
    if missing:
        names = ", ".join(f"{s.model!r} ({s.label})" for s in missing)
        raise ConfigError(
            f"--simulator serves {', '.join(served)}; it has no model {names}: add it to the "
            "simulator config's `models`, or judge with the models it serves"
        )


def _check_count(value: Any, flag: str, upper: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{flag} must be a whole number of at least 1, got {value!r}")
    if upper is not None and value > upper:
        raise ConfigError(f"{flag} must be at most {upper}, got {value}")


def judges_from_flags(
    *,
    models_file: str | Path | None = None,
    models: str | None = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    rpm: float | None = None,
    tpm: float | None = None,
    price: Sequence[tuple[str, float, float]] = (),
    repeat: int | None = None,
    project: int | None = None,
    simulator: SimulatorConfig | None = None,
    environ: Mapping[str, str] | None = None,
    keys: bool = True,
) -> list[JudgeSpec]:
    """The judges the command line asks for, checked: ``--models a,b`` behind one
    ``--base-url`` and ``--api-key-env``, or ``--models-file`` (where those two and
    ``--rpm``/``--tpm`` fill only what the file leaves unset). ``price`` holds parsed
    ``--price`` values (:func:`parse_price`); ``repeat`` and ``project`` are checked here
    so that their errors name the flags. Without a ``simulator`` every key variable must
    be set (unless ``keys`` is false: the caller checks them with :func:`check_keys` once
    its other checks pass); with one, every model must be one it serves."""
    _check_count(repeat, "--repeat", MAX_REPEAT)
    _check_count(project, "--project", None)
    if (models_file is None) == (models is None):
        raise ConfigError(
            "give the judges with --models a,b (one --base-url and --api-key-env for all) or "
            "with --models-file FILE (each model its own), "
            + ("not both" if models is not None else "one of them")
        )
    limits: dict[str, Any] = {k: v for k, v in (("rpm", rpm), ("tpm", tpm)) if v is not None}
    # --base-url without --api-key-env: the default key is OpenAI's, for OpenAI's URL only.
    unnamed = api_key_env is None and base_url is not None
    if models is not None:
        specs = _from_names(models, base_url, api_key_env, limits)
    else:
        assert models_file is not None
        fallback: dict[str, Any] = dict(limits)
        if base_url is not None or api_key_env is not None:
            fallback["base_url"] = base_url or DEFAULT_BASE_URL
            fallback["api_key_env"] = _UNNAMED if unnamed else _key_env(api_key_env)
        specs = load_models_file(models_file, fallback=fallback)
    if unnamed:
        specs = [_default_key(s, simulated=simulator is not None) for s in specs]
    specs = _with_prices(specs, price)
    if simulator is not None:
        check_simulated(specs, simulator)
    elif keys:
        check_keys(specs, environ)
    return specs


#: The key variable of a model that takes --base-url from the command line without an
#: --api-key-env (a models file entry with no pair of its own); never reaches a client.
_UNNAMED = "SKYNET_EVAL_UNNAMED_KEY_ENV"


def _default_key(spec: JudgeSpec, *, simulated: bool) -> JudgeSpec:
    """``spec`` with the default key variable, when --base-url gave it OpenAI's URL (or a
    simulator serves it: no key is sent); refused otherwise."""
    if spec.api_key_env != _UNNAMED and spec.source != "--models":
        return spec  # a models file entry with a pair of its own
    refusal = None if simulated else default_key_elsewhere("base_url", spec.base_url, spec.label)
    if refusal is not None:
        raise refusal
    return msgspec.structs.replace(spec, api_key_env=DEFAULT_KEY_ENV)


def choose_reference(
    specs: Sequence[JudgeSpec], reference: str | None, labels: str | None
) -> str | None:
    """``--reference`` (a label), else the first judge unless ``--labels`` is given."""
    names = [s.label for s in specs]
    if reference is not None and labels is not None:
        raise ConfigError("give --reference or --labels, not both")
    if reference is not None and reference not in names:
        raise ConfigError(f"--reference {reference!r} is not one of the models {names}")
    if reference is not None or labels is not None:
        return reference
    return names[0] if names else None


@asynccontextmanager
async def serve_judges(
    specs: Sequence[JudgeSpec], simulator: SimulatorConfig | None
) -> AsyncIterator[list[JudgeSpec]]:
    """The judges, ready to call: as given without a simulator config; with one, each
    provider served by its own local simulator (started here, stopped on the way out)
    and every spec pointed at it, with no key."""
    if simulator is None:
        yield list(specs)
        return
    from llm_client import Simulator

    providers = list(dict.fromkeys(s.served_by for s in specs))
    async with AsyncExitStack() as stack:
        urls: dict[str, str] = {}
        for i, provider in enumerate(providers):
            config = simulator
            if len(providers) > 1:
                # Each provider its own port and its own fault and jitter draws.
                config = msgspec.structs.replace(simulator, port=0, seed=simulator.seed + i)
            sim = await stack.enter_async_context(Simulator(config))
            urls[provider] = sim.base_url
        yield [
            msgspec.structs.replace(s, base_url=urls[s.served_by], api_key_env=None, simulated=True)
            for s in specs
        ]
