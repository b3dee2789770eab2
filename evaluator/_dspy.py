"""One metric for DSPy too: adapt every DSPy calling form to ``score(input, output, expected)``.

DSPy calls a metric three ways (read from dspy 3.4's source):

- ``dspy.Evaluate`` calls ``metric(example, prediction)`` and sums the returns;
- bootstrapping (``BootstrapFewShot``, and ``bootstrap_trace_data`` inside ``dspy.GEPA``)
  calls ``metric(example, prediction, trace)`` and keeps a demo when the value is truthy
  (or ``>= metric_threshold``);
- ``dspy.GEPA`` checks that the metric binds five arguments and asks for feedback with
  ``metric(gold, pred, trace, pred_name, pred_trace)``, reading ``score``, ``feedback`` and
  ``objective_scores`` from a ``dspy.Prediction``.

The first two get a plain ``float``: a ``Prediction(score=0.0)`` is truthy (its truth is
its field count), so bootstrapping would keep every failed trace as a demo. The feedback
call gets a ``dspy.Prediction``. dspy itself is imported only when that Prediction is
built, so importing this module stays cheap.

What ``dspy.GEPA``'s reflection sees is built by dspy from the program's trace (the
predictor's inputs and outputs) and from the feedback returned here, which is the
metric's own text; ``score`` gets private copies of the example's fields and of the
prediction, so a metric that edits them cannot put ``expected`` into the trace.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from ._context import CallContext, call_context
from ._contract import short_repr, validate_return
from ._copy import private_copy
from ._exceptions import STEP_RUNS, ContractError
from ._loader import UserFunction, _arity, load_metric
from ._results import Observation, Scored

__all__ = ["DSPyMetric", "to_dspy_metric"]

_UNSET: Any = object()

# What a metric reads through ``skynet.observation()`` under DSPy: the engine did not run
# the program, so it measured nothing; ``reward()`` then gives speed and cost 0 and says so.
_UNMEASURED = Observation(
    duration_ms=None,
    cost_usd=None,
    notes=(
        "time not measured: the program ran under DSPy, outside skynet-eval",
        "cost not measured: the program ran under DSPy, outside skynet-eval",
    ),
)


def _as_user_function(metric: str | Path | UserFunction | Callable[..., Any]) -> UserFunction:
    if isinstance(metric, UserFunction):
        return metric
    if isinstance(metric, (str, Path)):
        return load_metric(metric)
    if not callable(metric):
        raise TypeError(
            f"`metric` must be a path to metric.py, a loaded UserFunction or a function, "
            f"got {type(metric).__name__}"
        )
    try:
        source = inspect.getsourcefile(metric)
    except TypeError:
        source = None
    path = Path(source) if source else Path(f"<{getattr(metric, '__qualname__', 'metric')}>")
    is_async = inspect.iscoroutinefunction(metric) or inspect.iscoroutinefunction(
        getattr(metric, "__call__", None)  # noqa: B004 - an async __call__ on an object
    )
    return UserFunction(
        path=path,
        module_name=getattr(metric, "__module__", "") or "",
        name="score",
        fn=metric,
        arity=_arity(metric, "score", path, None),
        is_async=is_async,
        uses_llm=False,
        execution=None,
    )


def _run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run an ``async def score`` to completion from DSPy's synchronous call.

    DSPy calls metrics from its worker threads, where no loop runs: ``asyncio.run`` is
    right there. If a loop is running in this very thread, ``asyncio.run`` would raise,
    so the coroutine gets a loop of its own on a helper thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}
    # The call context (what skynet.observation() reads) travels with the coroutine.
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:  # handed back to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, name="skynet-dspy-metric", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _fields(obj: Any) -> dict[str, Any]:
    """The fields of a dspy Example or Prediction (or any mapping) as a plain dict."""
    if isinstance(obj, Mapping):
        return dict(obj)
    keys = getattr(obj, "keys", None)
    if callable(keys):
        return {key: obj[key] for key in keys()}
    raise TypeError(f"expected a dspy Example or Prediction, got {type(obj).__name__}")


class DSPyMetric:
    """A user's ``score`` as a DSPy metric; see :func:`to_dspy_metric`."""

    def __init__(self, metric: UserFunction, *, output_field: str | None = None) -> None:
        self.metric = metric
        self.output_field = output_field
        # Tools that name a metric by its ``__name__`` (as for a plain function) see "score".
        self.__name__ = "score"

    def __repr__(self) -> str:
        field = f", output_field={self.output_field!r}" if self.output_field else ""
        return f"DSPyMetric({self.metric.path}{field})"

    # The five parameter names are the ones dspy.GEPA documents; it checks that
    # ``inspect.signature(metric).bind(None, None, None, None, None)`` succeeds.
    def __call__(
        self,
        gold: Any,
        pred: Any,
        trace: Any = None,
        pred_name: Any = _UNSET,
        pred_trace: Any = _UNSET,
    ) -> Any:
        scored = self.score(gold, pred)
        if pred_name is _UNSET and pred_trace is _UNSET:
            return scored.score
        import dspy

        return dspy.Prediction(
            score=scored.score,
            feedback=scored.feedback,
            objective_scores=dict(scored.scores) if scored.scores else None,
        )

    def example_id(self, gold: Any) -> Any:
        """How an error message names the example: its ``id`` field, else its inputs."""
        try:
            if "id" in gold:
                return gold["id"]
        except TypeError:
            pass
        try:
            return short_repr(_fields(gold.inputs()))
        except Exception:  # inputs not marked, or not an Example: any name will do
            return short_repr(gold)

    def arguments(
        self, gold: Any, pred: Any, example_id: Any = None
    ) -> tuple[dict[str, Any], Any, dict[str, Any] | None]:
        """``(input, output, expected)`` for ``score`` from a DSPy example and prediction:
        private copies, sharing nothing with ``gold`` or ``pred``."""
        if example_id is None:
            example_id = self.example_id(gold)
        try:
            inputs = _fields(gold.inputs())
            labels = _fields(gold.labels())
        except (AttributeError, TypeError, ValueError) as exc:
            raise ContractError(
                STEP_RUNS,
                f"cannot split the DSPy example into inputs and labels ({exc}); build it as "
                "dspy.Example(...).with_inputs('<input field>', ...)",
                example_id=example_id,
            ) from exc
        if self.output_field is None:
            try:
                output: Any = _fields(pred)
            except TypeError:
                output = pred
        else:
            try:
                output = pred[self.output_field]
            except (KeyError, TypeError, IndexError):
                try:
                    have = ", ".join(map(repr, _fields(pred))) or "none"
                except TypeError:
                    have = f"it is a {type(pred).__name__}"
                raise ContractError(
                    STEP_RUNS,
                    f"the prediction has no field {self.output_field!r} (fields: {have}); "
                    "pass the name of an output field of your signature as output_field=",
                    example_id=example_id,
                ) from None
        # Private copies: a metric that edits its arguments must not change the example
        # (scored again for every candidate, and shown to dspy.GEPA's reflection as the
        # predictor's inputs) nor the prediction (shown as its outputs).
        return private_copy(inputs), private_copy(output), private_copy(labels) or None

    def score(self, gold: Any, pred: Any) -> Scored:
        """Call the user's ``score`` on one DSPy example and check its return value."""
        example_id = self.example_id(gold)
        inputs, output, expected = self.arguments(gold, pred, example_id)
        fn = self.metric
        args = (inputs, output, expected)[: fn.arity]
        with call_context(CallContext(example_id, "score", _UNMEASURED, None)):
            raw = fn.fn(*args)
            if fn.is_async or inspect.isawaitable(raw):
                raw = _run_coroutine(raw)
        return validate_return(raw, example_id)


def to_dspy_metric(
    metric: str | Path | UserFunction | Callable[..., Any], *, output_field: str | None = None
) -> DSPyMetric:
    """The user's ``score`` as a metric for ``dspy.Evaluate``, bootstrapping and ``dspy.GEPA``.

    ``metric`` is a path to ``metric.py``, a loaded :class:`UserFunction` or a function.
    ``score`` receives ``input = dict(example.inputs())``, ``expected = dict(example.labels())``
    (``None`` when there are none) and ``output``: the dict of the prediction's fields, or
    the one field named by ``output_field``. Called with two or three arguments it returns
    the score as a float; called with ``pred_name``/``pred_trace`` (``dspy.GEPA``'s
    feedback call) it returns ``dspy.Prediction(score, feedback, objective_scores)``.
    A return value that breaks the contract raises :class:`InvalidReturn`.
    """
    return DSPyMetric(_as_user_function(metric), output_field=output_field)
