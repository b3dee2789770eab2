"""Wiring ``skynet.llm`` to the model client, and metering every call per example.

A call from a program's ``run`` goes to the **program model**; a call from a metric's
``score`` goes to the **metric model**, or to the **reflection model** when no metric
model is set (``docs/contract.md``). Each reply's usage is added to the meter of the example
that made it (by its call token), so the pipeline can build the program's
:class:`Observation` and the judge's :class:`Usage` without any global state.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import msgspec

from llm_client import ModelConfig

from ._context import Stage
from ._results import Observation, Usage

if TYPE_CHECKING:
    from llm_client import ModelClient

__all__ = ["Meter", "ModelRouter", "ModelStatistics", "Models"]


class Models(msgspec.Struct, frozen=True, kw_only=True):
    """Which model serves which stage; any of them may be missing.

    ``program`` serves ``llm()`` in ``run``; ``metric`` serves ``llm()`` in ``score``,
    falling back to ``reflection`` (the model an optimizer reflects with).
    """

    program: ModelConfig | None = None
    metric: ModelConfig | None = None
    reflection: ModelConfig | None = None

    @property
    def judge(self) -> ModelConfig | None:
        """The model a metric's ``llm()`` calls: the metric model, else the reflection one."""
        return self.metric if self.metric is not None else self.reflection


class Meter:
    """Usage of one example's stage, summed over its model calls."""

    __slots__ = (
        "cached_tokens",
        "calls",
        "cost_usd",
        "input_tokens",
        "notes",
        "output_tokens",
        "queued_ms",
        "rate_limited",
        "reasoning_tokens",
        "retries",
    )

    def __init__(self) -> None:
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached_tokens = 0
        self.reasoning_tokens = 0
        self.cost_usd: float | None = 0.0
        self.queued_ms = 0.0
        self.retries = 0
        self.rate_limited = 0
        self.notes: list[str] = []

    def add(self, completion: Any) -> None:
        self.calls += 1
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        self.cached_tokens += completion.cached_tokens
        self.reasoning_tokens += completion.reasoning_tokens
        self.queued_ms += completion.queued_ms
        self.retries += completion.retries
        self.rate_limited += int(completion.rate_limited)
        if completion.cost_usd is None:
            # One unpriced call makes the total unmeasured: never a silent partial sum.
            if self.cost_usd is not None:
                note = completion.cost_note or f"no price known for model {completion.model!r}"
                self.notes.append(f"cost not measured: {note}; set --price-input/--price-output")
            self.cost_usd = None
        elif self.cost_usd is not None:
            self.cost_usd += completion.cost_usd

    def add_failure(self, error: BaseException) -> None:
        """A call given up: no reply and no cost, but its retries and 429s still count."""
        self.retries += int(getattr(error, "retries", 0))
        self.rate_limited += int(getattr(error, "rate_limited", 0))

    def observation(self, duration_ms: float | None) -> Observation:
        """The program stage's observation of one example."""
        return Observation(
            duration_ms=duration_ms,
            queued_ms=self.queued_ms,
            cost_usd=self.cost_usd,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            llm_calls=self.calls,
            retries=self.retries,
            rate_limited=self.rate_limited,
            notes=tuple(self.notes),
        )

    def usage(self) -> Usage:
        """The judge's usage on one example."""
        return Usage(
            llm_calls=self.calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            cost_usd=self.cost_usd,
            queued_ms=self.queued_ms,
            retries=self.retries,
            rate_limited=self.rate_limited,
            notes=tuple(self.notes),
        )


class ModelStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Model calls made through the engine since it opened, by stage."""

    program_calls: int = 0
    judge_calls: int = 0
    failed_calls: int = 0
    rate_limited: int = 0
    retries: int = 0
    program_cost_usd: float | None = 0.0
    judge_cost_usd: float | None = 0.0


class ModelRouter:
    """Owns one :class:`ModelClient` per distinct model configuration and routes calls.

    Open it inside the running loop. :meth:`handler` is the ``LLMHandler`` that the
    executors hand to ``skynet.llm``: it routes by stage and meters the reply into the
    calling example's :class:`Meter`, found by the call's token.
    """

    def __init__(self, models: Models | None) -> None:
        self.models = models or Models()
        self._stack: contextlib.AsyncExitStack | None = None
        self._program: ModelClient | None = None
        self._judge: ModelClient | None = None
        self.program_meters: dict[int, Meter] = {}
        self.judge_meters: dict[int, Meter] = {}
        self._totals = {"program": Meter(), "score": Meter()}
        self._failed = 0

    @property
    def has_program_model(self) -> bool:
        return self.models.program is not None

    @property
    def has_judge_model(self) -> bool:
        return self.models.judge is not None

    async def __aenter__(self) -> ModelRouter:
        configs = [c for c in (self.models.program, self.models.judge) if c is not None]
        if not configs:
            return self
        from llm_client import ModelClient

        self._stack = contextlib.AsyncExitStack()
        await self._stack.__aenter__()
        try:
            clients: dict[Any, ModelClient] = {}
            for config in configs:
                if config not in clients:  # one client per distinct configuration
                    clients[config] = await self._stack.enter_async_context(ModelClient(config))
            if self.models.program is not None:
                self._program = clients[self.models.program]
            judge = self.models.judge
            if judge is not None:
                self._judge = clients[judge]
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def handler(
        self, token: int, stage: Stage, instruction: str, input: str | None, options: dict[str, Any]
    ) -> str:
        """Send one ``skynet.llm`` call to the stage's model and meter its reply."""
        client = self._program if stage == "run" else self._judge
        if client is None:
            which = (
                "--model (the program model)"
                if stage == "run"
                else ("--metric-model or --reflection-model")
            )
            raise RuntimeError(f"skynet.llm() has no model to call: set {which}")
        if input is None:
            messages = [{"role": "user", "content": instruction}]
        else:
            messages = [
                {"role": "system", "content": instruction},
                {"role": "user", "content": input},
            ]
        meters = self.program_meters if stage == "run" else self.judge_meters
        meter = meters.get(token)
        if meter is None:
            meter = meters[token] = Meter()
        total = self._totals["program" if stage == "run" else "score"]
        try:
            completion = await client.complete(messages=messages, **options)
        except Exception as exc:
            self._failed += 1
            meter.add_failure(exc)
            total.add_failure(exc)
            raise
        meter.add(completion)
        total.add(completion)
        return str(completion.text)

    def statistics(self) -> ModelStatistics:
        program, judge = self._totals["program"], self._totals["score"]
        return ModelStatistics(
            program_calls=program.calls,
            judge_calls=judge.calls,
            failed_calls=self._failed,
            rate_limited=program.rate_limited + judge.rate_limited,
            retries=program.retries + judge.retries,
            program_cost_usd=program.cost_usd,
            judge_cost_usd=judge.cost_usd,
        )
