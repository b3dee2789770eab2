"""What user files call through ``skynet``: ``llm``, ``allm``, ``observation``,
``service_cost`` and ``reward``. Each reads the current call's context."""

from __future__ import annotations

from typing import Any

from ._context import current
from ._exceptions import OutsideCallError
from ._results import Observation

__all__ = ["allm", "llm", "observation", "reward", "service_cost"]


def _observation(name: str) -> Observation:
    ctx = current()
    if ctx is None or ctx.stage != "score" or ctx.observation is None:
        raise OutsideCallError(name)
    return ctx.observation


def observation() -> Observation:
    """The current example's measurements, read-only (a frozen copy)."""
    return _observation("observation")


def service_cost() -> float | None:
    """The program's model cost for the current example in USD, or None if unmeasured."""
    return _observation("service_cost").cost_usd


def llm(instruction: str, input: str | None = None, **options: Any) -> str:
    """Ask the model and return the reply text.

    With ``input`` the instruction is the system message and the input the user message;
    without it the instruction is the user message. From ``score`` the call goes to the
    metric model (or the reflection model when none is set); from ``run`` to the program
    model. Rate limited, retried and metered by the engine.
    """
    ctx = current()
    if ctx is None:
        raise OutsideCallError("llm")
    if ctx.llm is None:
        raise RuntimeError(
            "skynet.llm() has no model to call: set --metric-model (or --reflection-model) "
            "for a metric, --model for a program, or pass models= to Evaluator"
        )
    return ctx.llm.call(instruction, input, options)


async def allm(instruction: str, input: str | None = None, **options: Any) -> str:
    """The awaitable form of :func:`llm`, for ``async def`` metrics and programs."""
    ctx = current()
    if ctx is None:
        raise OutsideCallError("allm")
    if ctx.llm is None:
        raise RuntimeError(
            "skynet.allm() has no model to call: set --metric-model (or --reflection-model) "
            "for a metric, --model for a program, or pass models= to Evaluator"
        )
    return await ctx.llm.acall(instruction, input, options)


def reward(spec: Any, accuracy: float, feedback: str = "") -> tuple[float, dict[str, Any]]:
    """Blend accuracy with the measured speed and cost; see CONTRACT.md. (Filled in by the
    reward issue.)"""
    raise NotImplementedError("reward() lands with the reward issue")
