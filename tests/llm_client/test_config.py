"""ModelConfig: validation with messages that name the field, key from the environment."""

from __future__ import annotations

import pytest

from llm_client import LLMError, ModelConfig, ModelConfigError


class TestModelConfig:
    @pytest.mark.parametrize(
        ("field", "value", "fragment"),
        [
            ("rpm", 0, "`rpm` must be positive, got 0"),
            ("tpm", -5.0, "`tpm` must be positive, got -5.0"),
            ("max_concurrency", 0, "`max_concurrency` must be between 1 and 100000, got 0"),
            ("timeout", float("nan"), "`timeout` must be positive"),
            ("deadline", 0, "`deadline` must be positive"),
            ("max_retries", -1, "`max_retries` must be between 0 and 100"),
            ("price_input", -0.1, "`price_input` must be zero or more"),
            ("temperature", 3.0, "`temperature` must be between 0 and 2"),
            ("base_url", "api.openai.com", "`base_url` must start with http:// or https://"),
            ("rate_margin", 0.9, "`rate_margin` must be between 0 and 0.5"),
            ("reasoning_effort", " ", "`reasoning_effort` must be a non-empty string"),
            ("reasoning_effort", 2, "`reasoning_effort` must be a non-empty string"),
        ],
    )
    def test_out_of_range_field_is_named(self, field: str, value: object, fragment: str) -> None:
        """A bad field raises ModelConfigError (a ValueError, not an LLMError: a usage
        error, not a failed call) naming the field and value, which it also carries."""
        with pytest.raises(ModelConfigError) as info:
            ModelConfig(model="m", **{field: value})  # type: ignore[arg-type]
        assert fragment in str(info.value)
        assert isinstance(info.value, ValueError)
        assert not isinstance(info.value, LLMError)
        assert info.value.field == field
        assert info.value.value == value or value != value  # NaN is not equal to itself

    def test_frozen(self) -> None:
        """A config cannot be changed after it is built."""
        cfg = ModelConfig(model="m")
        with pytest.raises(AttributeError):
            cfg.rpm = 5  # type: ignore[misc]

    def test_missing_key_variable_is_named(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A missing key variable is an error naming the variable and the way out."""
        monkeypatch.delenv("SKYNET_TEST_KEY", raising=False)
        cfg = ModelConfig(model="m", api_key_env="SKYNET_TEST_KEY")
        with pytest.raises(ModelConfigError, match=r"SKYNET_TEST_KEY.*api_key_env=None"):
            cfg.api_key()

    def test_key_is_read_from_the_environment_not_stored(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The key is read at use; the config's repr never holds it."""
        monkeypatch.setenv("SKYNET_TEST_KEY", "sk-secret-value-0123456789")
        cfg = ModelConfig(model="m", api_key_env="SKYNET_TEST_KEY")
        assert cfg.api_key() == "sk-secret-value-0123456789"
        assert "sk-secret" not in repr(cfg)

    def test_endpoint(self) -> None:
        """The endpoint joins the base URL and /chat/completions whatever the trailing slash."""
        assert (
            ModelConfig(model="m", base_url="http://127.0.0.1:9/v1/").endpoint
            == "http://127.0.0.1:9/v1/chat/completions"
        )
