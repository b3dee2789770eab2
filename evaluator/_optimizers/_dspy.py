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

A judge metric (``from skynet import llm``) needs a model, and there is no ``Evaluator``
here: the adapter takes the judge's model the ways a DSPy user has it (``lm=dspy.LM(...)``,
``reflection_lm=`` as the fallback, ``models=``; see :mod:`evaluator._lm`) and owns a
:class:`~evaluator._optimizers._background.BackgroundEngine`, so that the calls of all of DSPy's
threads share one rate governor, retries, metering and prices. DSPy turns a metric's
exception into a score of 0; so that a run of such zeros cannot pass unnoticed, the first
failure of each kind is logged (one line, on the ``evaluator.dspy`` logger) and every
failure is counted in :meth:`DSPyMetric.statistics`.

What ``dspy.GEPA``'s reflection sees is built by dspy from the program's trace (the
predictor's inputs and outputs) and from the feedback returned here, which is the
metric's own text; ``score`` gets private copies of the example's fields and of the
prediction, so a metric that edits them cannot put ``expected`` into the trace.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import msgspec

from .._cache import KeyMaker, depends_on_measurements
from .._call import _failures as failures
from .._call._context import CallContext, call_context
from .._call._contract import short_repr, validate_return
from .._call._copy import private_copy
from .._call._loader import UserFunction, _arity, load_metric
from .._call._results import Observation, Scored, Usage
from .._data._dataset import Example
from .._exceptions import (
    STEP_RUNS,
    ConfigError,
    ContractError,
    EngineClosedError,
    InvalidReturn,
    NoModelError,
)
from .._lm import check_keys, resolve_models, simulator_config
from .._models import Models
from ._background import BackgroundEngine

__all__ = ["DSPyMetric", "DSPyMetricStatistics", "to_dspy_metric"]

logger = logging.getLogger("evaluator.dspy")

#: How long closing the judge's engine may take at interpreter exit (a daemon thread
#: either way: the interpreter never waits longer).
EXIT_TIMEOUT = 5.0

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


class _NoModel:
    """The ``LLMBridge`` of a metric call when no model serves the judge."""

    __slots__ = ("_path",)

    def __init__(self, path: Path) -> None:
        self._path = path

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        raise NoModelError(self._path)

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        raise NoModelError(self._path)


class _EngineBridge:
    """The ``LLMBridge`` of one metric call: its ``skynet.llm`` calls go to the engine,
    metered under the call's token."""

    __slots__ = ("_engine", "_token")

    def __init__(self, engine: BackgroundEngine, token: int) -> None:
        self._engine = engine
        self._token = token

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return self._engine.call(self._token, instruction, input, options)

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return await self._engine.acall(self._token, instruction, input, options)


class DSPyMetricStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What a :class:`DSPyMetric` has done so far.

    ``calls`` metric calls, of which ``scored`` returned a valid score; ``failures``
    counts the others by kind (``no_model``, ``llm_error``, ``metric_error``,
    ``invalid_return``, ``closed``), each of which DSPy scored 0. ``judge`` is the model
    usage of the metric's ``skynet.llm`` calls: calls, tokens, cost (None with the reason
    in ``notes`` when a price is unknown), 429s (``rate_limited``) and retries.
    ``model`` names the judge's model (None: no model was given).
    """

    calls: int
    scored: int
    failures: dict[str, int]
    judge: Usage
    model: str | None
    cached: int = 0
    """Calls answered from the result cache: the same metric, example and prediction
    scored before (their judge calls are not paid again, nor counted in ``judge``)."""


class _Tally:
    """The metric's calls and failures by kind; logs the first failure of each kind."""

    def __init__(self, metric: UserFunction) -> None:
        self._metric = metric
        self._lock = threading.Lock()
        self.calls = 0
        self.scored = 0
        self.failures: Counter[str] = Counter()
        self._logged: set[tuple[str, str]] = set()

    def ok(self) -> None:
        with self._lock:
            self.calls += 1
            self.scored += 1

    def failed(self, example_id: Any, exc: Exception) -> None:
        kind, message = self._describe(exc)
        # One line per kind (and exception type: a KeyError and a ZeroDivisionError in the
        # same metric are two problems), so a run of DSPy's silent zeros is seen once.
        key = (kind, type(exc).__name__)
        with self._lock:
            self.calls += 1
            self.failures[kind] += 1
            first = key not in self._logged
            self._logged.add(key)
        if first:
            logger.warning(
                "DSPy metric %s: %s on example %s: %s. DSPy counts this example as a failure "
                "(score 0); further %s failures are counted in statistics(), not logged",
                self._metric.path.name,
                kind,
                short_repr(example_id),
                message,
                kind,
            )

    def _describe(self, exc: Exception) -> tuple[str, str]:
        if isinstance(exc, NoModelError):
            return "no_model", str(exc)
        if isinstance(exc, EngineClosedError):
            return "closed", str(exc)
        if isinstance(exc, ContractError) and not isinstance(exc, InvalidReturn):
            # The DSPy example or prediction could not be read, as the adapter saw it.
            return "metric_error", str(exc)
        info = failures.raised(self._metric, "score", exc)
        return info.kind, info.message


