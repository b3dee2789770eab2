"""What user files call through ``skynet``: ``llm``, ``allm``, ``observation``,
``service_cost`` and ``reward``. Each reads the current call's context."""

from __future__ import annotations

from typing import Any

import msgspec

from reward import Components, RewardSpec, combine, components, parse_spec

from ._call._context import LLMBridge, current
from ._call._results import Observation
from ._exceptions import OutsideCallError

__all__ = ["allm", "llm", "observation", "reward", "service_cost"]


def _observation(name: str) -> Observation:
    ctx = current()
    if ctx is None or ctx.stage != "score" or ctx.observation is None:
        raise OutsideCallError(name)
    return ctx.observation


def observation() -> Observation:
    """The current example's measurements, read-only: a frozen copy of its own, so that
    even ``msgspec.structs.force_setattr`` on it cannot reach what the engine recorded."""
    return msgspec.structs.replace(_observation("observation"))


def service_cost() -> float | None:
    """The program's model cost for the current example in USD, or None if unmeasured."""
    return _observation("service_cost").cost_usd


def _bridge(name: str) -> LLMBridge:
    """The current call's way to the engine's model client; clear errors when there is none."""
    ctx = current()
    if ctx is None:
        raise OutsideCallError(name)
    if ctx.llm is None:
        raise RuntimeError(
            f"skynet.{name}() has no model to call: set --metric-model (or "
            "--reflection-model) for a metric, --model for a program, or pass models= to "
            "Evaluator"
        )
    bridge: LLMBridge = ctx.llm
    return bridge


def llm(instruction: str, input: str | None = None, **options: Any) -> str:
    """Ask the model and return the reply text.

    With ``input`` the instruction is the system message and the input the user message;
    without it the instruction is the user message. From ``score`` the call goes to the
    metric model (or the reflection model when none is set); from ``run`` to the program
    model. Rate limited, retried and metered by the engine.
    """
    return _bridge("llm").call(instruction, input, options)


async def allm(instruction: str, input: str | None = None, **options: Any) -> str:
    """The awaitable form of :func:`llm`, for ``async def`` metrics and programs."""
    return await _bridge("allm").acall(instruction, input, options)


def _reason(obs: Observation, prefix: str, fallback: str) -> str:
    """Why a figure is missing: the observation's note that starts with ``prefix``."""
    for note in obs.notes:
        if note.startswith(prefix):
            return note
    return fallback


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.3g} ms"


def _usd(value: float) -> str:
    return "$0" if value == 0 else f"${value:.3g}"


def _measures_line(
    obs: Observation, own_ms: float | None, spec: RewardSpec, parts: Components
) -> str:
    """One line on speed and cost: measured value against reference, or why unmeasured."""
    if own_ms is None:
        speed = f"speed 0 ({_reason(obs, 'time not measured', 'time not measured')})"
    else:
        # Queued time is shown so the figure is not mistaken for wall time, which it is not.
        queued = f", {_ms(obs.queued_ms)} queued not counted" if obs.queued_ms > 0 else ""
        speed = (
            f"speed {parts.speed:.2f} ({_ms(own_ms)} vs "
            f"{_ms(spec.speed_reference_ms)} reference{queued})"
        )
    if obs.cost_usd is None:
        cost = f"cost 0 ({_reason(obs, 'cost not measured', 'cost not measured')})"
    else:
        cost = (
            f"cost {parts.cost:.2f} ({_usd(obs.cost_usd)} vs "
            f"{_usd(spec.cost_reference_usd)} reference)"
        )
    return f"Speed and cost: {speed}; {cost}."


def reward(spec: Any, accuracy: float, feedback: str = "") -> tuple[float, dict[str, Any]]:
    """Blend ``accuracy`` with the engine's measured speed and cost into a metric's return.

    ``spec`` is a ``REWARD_SPEC`` dict (see docs/contract.md, "Accuracy, speed and cost");
    ``accuracy`` a score from 0 to 1, or an error (lower is better) when the spec has an
    accuracy reference. Returns ``(score, {"feedback": ..., "scores": {"accuracy",
    "speed", "cost"}})``: the weighted sum, and the caller's feedback followed by one line
    on speed and cost. Time or cost the engine could not measure scores 0 and the line
    says why. Raises ``reward.RewardSpecError`` for a bad spec, ``ValueError`` for an
    accuracy out of range, ``OutsideCallError`` outside a metric's ``score``.
    """
    parsed = parse_spec(spec)
    if not isinstance(feedback, str):
        raise TypeError(
            f"skynet.reward(): `feedback` must be a str, got a {type(feedback).__name__}; "
            "pass the text that says what is wrong"
        )
    obs = _observation("reward")
    own_ms = obs.own_ms
    try:
        parts = components(parsed, accuracy, own_ms, obs.cost_usd)
    except ValueError as exc:
        # Say which call refused the value: the user's metric called reward(), not components().
        raise ValueError(f"skynet.reward(): {exc}") from None
    line = _measures_line(obs, own_ms, parsed, parts)
    return combine(parsed, parts), {
        "feedback": f"{feedback}\n{line}" if feedback else line,
        "scores": {"accuracy": parts.accuracy, "speed": parts.speed, "cost": parts.cost},
    }
