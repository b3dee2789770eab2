"""The models file of ``skynet-eval judges --models-file``: judges across providers.

TOML (read with the standard library's ``tomllib``) or JSON, the same shape::

    [providers.openai]                      # optional: settings shared by its models
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"          # the variable's name, never the key

    [[models]]
    name = "gpt-4.1-mini"                   # as the server knows it (required)
    label = "mini"                          # the row's name and --reference's (default: name)
    provider = "openai"
    price_input = 0.4                       # USD per million tokens
    price_output = 1.6
    rpm = 500
    temperature = 0.0

A model's own keys win over its provider's, and those over the command line's fallbacks
(``--base-url``/``--api-key-env``, ``--rpm``/``--tpm``). ``base_url`` and ``api_key_env``
go together, and come together from one place: the model's table, else its provider's,
else the command line. A table that names one must name the other beside it, so that no
key is ever sent to a base URL it was not written for (a model with its own ``base_url``
never takes its provider's key).

Every mistake is a :class:`ModelsFileError` naming the file (and line, for TOML), the model
or provider table, the key, what is wrong and how to fix it. A value that may be a secret
(a key pasted where a variable name belongs) is never echoed.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from llm_client import ModelConfigError

from .._exceptions import ModelsFileError
from ._spec import JudgeSpec

__all__ = ["REASONING_EFFORTS", "load_models_file"]

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Key(NamedTuple):
    kind: str  # "str", "url", "number", "int", "key_env", "effort"
    meaning: str
    example: str


_SETTINGS: dict[str, _Key] = {
    "base_url": _Key("url", "the OpenAI-compatible base URL", '"https://api.openai.com/v1"'),
    "api_key_env": _Key(
        "key_env", "the environment variable holding the API key", '"OPENAI_API_KEY"'
    ),
    "rpm": _Key("number", "requests per minute", "500"),
    "tpm": _Key("number", "tokens per minute", "200000"),
    "max_concurrency": _Key("int", "requests in flight at most", "32"),
    "timeout": _Key("number", "seconds per HTTP attempt", "60"),
    "max_retries": _Key("int", "retries after the first attempt", "6"),
    "price_input": _Key("number", "USD per million input tokens", "0.15"),
    "price_output": _Key("number", "USD per million output tokens", "0.6"),
    "price_cached_input": _Key("number", "USD per million cached input tokens", "0.075"),
    "temperature": _Key("number", "the sampling temperature", "0.0"),
    "max_tokens": _Key("int", "the reply's token limit", "256"),
    "reasoning_effort": _Key("effort", "the reasoning effort", '"low"'),
    "hedge": _Key("number", "a second copy of a call slower than this latency quantile", "0.95"),
}
_MODEL_ONLY: dict[str, _Key] = {
    "name": _Key("str", "the model's name as the server knows it", '"gpt-4.1-mini"'),
    "label": _Key("str", "the row's label", '"mini"'),
    "provider": _Key("str", "a [providers.NAME] table", '"openai"'),
}
_MODEL_KEYS = {**_MODEL_ONLY, **_SETTINGS}
_TOP_KEYS = ("models", "providers")


class _Located(NamedTuple):
    """A table of the file: how to name it in a message, and where it starts."""

    where: str
    table: Mapping[str, Any]
    header: int | None  # the TOML header's line (1-based), None when unknown


class _Lines:
    """Lines of a TOML file's tables and keys: tomllib reports none once parsing works."""

    _MODELS = re.compile(r"^\s*\[\[\s*models\s*\]\]")
    _PROVIDER = re.compile(r"""^\s*\[\s*providers\s*\.\s*(?:"([^"]*)"|'([^']*)'|([\w-]+))\s*\]""")

    def __init__(self, text: str | None) -> None:
        self.lines = text.splitlines() if text is not None else []
        self.models: list[int] = []
        self.providers: dict[str, int] = {}
        for number, line in enumerate(self.lines, start=1):
            if self._MODELS.match(line):
                self.models.append(number)
                continue
            found = self._PROVIDER.match(line)
            if found:
                self.providers[next(g for g in found.groups() if g is not None)] = number

    def key(self, header: int | None, key: str) -> int | None:
        """The line of ``key = ...`` in the table whose header is on line ``header``."""
        if header is None:
            return None
        pattern = re.compile(rf"""^\s*(?:{re.escape(key)}|"{re.escape(key)}")\s*=""")
        for number in range(header + 1, len(self.lines) + 1):
            line = self.lines[number - 1]
            if line.lstrip().startswith("["):
                return None
            if pattern.match(line):
                return number
        return None


