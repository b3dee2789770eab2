"""The contract check: the steps of ``docs/contract.md`` run before any full evaluation.

Steps, in order: **Metric file**, **Metric signature**, **Reward spec** (when the module
defines ``REWARD_SPEC``), **Program file**, **Program signature** and **Program runs**
(only when a program is given), **Metric runs** and **Metric return value** on the first
three examples. A program that returned None for every checked example passes with a
warning (a forgotten ``return``). The examples go through
the same ``Evaluator`` (same executors, timeouts and validation) as the full run, so a
hung metric fails **Metric runs** right after the timeout and a crashing one cannot take
the check down with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ._call._loader import UserFunction, load_metric, load_program
from ._call._results import Result
from ._data._dataset import Example, examples_from_rows
from ._exceptions import (
    STEP_FILE,
    STEP_PROGRAM_FILE,
    STEP_PROGRAM_SIGNATURE,
    STEP_RETURN,
    STEP_REWARD,
    STEP_RUNS,
    STEP_SIGNATURE,
    ContractError,
)
from ._options import validate_timeout

if TYPE_CHECKING:
    from ._pipeline import Evaluator

__all__ = [
    "CHECK_EXAMPLES",
    "STEP_PROGRAM",
    "STEP_PROGRAM_FILE",
    "STEP_PROGRAM_SIGNATURE",
    "CheckStep",
    "ContractReport",
    "check_contract",
]

CHECK_EXAMPLES = 3
STEP_PROGRAM = "Program runs"

_RUN_KINDS = frozenset(
    {"metric_error", "metric_timeout", "worker_crash", "llm_error", "missing_output"}
)
_PROGRAM_KINDS = frozenset({"program_error", "program_timeout"})


class CheckStep(msgspec.Struct):
    """One step of the check: its name as in docs/contract.md, pass or fail, and why."""

    name: str
    ok: bool
    message: str = ""
    example_id: Any = None


class ContractReport(msgspec.Struct):
    """The outcome of the contract check; ``ok`` when every step passed. ``warnings``:
    what passed but looks wrong (a program that returned None for every example)."""

    ok: bool
    steps: list[CheckStep]
    warnings: list[str] = []

    @property
    def failed(self) -> CheckStep | None:
        return next((s for s in self.steps if not s.ok), None)


def _step_from_error(exc: ContractError) -> CheckStep:
    where = ""
    if exc.path is not None:
        where = f"{exc.path}:{exc.line}: " if exc.line is not None else f"{exc.path}: "
    return CheckStep(exc.step, False, where + exc.message, exc.example_id)


def static_steps(metric: str | Path | UserFunction) -> tuple[list[CheckStep], UserFunction | None]:
    """The steps that need no example: file, signature, reward spec."""
    steps: list[CheckStep] = []
    try:
        fn = metric if isinstance(metric, UserFunction) else load_metric(metric)
    except ContractError as exc:
        if exc.step == STEP_SIGNATURE:
            steps.append(CheckStep(STEP_FILE, True))
        steps.append(_step_from_error(exc))
        return steps, None
    steps.append(CheckStep(STEP_FILE, True))
    steps.append(CheckStep(STEP_SIGNATURE, True))
    if fn.has_reward_spec:
        import reward

        try:
            reward.parse_spec(fn.reward_spec)
        except reward.RewardSpecError as exc:
            steps.append(CheckStep(STEP_REWARD, False, f"{fn.path}: {exc}"))
            return steps, None
        steps.append(CheckStep(STEP_REWARD, True))
    return steps, fn


async def check_contract(
    metric: str | Path | UserFunction,
    examples: Iterable[Any],
    *,
    program: str | Path | UserFunction | None = None,
    artifact: Any = None,
    timeout: float = 60.0,
    evaluator: Evaluator | None = None,
    n: int = CHECK_EXAMPLES,
    keep: list[Result] | None = None,
    **evaluator_options: Any,
) -> ContractReport:
    """Run the contract check on the first ``n`` examples (3 by default).

    ``examples`` may be ``Example`` objects or canonical row dicts. Pass an open
    ``evaluator`` to check through its executors (the CLI does, so the check's program
    calls are measured like any other); otherwise one is opened for the check. Pass a
    list as ``keep`` to receive the check's results, so that a run need not redo them.
    """
    timeout = validate_timeout(timeout)
    steps, fn = static_steps(metric)
    if fn is None:
        return ContractReport(False, steps)
    first: list[Example] = list(islice(examples_from_rows(examples), n))
    if not first:
        steps.append(
            CheckStep(STEP_RUNS, False, "the dataset has no examples to run the metric on")
        )
        return ContractReport(False, steps)
    if isinstance(program, (str, Path)):
        path = program
        try:
            program = load_program(path)
        except ContractError as exc:
            steps.append(_step_from_error(exc))  # the loader names the program's steps
            return ContractReport(False, steps)
    if evaluator is None:
        from ._pipeline import Evaluator

        async with Evaluator(
            metric=fn, program=program, timeout=timeout, **evaluator_options
        ) as own:
            results = await own.evaluate_many(artifact, first)
    else:
        results = await evaluator.evaluate_many(artifact, first)
    if keep is not None:
        keep.extend(results)
    has_program = program is not None or (evaluator is not None and evaluator.program is not None)
    failed = _first_failure(results, _PROGRAM_KINDS)
    if has_program:
        steps.append(_outcome_step(STEP_PROGRAM, failed))
        if failed is not None:
            return ContractReport(False, steps)
    failed = _first_failure(results, _RUN_KINDS)
    steps.append(_outcome_step(STEP_RUNS, failed))
    if failed is not None:
        return ContractReport(False, steps)
    failed = _first_failure(results, frozenset({"invalid_return"}))
    steps.append(_outcome_step(STEP_RETURN, failed))
    warnings = _forgotten_return(results) if has_program else []
    return ContractReport(failed is None, steps, warnings)


def _forgotten_return(results: Sequence[Result]) -> list[str]:
    """A program that returned None for every checked example scores 0 everywhere
    without a single error: say so before the run."""
    if results and all(r.output is None and r.error is None for r in results):
        n = len(results)
        every = "the checked example" if n == 1 else f"all {n} checked examples"
        return [f"the program returned None for {every}; did you forget `return` in `run`?"]
    return []


def _first_failure(results: Sequence[Any], kinds: frozenset[str]) -> Any:
    return next((r for r in results if r.error is not None and r.error.kind in kinds), None)


def _outcome_step(name: str, failed: Any) -> CheckStep:
    if failed is None:
        return CheckStep(name, True)
    message = failed.error.message
    prefix = f"{STEP_RETURN}: example {failed.example_id!r}: "
    if message.startswith(prefix):  # the validator's own message already names both
        message = message[len(prefix) :]
    if failed.error.kind != "invalid_return":
        message = f"{failed.error.kind}: {message}"
    return CheckStep(name, False, message, failed.example_id)
