"""Unit-testing a metric: ``score()`` run as the engine runs it, outside a run.

A metric that calls ``skynet.llm()``, ``skynet.reward()`` or ``skynet.observation()``
cannot be called as a plain function: those read the engine's current call. Here one
example goes through the engine's own score stage (its executor, its contract check,
its result assembly), with the model replies a test scripts, or the models it names
(the simulator's), and the observation it gives; what comes back is the
:class:`~evaluator.Result` the engine would record. ``skynet.testing`` re-exports it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from llm_client import Completion

from ._call._calls import LLMHandler, ScoreCall
from ._call._context import Stage
from ._call._loader import UserFunction, load_metric
from ._call._results import Observation, Result
from ._executors._base import ExecutorOptions
from ._executors._factory import open_executor
from ._models import Meter, MeterBook, ModelRouter, Models
from ._options import MAX_TIMEOUT, validate_timeout
from ._pipeline._assembly import SCORE_ONLY, scored_results

__all__ = ["Replies", "ScriptError", "ascore_example", "score_example"]

#: What ``replies`` may be: one reply for every call, replies in call order, replies by a
#: piece of the prompt, or a function of ``(instruction, input)``.
Replies = str | Sequence[str] | Mapping[str, str] | Callable[[str, "str | None"], str]

#: Why a scripted reply has no cost: no model was called.
_SCRIPTED = "a scripted reply (skynet.testing): no model was called"


class ScriptError(AssertionError):
    """The metric's model calls did not fit the scripted ``replies`` (too many calls, no
    reply for a prompt): a mistake of the test, raised after the call, never scored."""


class _Script:
    """The ``LLMHandler`` of scripted replies: each call answered, counted and metered."""

    def __init__(self, replies: Replies) -> None:
        if not isinstance(replies, (str, Sequence, Mapping)) and not callable(replies):
            raise TypeError(
                "`replies` must be a str, a list of str, a dict from a piece of the prompt "
                f"to a reply, or a function of (instruction, input); got {type(replies).__name__}"
            )
        self.replies = replies
        self.prompts: list[tuple[str, str | None]] = []
        self.meters = MeterBook()
        self.problem: str | None = None

    def reply(self, instruction: str, input: str | None) -> str:
        replies = self.replies
        n = len(self.prompts)
        if isinstance(replies, str):
            return replies
        if isinstance(replies, Mapping):
            prompt = f"{instruction}\n{input or ''}"
            for piece, text in replies.items():
                if piece in prompt:
                    return str(text)
            raise self._fail(
                f"no reply in `replies` for model call {n}: none of {list(replies)!r} "
                f"is in its prompt {prompt[:200]!r}"
            )
        if isinstance(replies, Sequence):
            if n > len(replies):
                raise self._fail(
                    f"the metric made model call {n} but `replies` has {len(replies)}: "
                    "add a reply for each call"
                )
            return str(replies[n - 1])
        return str(replies(instruction, input))

    def _fail(self, problem: str) -> ScriptError:
        self.problem = self.problem or problem
        return ScriptError(problem)

    async def __call__(
        self, token: int, stage: Stage, instruction: str, input: str | None, options: dict[str, Any]
    ) -> str:
        self.prompts.append((instruction, input))
        text = self.reply(instruction, input)
        # Metered as a model's reply is, with no price: its cost is unmeasured, never 0.
        reply = Completion(
            text=text, model="scripted", input_tokens=0, output_tokens=0, cost_note=_SCRIPTED
        )
        self.meters.meter(token).add(reply)
        return text


def _observation(value: Observation | Mapping[str, Any] | None) -> Observation:
    if value is None:
        return SCORE_ONLY
    if isinstance(value, Observation):
        return value
    try:
        return msgspec.convert(dict(value), Observation)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise TypeError(
            f"`observation` must be an evaluator.Observation or a dict of its fields "
            f"(duration_ms, cost_usd, ...): {exc}"
        ) from None


async def ascore_example(
    metric: str | Path | UserFunction,
    output: Any,
    *,
    input: Any = None,
    expected: Any = None,
    replies: Replies | None = None,
    models: Models | None = None,
    observation: Observation | Mapping[str, Any] | None = None,
    example_id: Any = "example",
    timeout: float = 60.0,
    failure_score: float = 0.0,
) -> Result:
    """The :class:`Result` the engine would record for one example scored by ``metric``.

    ``metric`` is a metric file's path or a loaded :class:`UserFunction`; ``input``,
    ``output`` and ``expected`` are what ``score`` receives. Its ``skynet.llm()`` calls get
    ``replies`` (a str for every call; a list, one per call in order; a dict from a piece
    of the prompt to its reply; a function of ``(instruction, input)``), whose judge
    usage counts the calls with the cost unmeasured (no model was called); or go to
    ``models`` (``Models(metric=ModelConfig(...))``, the simulator's, say), metered as
    in a run. ``observation`` (an :class:`Observation`, or a dict of its fields) is what
    ``skynet.observation()`` and ``skynet.reward()`` read; by default a score-only run's
    (time and cost not measured). A broken contract is the result's ``error`` (its
    ``kind`` and message), scored ``failure_score``, as in a run. Raises
    :class:`ScriptError` when the calls did not fit ``replies``.
    """
    if replies is not None and models is not None:
        raise TypeError("give `replies` (scripted) or `models` (real calls), not both")
    fn = metric if isinstance(metric, UserFunction) else load_metric(metric)
    if fn.uses_llm and replies is None and models is None:
        raise TypeError(
            f"`{fn.name}` in {fn.path.name} calls skynet.llm(): give `replies` (scripted "
            "model replies) or `models` (a model to call, the simulator's, say)"
        )
    seconds = validate_timeout(timeout, "timeout", upper=MAX_TIMEOUT)
    obs = _observation(observation)
    call = ScoreCall(0, example_id, input, output, expected, obs)
    async with contextlib.AsyncExitStack() as stack:
        script = _Script(replies) if replies is not None else None
        handler: LLMHandler | None = script
        meters: dict[int, Meter] = script.meters if script is not None else {}
        router = None
        if script is None:
            router = await stack.enter_async_context(ModelRouter(models))
            handler, meters = router.port, router.judge_meters
        options = ExecutorOptions(timeout=seconds, llm_handler=handler)
        kind = "async" if fn.is_async else "inline"
        executor = await stack.enter_async_context(open_executor(fn, "score", kind, options))
        outcomes = await executor.submit([call])
        results, _ = scored_results([call], outcomes, meters, failure_score)
        if router is not None:
            results = router.scrubber.results(results)
    if script is not None and script.problem is not None:
        raise ScriptError(script.problem)
    return results[0]


def score_example(
    metric: str | Path | UserFunction,
    output: Any,
    *,
    input: Any = None,
    expected: Any = None,
    replies: Replies | None = None,
    models: Models | None = None,
    observation: Observation | Mapping[str, Any] | None = None,
    example_id: Any = "example",
    timeout: float = 60.0,
    failure_score: float = 0.0,
) -> Result:
    """:func:`ascore_example` from synchronous code (a plain pytest test): it runs its own
    event loop, so call ``await ascore_example(...)`` where a loop is running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "score_example() runs its own event loop and one is running here: use "
            "`await skynet.testing.ascore_example(...)`"
        )
    return asyncio.run(
        ascore_example(
            metric,
            output,
            input=input,
            expected=expected,
            replies=replies,
            models=models,
            observation=observation,
            example_id=example_id,
            timeout=timeout,
            failure_score=failure_score,
        )
    )
