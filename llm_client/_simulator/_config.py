"""What the simulator does: its settings, validated when built, and the served models'.

Frozen msgspec structs, so a config decodes from a JSON file (``--simulator``) with the
same checks as one built in Python, and crosses a process boundary as it is.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Literal

import msgspec

from .._exceptions import ModelConfigError

__all__ = ["FAULT_KINDS", "ModelSettings", "SimulatorConfig"]

#: The faults the simulator can inject, in the order their rates are laid on [0, 1).
FAULT_KINDS = (
    "drop",
    "insufficient_quota",
    "error_500",
    "error_503",
    "rate_limit",
    "slow",
    "malformed",
)


class ModelSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One served model: its latency (None: the simulator's), verdict noise, reasoning.

    ``noise`` flips a verdict by a stable hash of (model, prompt): the model is wrong on
    the same examples every time, a bias. ``flip_rate`` flips a verdict by a draw from the
    simulator's seeded generator on each request: sampling noise, so the same prompt asked
    twice may get two verdicts (a judge that disagrees with itself), yet a seed replays a
    run sent in the same order.

    Unknown fields are refused (in a JSON config too): a misspelt ``latency`` would
    otherwise leave the model at the default latency without a word.
    """

    latency_ms: float | None = None
    jitter_ms: float | None = None
    noise: float = 0.0  # probability that a judge verdict is flipped, per prompt
    flip_rate: float = 0.0  # probability that a judge verdict is flipped, per request
    reasoning_tokens: int = 0  # added to completion tokens and reported as reasoning

    def __post_init__(self) -> None:
        for name in ("latency_ms", "jitter_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ModelConfigError(
                    f"`{name}` must be zero or more, got {value!r}", field=name, value=value
                )
        for name in ("noise", "flip_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ModelConfigError(
                    f"`{name}` must be between 0 and 1, got {value!r}", field=name, value=value
                )
        if self.reasoning_tokens < 0:
            raise ModelConfigError(
                f"`reasoning_tokens` must be zero or more, got {self.reasoning_tokens!r}",
                field="reasoning_tokens",
                value=self.reasoning_tokens,
            )


class SimulatorConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the simulator does; every rate is a probability per request.

    ``latency_ms`` plus a uniform draw in ``[0, jitter_ms]`` delays each reply.
    ``slow_rate`` requests are delayed ``slow_ms`` instead (past a client's timeout).
    ``tail_share`` of the replies (a draw of their own, seeded: the same run slows the same
    requests) take ``tail_factor`` times their latency: a heavy tail, for hedged calls.
    ``models`` maps a model name to its settings (a :class:`ModelSettings`, or a dict of
    its fields, converted and checked here); when it is not empty, other model names get
    404. ``api_key`` (None: none) is required as a Bearer token when set.

    ``rate_limit_headers`` (default on) sends OpenAI-style ``x-ratelimit-*`` headers on
    every reply while a limit is configured, and ``retry-after``/``retry-after-ms`` on its
    429s; off, a 429 is bare (no hint at all), as some servers and proxies answer, so that
    a client's adaptation without headers can be measured.

    ``capacity`` (None: unlimited) is the requests the server works on at once at its
    set latency; past it, ``over_capacity`` says what happens to a new request: "slow"
    (the default) stretches its latency by the requests in flight over the capacity, as a
    server sharing its accelerator between them does (throughput stays at capacity over
    latency); "429" refuses it at once with ``retry-after`` (unless
    ``rate_limit_headers`` is off), as a gateway shedding load does.
    """

    host: str = "127.0.0.1"
    port: int = 0
    seed: int = 0
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    rpm: float | None = None
    tpm: float | None = None
    window_s: float = 60.0
    error_500_rate: float = 0.0
    error_503_rate: float = 0.0
    rate_limit_rate: float = 0.0  # injected 429s, apart from the rpm/tpm limits
    insufficient_quota_rate: float = 0.0
    slow_rate: float = 0.0
    slow_ms: float = 5_000.0
    tail_share: float = 0.0
    tail_factor: float = 10.0
    malformed_rate: float = 0.0
    drop_rate: float = 0.0
    pass_rate: float = 0.5
    models: dict[str, ModelSettings] = {}
    api_key: str | None = None
    rate_limit_headers: bool = True
    capacity: int | None = None
    over_capacity: Literal["slow", "429"] = "slow"
    cache_system_prompts: bool = True
    max_history: int = 1_000_000  # arrival times kept for peak_requests()
    max_body_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        _check_host(self.host)
        if not 0 <= self.port <= 65535:
            raise ModelConfigError(
                f"`port` must be between 0 and 65535, got {self.port}",
                field="port",
                value=self.port,
            )
        for name in ("latency_ms", "jitter_ms", "slow_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ModelConfigError(
                    f"`{name}` must be zero or more, got {value!r}", field=name, value=value
                )
        for name in ("rpm", "tpm"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ModelConfigError(
                    f"`{name}` must be positive, got {value!r}", field=name, value=value
                )
        if not 0.0 <= self.tail_share <= 1.0:
            raise ModelConfigError(
                f"`tail_share` must be between 0 and 1, got {self.tail_share!r}",
                field="tail_share",
                value=self.tail_share,
            )
        if not (math.isfinite(self.tail_factor) and self.tail_factor >= 1):
            raise ModelConfigError(
                f"`tail_factor` must be 1 or more (10: ten times slower), got {self.tail_factor!r}",
                field="tail_factor",
                value=self.tail_factor,
            )
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ModelConfigError(
                f"`window_s` must be positive, got {self.window_s!r}",
                field="window_s",
                value=self.window_s,
            )
        capacity = self.capacity
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1
        ):
            raise ModelConfigError(
                f"`capacity` must be a whole number of requests, 1 or more, got {self.capacity!r}",
                field="capacity",
                value=self.capacity,
            )
        if self.over_capacity not in ("slow", "429"):
            raise ModelConfigError(
                f"`over_capacity` must be 'slow' or '429', got {self.over_capacity!r}",
                field="over_capacity",
                value=self.over_capacity,
            )
        self._check_rates()
        self._convert_models()
        if self.max_history < 1:
            raise ModelConfigError(
                f"`max_history` must be at least 1, got {self.max_history}",
                field="max_history",
                value=self.max_history,
            )

    def _check_rates(self) -> None:
        total = 0.0
        for kind in FAULT_KINDS:
            name = f"{kind}_rate"
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ModelConfigError(
                    f"`{name}` must be between 0 and 1, got {value!r}", field=name, value=value
                )
            total += value
        if total > 1.0 + 1e-9:
            raise ModelConfigError(f"the fault rates add up to {total:g}; they must not pass 1")
        if not 0.0 <= self.pass_rate <= 1.0:
            raise ModelConfigError(
                f"`pass_rate` must be between 0 and 1, got {self.pass_rate!r}",
                field="pass_rate",
                value=self.pass_rate,
            )

    def _convert_models(self) -> None:
        """Check ``models`` now, and turn dicts into ModelSettings: a dict left as it is
        would pass here and fail on the first request, inside the server."""
        models: object = self.models
        if not isinstance(models, dict):
            raise ModelConfigError(
                "`models` must map model names to ModelSettings, "
                f"got {type(models).__name__}: {models!r}",
                field="models",
                value=models,
            )
        if all(type(k) is str and type(v) is ModelSettings for k, v in models.items()):
            return  # the usual case: nothing to convert
        converted = {name: _model_settings(name, settings) for name, settings in models.items()}
        msgspec.structs.force_setattr(self, "models", converted)


def _model_settings(name: object, settings: object) -> ModelSettings:
    """One ``models`` entry as ModelSettings, or a ModelConfigError naming the entry."""
    if not isinstance(name, str):
        raise ModelConfigError(
            f"`models` keys must be model names (strings), got {name!r}",
            field="models",
            value=name,
        )
    if isinstance(settings, ModelSettings):
        return settings
    field = f"models[{name!r}]"
    try:
        return msgspec.convert(settings, ModelSettings)
    except msgspec.ValidationError as exc:
        raise ModelConfigError(
            f"`{field}`: {exc} (give a ModelSettings, or a dict of its fields: "
            "latency_ms, jitter_ms, noise, flip_rate, reasoning_tokens)",
            field=field,
            value=settings,
        ) from None


def _check_host(host: str) -> None:
    address = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ModelConfigError(
            f"`host` must be a loopback address (127.0.0.1 or ::1), got {host!r}: "
            "the simulator is for local tests only",
            field="host",
            value=host,
        )
