"""The engine's options: each refused with a ConfigError naming the option and its value."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._loader import UserFunction, load_metric
from evaluator._exceptions import ConfigError
from evaluator._executors._base import ExecutorOptions, check_executor
from evaluator._executors._factory import open_executor
from evaluator._options import (
    MAX_TIMEOUT,
    validate_count,
    validate_ray_address,
    validate_timeout,
)
from evaluator._pipeline import Evaluator, choose_execution

SYNC = "def score(input, output, expected=None):\n    return 1.0, {'feedback': ''}\n"
ASYNC = "async def score(input, output, expected=None):\n    return 1.0, {'feedback': ''}\n"


@pytest.fixture
def sync_fn(tmp_path: Path) -> UserFunction:
    path = tmp_path / "sync_metric.py"
    path.write_text(SYNC)
    return load_metric(path)


@pytest.fixture
def async_fn(tmp_path: Path) -> UserFunction:
    path = tmp_path / "async_metric.py"
    path.write_text(ASYNC)
    return load_metric(path)


@contextlib.contextmanager
def refused(option: str, value: Any) -> Iterator[None]:
    """Expect a ConfigError that carries ``option`` and ``value`` and renders both ways."""
    with pytest.raises(ConfigError) as info:
        yield
    error = info.value
    assert error.option == option, error
    assert error.value is value or error.value == value, error
    assert str(error).startswith(f"`{option}` "), error
    flag = "--" + option.replace("_", "-")
    assert error.render(flag).startswith(f"{flag} "), error


class TestValidateTimeout:
    @pytest.mark.parametrize("value", [0, -1, MAX_TIMEOUT + 1, 900])
    def test_out_of_range(self, value: float) -> None:
        """A timeout outside (0, 600] names the range and the value."""
        with refused("timeout", value):
            validate_timeout(value)

    @pytest.mark.parametrize("value", [True, "60", None, math.nan])
    def test_not_a_number_of_seconds(self, value: Any) -> None:
        """A bool, text, None or NaN is not a number of seconds."""
        with refused("timeout", value):
            validate_timeout(value)

    def test_unbounded_needs_a_finite_positive_value(self) -> None:
        """Without an upper bound, any finite positive number is taken; infinity is not."""
        assert validate_timeout(3600, "program_timeout", upper=None) == 3600.0
        with refused("program_timeout", math.inf):
            validate_timeout(math.inf, "program_timeout", upper=None)

    def test_valid_is_a_float(self) -> None:
        """A valid timeout comes back as a float."""
        assert validate_timeout(5) == 5.0 and type(validate_timeout(5)) is float


class TestValidateCount:
    @pytest.mark.parametrize("value", [0, -3, 1.5, True, "4"])
    def test_not_a_positive_integer(self, value: Any) -> None:
        """Zero, negatives, floats, bools and text are refused."""
        with refused("workers", value):
            validate_count(value, "workers")

    def test_none_is_the_default(self) -> None:
        """None means "the default" and passes through."""
        assert validate_count(None, "workers") is None
        assert validate_count(4, "workers") == 4


class TestExecutorOptions:
    @pytest.mark.parametrize(
        ("option", "value"),
        [
            ("timeout", 0),
            ("timeout", math.inf),
            ("workers", 0),
            ("concurrency", -1),
            ("max_calls_per_worker", 0),
            ("memory_limit_mb", False),
        ],
    )
    def test_each_option_is_checked(self, option: str, value: Any) -> None:
        """Every executor option is checked when the options are built."""
        fields: dict[str, Any] = {"timeout": 1.0, option: value}
        with refused(option, value):
            ExecutorOptions(**fields)

    def test_check_executor_refuses_a_mismatch(
        self, sync_fn: UserFunction, async_fn: UserFunction
    ) -> None:
        """An async def outside the async executor, a plain def in it, or an unknown stage
        is refused, naming what to use."""
        with refused("execution", "thread"):
            check_executor(async_fn, "score", "thread", 1.0)
        with refused("execution", "async"):
            check_executor(sync_fn, "score", "async", 1.0)
        with refused("stage", "judge"):
            check_executor(sync_fn, "judge", "thread", 1.0)

    def test_open_executor_refuses_an_unknown_kind(self, sync_fn: UserFunction) -> None:
        """An unknown executor kind lists the kinds there are."""
        with refused("execution", "dask"):
            open_executor(sync_fn, "score", "dask", ExecutorOptions(timeout=1.0))


class TestValidateRayAddress:
    @pytest.mark.parametrize(
        "value", [None, "auto", "127.0.0.1:6379", "head-node:6379", "ray://10.0.0.5:10001"]
    )
    def test_accepted(self, value: Any) -> None:
        """Unset, 'auto', HOST:PORT and ray://HOST:PORT are Ray cluster addresses."""
        assert validate_ray_address(value) == value

    @pytest.mark.parametrize("value", ["", "local", "head-node", "ray://h", "h:99999", 6379])
    def test_refused(self, value: Any) -> None:
        """Anything else names the forms a cluster address takes."""
        with refused("ray_address", value):
            validate_ray_address(value)

    def test_only_for_a_stage_on_ray(self, sync_fn: UserFunction) -> None:
        """`ray_address` without a stage on Ray says how to put one there."""
        with refused("ray_address", "auto"):
            Evaluator(sync_fn, execution="process", ray_address="auto")
        assert Evaluator(sync_fn, execution="ray", ray_address="auto").ray_address == "auto"


class TestEvaluatorOptions:
    @pytest.mark.parametrize(
        ("option", "value"),
        [
            ("timeout", 601),
            ("program_timeout", -1),
            ("workers", 0),
            ("concurrency", 0),
            ("failure_score", math.nan),
            ("failure_score", True),
            ("max_calls_per_worker", 0),
            ("memory_limit_mb", 0),
            ("models", "gpt"),
        ],
    )
    def test_each_option_is_checked_when_built(
        self, sync_fn: UserFunction, option: str, value: Any
    ) -> None:
        """Evaluator(...) refuses each bad option before anything opens."""
        with refused(option, value):
            Evaluator(sync_fn, **{option: value})

    def test_execution_option_and_module_setting(self, sync_fn: UserFunction) -> None:
        """A bad `execution` option names the option; a bad module EXECUTION names the file."""
        with refused("execution", "threads"):
            choose_execution(sync_fn, "threads", option="execution")
        with refused("program_execution", "async"):
            choose_execution(sync_fn, "async", option="program_execution")
        module = dataclasses.replace(sync_fn, execution="async")
        with pytest.raises(ConfigError) as info:
            choose_execution(module, None, option="execution")
        assert info.value.option is None
        assert str(info.value).startswith(f"EXECUTION in {sync_fn.path} is 'async'")
