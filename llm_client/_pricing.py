"""Cost of a call: genai-prices' bundled table plus the user's overrides (USD per million).

genai-prices is used offline only: its bundled snapshot, never ``UpdatePrices`` (which
would fetch over the network). Prices are resolved once per (model, base URL, overrides)
and then applied with float arithmetic, so a call costs a few multiplications. A model
with no known price gives ``cost_usd=None`` and a note saying why; never a silent 0.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["Prices", "resolve_prices"]


@dataclass(frozen=True, slots=True)
class _Rate:
    """A per-million price; ``tiers`` are (start, price) cliffs on the prompt's size."""

    base: float
    tiers: tuple[tuple[int, float], ...] = ()

    def at(self, prompt_tokens: int) -> float:
        price = self.base
        for start, tier_price in self.tiers:
            if prompt_tokens >= start:
                price = tier_price
        return price


@dataclass(frozen=True, slots=True)
class Prices:
    """The resolved prices of one model, or the reason there are none."""

    input: _Rate | None
    output: _Rate | None
    cached_input: _Rate | None
    source: str  # "override", "genai-prices <provider>/<model>", ...
    note: str | None  # why the cost is unmeasured (or how it was guessed)

    @property
    def known(self) -> bool:
        return self.input is not None and self.output is not None

    def cost(
        self, input_tokens: int, output_tokens: int, cached_tokens: int
    ) -> tuple[float | None, str | None]:
        """USD for one call; reasoning tokens are part of ``output_tokens`` already."""
        if self.input is None or self.output is None:
            return None, self.note
        cached = min(max(cached_tokens, 0), input_tokens)
        in_price = self.input.at(input_tokens)
        cached_rate = self.cached_input if self.cached_input is not None else self.input
        usd = (
            (input_tokens - cached) * in_price
            + cached * cached_rate.at(input_tokens)
            + output_tokens * self.output.at(input_tokens)
        ) / 1_000_000.0
        return usd, self.note


def _rate(value: Any) -> _Rate | None:
    if value is None:
        return None
    base = getattr(value, "base", None)
    if base is not None:  # genai_prices.types.TieredPrices
        tiers = tuple((int(t.start), float(t.price)) for t in getattr(value, "tiers", ()))
        return _Rate(float(base), tiers)
    return _Rate(float(value))


def _library_prices(model: str, base_url: str) -> tuple[dict[str, _Rate | None], str, str | None]:
    """Look ``model`` up in genai-prices: by the provider that serves ``base_url`` first,
    then by the model name alone (a proxy, a local server serving a known model)."""
    import genai_prices
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    version = getattr(genai_prices, "__version__", "?")
    note: str | None = None
    try:
        provider, info = snapshot.find_provider_model(model, None, None, base_url)
    except LookupError:
        try:
            provider, info = snapshot.find_provider_model(model, None, None, None)
        except LookupError:
            return (
                {},
                "none",
                f"no price known for model {model!r} (genai-prices {version} has no match, "
                f"served from {base_url}); set price_input and price_output in USD per "
                "million tokens to measure its cost",
            )
        note = (
            f"priced as {provider.id}/{info.id} by model name: {base_url} is not a "
            "provider genai-prices knows"
        )
    price = info.get_prices(datetime.now(tz=UTC))
    found = {
        "input": _rate(getattr(price, "input_mtok", None)),
        "output": _rate(getattr(price, "output_mtok", None)),
        "cached_input": _rate(getattr(price, "cache_read_mtok", None)),
    }
    return found, f"genai-prices {version} {provider.id}/{info.id}", note


@functools.lru_cache(maxsize=256)
def resolve_prices(
    model: str,
    base_url: str,
    price_input: float | None = None,
    price_output: float | None = None,
    price_cached_input: float | None = None,
) -> Prices:
    """The prices of ``model`` with the user's overrides applied over genai-prices'."""
    overrides = {
        "input": None if price_input is None else _Rate(float(price_input)),
        "output": None if price_output is None else _Rate(float(price_output)),
        "cached_input": None if price_cached_input is None else _Rate(float(price_cached_input)),
    }
    if overrides["input"] is not None and overrides["output"] is not None:
        return Prices(
            overrides["input"], overrides["output"], overrides["cached_input"], "override", None
        )
    library, source, note = _library_prices(model, base_url)
    merged = {k: overrides[k] if overrides[k] is not None else library.get(k) for k in overrides}
    missing = [f"price_{k}" for k in ("input", "output") if merged[k] is None]
    if missing and library:
        note = (
            f"genai-prices has no {' or '.join(m.removeprefix('price_') for m in missing)} "
            f"price for model {model!r}; set {' and '.join(missing)} in USD per million tokens"
        )
    if any(v is not None for v in overrides.values()):
        source = f"override + {source}"
    return Prices(merged["input"], merged["output"], merged["cached_input"], source, note)