class DSPyMetric:
    """A user's ``score`` as a DSPy metric; see :func:`to_dspy_metric`.

    With a judge model it owns the engine that serves the metric's ``skynet.llm`` calls:
    use it as a context manager (``with to_dspy_metric(...) as metric:``) or call
    :meth:`close`; otherwise the engine is closed when the metric is garbage collected
    or at interpreter exit.
    """

    def __init__(
        self,
        metric: UserFunction,
        *,
        output_field: str | None = None,
        engine: BackgroundEngine | None = None,
        cache: bool = True,
    ) -> None:
        self.metric = metric
        self.output_field = output_field
        self.engine = engine
        # Tools that name a metric by its ``__name__`` (as for a plain function) see "score".
        self.__name__ = "score"
        self._tokens = itertools.count(1)
        self._tally = _Tally(metric)
        self._no_model = _NoModel(metric.path)
        self._cache = _ScoreCache.build(metric, engine) if cache else None
        # Runs engine.close() once: on close(), when the metric is collected, or at exit.
        self._finalizer = (
            None if engine is None else weakref.finalize(self, engine.close, EXIT_TIMEOUT)
        )

    def __repr__(self) -> str:
        field = f", output_field={self.output_field!r}" if self.output_field else ""
        model = self.engine.models.judge if self.engine is not None else None
        judge = f", judge={model.model!r}" if model is not None else ""
        return f"DSPyMetric({self.metric.path}{field}{judge})"

    # DSPy and user code may copy a metric along with a program; a copy is the same
    # metric, sharing its engine (an engine's thread and loop cannot be copied).
    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        return self

    # -- lifetime -------------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self.engine is not None:
            self.engine.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the judge's engine: its clients, loop and thread (idempotent). Calls in
        flight fail with a clear error; later ``skynet.llm`` calls fail the same way."""
        if self._finalizer is not None:
            self._finalizer()

    def statistics(self) -> DSPyMetricStatistics:
        """Calls, failures by kind, and the judge's usage and cost so far."""
        tally = self._tally
        engine = self.engine
        judge = engine.models.judge if engine is not None else None
        return DSPyMetricStatistics(
            calls=tally.calls,
            scored=tally.scored,
            failures=dict(tally.failures),
            judge=engine.usage() if engine is not None else Usage(),
            model=judge.model if judge is not None else None,
            cached=self._cache.hits if self._cache is not None else 0,
        )

    # -- calls ----------------------------------------------------------------------------

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
        try:
            scored = self.score(gold, pred)
        except Exception as exc:
            self._tally.failed(self.example_id(gold), exc)
            raise
        self._tally.ok()
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
        cache = self._cache
        if self.engine is not None and self.engine.closed:
            cache = None  # a closed metric refuses every call, cached or not
        key = None if cache is None else cache.key(inputs, output, expected)
        if key is not None and cache is not None and (hit := cache.get(key)) is not None:
            return hit
        scored = self._scored(example_id, inputs, output, expected)
        if key is not None and cache is not None:
            cache.put(key, scored)
        return scored

    def _scored(self, example_id: Any, inputs: Any, output: Any, expected: Any) -> Scored:
        fn = self.metric
        args = (inputs, output, expected)[: fn.arity]
        engine = self.engine
        if engine is None or engine.models.judge is None:
            with call_context(CallContext(example_id, "score", _UNMEASURED, self._no_model)):
                raw = _called(fn, args)
        else:
            token = next(self._tokens)
            bridge = _EngineBridge(engine, token)
            try:
                with call_context(CallContext(example_id, "score", _UNMEASURED, bridge)):
                    raw = _called(fn, args)
            finally:
                engine.settle(token)
        return validate_return(raw, example_id)


