"""The exception hierarchy: one root, usage errors outside LLMError, every one pickles whole."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

import llm_client
from llm_client import (
    BudgetExhaustedError,
    ClientClosedError,
    LLMError,
    ModelClientError,
    ModelConfigError,
    RequestTooLargeError,
    TransportError,
)

#: One instance of every exception the package exports, every attribute set away from its
#: default, so that a lost attribute shows.
EXAMPLES: list[ModelClientError] = [
    ModelClientError("the root"),
    LLMError(
        "model 'm' at http://x/v1: server error",
        status=503,
        model="m",
        code="server_error",
        attempts=4,
        retries=3,
        rate_limited=1,
    ),
    RequestTooLargeError("needs 2000 tokens, the budget is 1000", model="m", attempts=0),
    BudgetExhaustedError("model 'm': call not sent, the budget's 3 calls are spent", model="m"),
    TransportError(
        "timeout", "timed out after 5 s reading the response body", response_started=True
    ),
    ModelConfigError("`rpm` must be positive, got -1", field="rpm", value=-1),
    ClientClosedError("this ModelClient was closed", model="m"),
]


def _exported_exceptions() -> set[type[BaseException]]:
    return {
        value
        for value in vars(llm_client).values()
        if inspect.isclass(value) and issubclass(value, BaseException)
    }


class TestHierarchy:
    def test_every_exported_exception_descends_from_the_root(self) -> None:
        """ModelClientError is the one root of every exception llm_client exports."""
        assert all(issubclass(cls, ModelClientError) for cls in _exported_exceptions())

    def test_usage_errors_are_not_llm_errors(self) -> None:
        """A bad config and a closed client are usage errors, outside LLMError (which the
        engine labels llm_error), and keep their stdlib bases."""
        assert not issubclass(ModelConfigError, LLMError)
        assert not issubclass(ClientClosedError, LLMError)
        assert issubclass(ModelConfigError, ValueError)
        assert issubclass(ClientClosedError, RuntimeError)
        assert not issubclass(TransportError, LLMError)
        assert issubclass(RequestTooLargeError, LLMError)

    def test_llm_error_message_names_the_status(self) -> None:
        """An LLMError with a status says it first; its message stays apart."""
        error = LLMError("quota", status=429, model="m")
        assert str(error) == "HTTP 429: quota" and error.message == "quota"


class TestPickling:
    def test_every_exported_exception_has_an_example(self) -> None:
        """The examples below cover every exception the package exports."""
        assert {type(e) for e in EXAMPLES} == _exported_exceptions()

    @pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
    def test_round_trip_keeps_every_attribute(self, error: ModelClientError) -> None:
        """An exception pickled and loaded (as between the engine and a worker) has the
        same type, message, arguments and attributes."""
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error)
        assert (str(back), back.args) == (str(error), error.args)
        assert vars(back) == vars(error)

    @pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
    def test_attributes_added_later_survive(self, error: ModelClientError) -> None:
        """An attribute set after construction (a note by whoever relays it) survives too."""
        error.relayed_by = "worker 3"  # type: ignore[attr-defined]
        back: Any = pickle.loads(pickle.dumps(error))
        assert back.relayed_by == "worker 3"