class _Reader:
    """One models file being read: the path, its lines, and how to raise about them."""

    def __init__(self, path: Path, lines: _Lines, toml: bool) -> None:
        self.path = path
        self.lines = lines
        self.toml = toml

    def fail(self, place: _Located | None, problem: str, key: str | None = None) -> ModelsFileError:
        line = None
        if place is not None:
            line = self.lines.key(place.header, key) if key is not None else None
            line = line if line is not None else place.header
        return ModelsFileError(
            self.path, problem, where=place.where if place else None, key=key, line=line
        )

    def model_place(self, index: int, table: Mapping[str, Any]) -> _Located:
        name = table.get("label", table.get("name"))
        position = f"[[models]] #{index + 1}" if self.toml else f"models[{index}]"
        where = f"model {name!r} ({position})" if isinstance(name, str) and name else position
        header = self.lines.models[index] if index < len(self.lines.models) else None
        return _Located(where, table, header)

    def provider_place(self, name: str, table: Mapping[str, Any]) -> _Located:
        where = f"[providers.{name}]" if self.toml else f"providers.{name}"
        return _Located(where, table, self.lines.providers.get(name))


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`? " if close else ""


def _describe(value: Any) -> str:
    kinds = {bool: "a boolean", str: "a string", list: "a list", dict: "a table"}
    kind = next((v for t, v in kinds.items() if isinstance(value, t)), type(value).__name__)
    return f"{kind} ({value!r})" if not isinstance(value, (dict, list)) else kind


def _number(key: str, value: Any, spec: _Key, *, integer: bool) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        what = "an integer" if integer else "a number"
        raise ValueError(
            f"`{key}` ({spec.meaning}) must be {what}, got {_describe(value)}; "
            f"write {key} = {spec.example}"
        )
    if not integer and not math.isfinite(value):
        raise ValueError(f"`{key}` ({spec.meaning}) must be finite, got {value!r}")
    return float(value) if not integer else value


def _text(key: str, value: Any, spec: _Key) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"`{key}` ({spec.meaning}) must be a non-empty string, got {_describe(value)}; "
            f"write {key} = {spec.example}"
        )
    return value.strip()


def _key_env(value: Any) -> str | None:
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    if isinstance(value, str) and _ENV_NAME.fullmatch(value.strip()):
        return value.strip()
    # Not echoed: a value here that is not a variable name may well be the key itself.
    raise ValueError(
        "`api_key_env` must be the *name* of the environment variable that holds the key "
        '(e.g. api_key_env = "OPENAI_API_KEY"), or "none" for a server that takes no key; '
        "the value given is not a variable name (not shown, in case it is a key: keep keys "
        "out of this file)"
    )


def _effort(value: Any) -> str:
    if not isinstance(value, str) or value.strip().lower() not in REASONING_EFFORTS:
        shown = _describe(value)
        raise ValueError(
            f"`reasoning_effort` must be one of {', '.join(map(repr, REASONING_EFFORTS))}, "
            f"got {shown}"
        )
    return value.strip().lower()


_CHECKS: dict[str, Callable[[str, Any, _Key], Any]] = {
    "str": _text,
    "url": _text,
    "number": lambda k, v, s: _number(k, v, s, integer=False),
    "int": lambda k, v, s: _number(k, v, s, integer=True),
    "key_env": lambda k, v, s: _key_env(v),
    "effort": lambda k, v, s: _effort(v),
}


def _settings(
    reader: _Reader, place: _Located, known: dict[str, _Key], *, model: bool
) -> dict[str, Any]:
    """The table's keys, each checked for its type; unknown keys refused with a hint."""
    out: dict[str, Any] = {}
    for key, value in place.table.items():
        spec = known.get(key)
        if spec is None:
            if key == "api_key":
                problem = (
                    "`api_key`: never write a key into this file; export it in an environment "
                    'variable and name that variable: api_key_env = "MY_PROVIDER_KEY"'
                )
            elif not model and key in _MODEL_ONLY:
                problem = f"`{key}` belongs in a [[models]] entry, not in a provider table"
            else:
                problem = (
                    f"unknown key `{key}`; {_suggest(key, list(known))}"
                    f"known keys: {', '.join(known)}"
                )
            raise reader.fail(place, problem, key)
        try:
            out[key] = _CHECKS[spec.kind](key, value, spec)
        except ValueError as exc:
            raise reader.fail(place, str(exc), key) from None
    return out


def _parse(path: Path) -> tuple[Any, _Reader]:
    if not path.is_file():
        raise ModelsFileError(path, "no such file: give the path of a .toml or .json models file")
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ModelsFileError(
            path, f"a models file ends in .toml or .json, got {suffix or 'no suffix'!r}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelsFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if suffix == ".toml":
        try:
            data: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ModelsFileError(path, f"invalid TOML: {exc}") from None
        return data, _Reader(path, _Lines(text), toml=True)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelsFileError(path, f"invalid JSON: {exc.msg}", line=exc.lineno) from None
    return data, _Reader(path, _Lines(None), toml=False)


def _top(data: Any, reader: _Reader) -> tuple[list[Any], dict[str, Any]]:
    example = '[[models]]\nname = "gpt-4.1-mini"'
    if not isinstance(data, dict):
        raise reader.fail(None, f"the file must hold a table with `models`, got {_describe(data)}")
    for key in data:
        if key not in _TOP_KEYS:
            raise reader.fail(
                None,
                f"unknown top-level key `{key}`; {_suggest(key, list(_TOP_KEYS))}"
                "a models file holds `models` (one entry per model) and optionally `providers`",
                key,
            )
    models = data.get("models")
    if models is None:
        raise reader.fail(None, f"no `models`: add one entry per judge model, e.g.\n{example}")
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        fix = "write one [[models]] table per model" if reader.toml else "a list of objects"
        raise reader.fail(
            None, f"`models` must be a list of tables ({fix}), got {_describe(models)}"
        )
    if not models:
        raise reader.fail(
            None, f"`models` is empty: add one entry per judge model, e.g.\n{example}"
        )
    providers = data.get("providers", {})
    if not isinstance(providers, dict) or not all(isinstance(p, dict) for p in providers.values()):
        raise reader.fail(
            None,
            "`providers` must hold one table per provider ([providers.NAME]), "
            f"got {_describe(providers)}",
        )
    return models, providers


def _merge(
    reader: _Reader,
    place: _Located,
    own: dict[str, Any],
    provider: tuple[_Located, dict[str, Any]] | None,
    fallback: Mapping[str, Any],
) -> dict[str, Any]:
    """Model over provider over fallback; ``base_url`` and ``api_key_env`` only as a pair,
    both taken from one level (:func:`_endpoint`)."""
    shared = provider[1] if provider is not None else {}
    merged = {k: v for k, v in fallback.items() if k not in _PAIR}
    merged.update((k, v) for k, v in shared.items() if k not in _PAIR)
    merged.update((k, v) for k, v in own.items() if k not in _PAIR)
    levels: list[tuple[_Located, Mapping[str, Any]]] = [(place, own)]
    if provider is not None:
        levels.append(provider)
    merged.update(_endpoint(reader, levels, fallback))
    if ("price_input" in merged) != ("price_output" in merged):
        there = "price_input" if "price_input" in merged else "price_output"
        other = "price_output" if there == "price_input" else "price_input"
        raise reader.fail(
            place,
            f"`{there}` is set but `{other}` is not: give both (USD per million tokens), or "
            "neither to use the price library",
            there,
        )
    return merged


_PAIR = ("base_url", "api_key_env")


def _endpoint(
    reader: _Reader, levels: list[tuple[_Located, Mapping[str, Any]]], fallback: Mapping[str, Any]
) -> dict[str, Any]:
    """Where the model is served and the variable of its key, from the first of ``levels``
    that writes them: the model's own table, else its provider's, else the fallback (the
    command line's pair), else neither (the defaults: OpenAI's URL and variable).

    A key goes only to the base URL written beside it, so the two are never merged
    across levels: a model that sets ``base_url`` and takes its provider's
    ``api_key_env`` would send the provider's key to the model's host. Such a file is
    refused, naming the model, the key and the fix, rather than the model being sent no
    key: a server that needs a key would refuse every call (a failed row per example,
    later), and one that needs none is one line away (``api_key_env = "none"``).
    """
    for origin, table in levels:
        has_url, has_env = "base_url" in table, "api_key_env" in table
        if has_url and has_env:
            return {k: table[k] for k in _PAIR}
        if not has_url and not has_env:
            continue
        there, missing = ("base_url", "api_key_env") if has_url else ("api_key_env", "base_url")
        other = f"`{missing}` is not set beside it"
        inherited = next((o for o, t in levels if t is not table and missing in t), None)
        if inherited is not None:
            other += f" ({inherited.where}'s `{missing}` is not used for it)"
        if has_url:
            fix = (
                f"set api_key_env beside base_url {table['base_url']} (the variable holding "
                'the key of that server; api_key_env = "none" for a server that takes no key)'
            )
        else:
            fix = "set base_url beside api_key_env (the server that key is for)"
        raise reader.fail(
            origin,
            f"`{there}` is set but {other}: {fix}, so that a key is sent only to the base URL "
            "written beside it",
            there,
        )
    if any(k in fallback for k in _PAIR):
        return {k: fallback[k] for k in _PAIR if k in fallback}
    return {}


def _model(
    reader: _Reader,
    index: int,
    table: Mapping[str, Any],
    providers: dict[str, tuple[_Located, dict[str, Any]]],
    fallback: Mapping[str, Any],
) -> JudgeSpec:
    place = reader.model_place(index, table)
    own = _settings(reader, place, _MODEL_KEYS, model=True)
    if "name" not in own:
        raise reader.fail(
            place,
            'no `name`: add name = "<the model as the server knows it>" (and label = "..." to '
            "show it under another name)",
        )
    provider = None
    if "provider" in own:
        provider = providers.get(own["provider"])
        if provider is None:
            defined = ", ".join(f"[providers.{p}]" for p in providers) or "none"
            raise reader.fail(
                place,
                f"provider {own['provider']!r} is not defined; "
                f"{_suggest(own['provider'], list(providers))}defined: {defined}",
                "provider",
            )
    merged = _merge(reader, place, own, provider, fallback)
    spec = JudgeSpec(
        label=merged.pop("label", merged["name"]),
        model=merged.pop("name"),
        source=f"{reader.path}: {place.where}",
        **merged,
    )
    try:
        spec.config()
    except ModelConfigError as exc:
        key = next((k for k in _SETTINGS if f"`{k}`" in str(exc)), None)
        raise reader.fail(place, str(exc), key) from None
    return spec


def load_models_file(
    path: str | Path, *, fallback: Mapping[str, Any] | None = None
) -> list[JudgeSpec]:
    """The judges a models file describes, in file order; :class:`ModelsFileError` on any
    mistake. ``fallback`` fills settings neither a model nor its provider sets (the
    command line's ``base_url``/``api_key_env`` pair, ``rpm``, ``tpm``). Keys are not
    read here (see :func:`check_keys`)."""
    reader_path = Path(path)
    data, reader = _parse(reader_path)
    models, raw_providers = _top(data, reader)
    providers: dict[str, tuple[_Located, dict[str, Any]]] = {}
    for name, table in raw_providers.items():
        place = reader.provider_place(name, table)
        providers[name] = (place, _settings(reader, place, _SETTINGS, model=False))
    specs: list[JudgeSpec] = []
    first: dict[str, int] = {}
    for index, table in enumerate(models):
        spec = _model(reader, index, table, providers, fallback or {})
        if spec.label in first:
            place = reader.model_place(index, table)
            earlier = reader.model_place(first[spec.label], models[first[spec.label]]).where
            key = "label" if "label" in table else "name"
            raise reader.fail(
                place,
                f"label {spec.label!r} is already used by {earlier}: give each model a "
                'unique label = "..." (rows and --reference go by it)',
                key,
            )
        first[spec.label] = index
        specs.append(spec)
    return specs
