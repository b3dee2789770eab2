"""Prices: genai-prices offline, user overrides, unknown prices left unmeasured."""

from __future__ import annotations

import pytest
from genai_prices import Usage, calc_price

from llm_client._pricing import resolve_prices


class TestResolvePrices:
    def test_known_model_matches_genai_prices(self) -> None:
        """A known model at its provider's URL costs what genai-prices computes."""
        prices = resolve_prices("gpt-4o", "https://api.openai.com/v1")
        cost, note = prices.cost(12_000, 800, 4_000)
        expected = calc_price(
            Usage(input_tokens=12_000, cache_read_tokens=4_000, output_tokens=800),
            "gpt-4o",
            provider_api_url="https://api.openai.com/v1",
        ).total_price
        assert cost == pytest.approx(float(expected), rel=1e-9)
        assert note is None and prices.known

    def test_unknown_model_is_unmeasured_with_reason(self) -> None:
        """An unknown model gives None and a note naming the model and the way out."""
        prices = resolve_prices("my-finetune-zzz", "http://127.0.0.1:8000/v1")
        cost, note = prices.cost(100, 10, 0)
        assert cost is None
        assert note is not None and "my-finetune-zzz" in note and "price_output" in note

    def test_overrides_win(self) -> None:
        """Overrides in USD per million tokens replace the library's prices."""
        prices = resolve_prices("gpt-4o", "https://api.openai.com/v1", 1.0, 2.0, 0.5)
        cost, _ = prices.cost(1_000_000, 1_000_000, 500_000)
        assert cost == pytest.approx(0.5 + 0.25 + 2.0)
        assert prices.source == "override"

    def test_partial_override_names_what_is_missing(self) -> None:
        """An unknown model with only an input price still says the output price is missing."""
        prices = resolve_prices("my-finetune-zzz", "http://127.0.0.1:8000/v1", 1.0)
        cost, note = prices.cost(100, 10, 0)
        assert cost is None and note is not None and "price_output" in note

    def test_local_server_priced_by_model_name_with_note(self) -> None:
        """A known model behind an unknown URL is priced by name, and the note says so."""
        prices = resolve_prices("gpt-4o-mini", "http://127.0.0.1:9/v1")
        cost, note = prices.cost(1000, 100, 0)
        assert cost is not None and cost > 0
        assert note is not None and "by model name" in note

    def test_no_fetch_at_run_time(self) -> None:
        """Pricing uses the bundled snapshot: no auto-updater is running."""
        from genai_prices import data_snapshot, update_prices

        resolve_prices("gpt-4o", "https://api.openai.com/v1")
        assert data_snapshot._custom_snapshot is None
        assert update_prices._shared_updater.ref_count == 0