class _ScoreCache:
    """The DSPy metric's memory cache: a valid ``Scored`` per (input, output, expected),
    keyed as the Evaluator's cache is (the metric's source, its REWARD_SPEC, the judge's
    settings). A metric whose file cannot be read (a function typed at a prompt) has none;
    one scored on measured speed or cost has none either (DSPy gives it no measurements
    of its own, so nothing would say which ones a cached score was made with)."""

    __slots__ = ("_lock", "_seen", "candidate", "hits", "keys")

    def __init__(self, keys: KeyMaker) -> None:
        self.keys = keys
        self.candidate = keys.candidate(None) or b""
        self._seen: dict[bytes, Scored] = {}
        self._lock = threading.Lock()
        self.hits = 0

    @classmethod
    def build(cls, metric: UserFunction, engine: BackgroundEngine | None) -> _ScoreCache | None:
        if not Path(metric.path).is_file() or depends_on_measurements(metric):
            return None
        return cls(KeyMaker(metric, None, engine.models if engine is not None else Models()))

    def key(self, inputs: Any, output: Any, expected: Any) -> bytes | None:
        example = Example(id=None, input=inputs, expected=expected, output=output)
        return self.keys.keys(self.candidate, [example])[0]

    def get(self, key: bytes) -> Scored | None:
        hit = self._seen.get(key)
        if hit is not None:
            with self._lock:
                self.hits += 1
        return hit

    def put(self, key: bytes, scored: Scored) -> None:
        self._seen.setdefault(key, scored)


def _called(fn: UserFunction, args: tuple[Any, ...]) -> Any:
    raw = fn.fn(*args)
    if fn.is_async or inspect.isawaitable(raw):
        raw = _run_coroutine(raw)
    return raw


def to_dspy_metric(
    metric: str | Path | UserFunction | Callable[..., Any],
    *,
    output_field: str | None = None,
    lm: Any = None,
    reflection_lm: Any = None,
    models: Models | None = None,
    rpm: float | None = None,
    tpm: float | None = None,
    simulator: Any = None,
    cache: bool = True,
) -> DSPyMetric:
    """The user's ``score`` as a metric for ``dspy.Evaluate``, bootstrapping and ``dspy.GEPA``.

    ``metric`` is a path to ``metric.py``, a loaded :class:`UserFunction` or a function.
    ``score`` receives ``input = dict(example.inputs())``, ``expected = dict(example.labels())``
    (``None`` when there are none) and ``output``: the dict of the prediction's fields, or
    the one field named by ``output_field``. Called with two or three arguments it returns
    the score as a float; called with ``pred_name``/``pred_trace`` (``dspy.GEPA``'s
    feedback call) it returns ``dspy.Prediction(score, feedback, objective_scores)``.
    A return value that breaks the contract raises :class:`InvalidReturn`.

    A judge metric's ``skynet.llm()`` calls go to ``lm`` (the metric model: a ``dspy.LM``,
    an ``llm_client.ModelConfig`` or a litellm-style name such as ``"openai/gpt-4o-mini"``),
    else to ``reflection_lm`` (the fallback: pass the ``reflection_lm`` you give
    ``dspy.GEPA``), or to ``models`` (``evaluator.Models``: ``metric``, else
    ``reflection``). ``rpm``/``tpm`` are the judge's rate limits, kept across all of
    DSPy's threads; ``simulator`` (an ``llm_client.SimulatorConfig``, a dict of its fields
    or a JSON file) serves the model from a local simulator instead, with no key. Keys are
    read now: a missing one is a ``ConfigError`` here, not a zero per example.

    Use the result as a context manager, or call ``close()``, to release the judge's
    engine; ``statistics()`` reports the calls, failures by kind and the judge's cost.

    ``cache`` (on by default; ``cache=False`` to opt out) keeps each valid score in memory
    for the life of the metric, keyed by the metric's source, the example's fields, the
    prediction and the judge's settings: DSPy scores the same (example, prediction) again
    and again, and a judge call already paid for is not paid twice. Failures are never
    cached, and a metric scored on speed or cost is never cached.
    """
    fn = _as_user_function(metric)
    judge = resolve_models(
        lm=lm, reflection_lm=reflection_lm, models=models, rpm=rpm, tpm=tpm, lm_option="lm"
    )
    served_by = simulator_config(simulator)
    if judge.models.judge is None:
        if served_by is not None:
            raise ConfigError(
                "serves the judge's model, but no model is given: pass lm= too (any name "
                "the simulator serves, e.g. 'openai/gpt-4o-mini')",
                option="simulator",
            )
        return DSPyMetric(fn, output_field=output_field, cache=cache)
    if served_by is None:
        check_keys(judge)
    engine = BackgroundEngine(
        judge.models,
        simulator=served_by,
        options=judge.options,
        name=f"skynet-dspy-judge ({fn.path.name})",
    )
    return DSPyMetric(fn, output_field=output_field, engine=engine, cache=cache)
