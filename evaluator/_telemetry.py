"""OpenTelemetry spans and metrics of the engine's work, when ``opentelemetry-api`` is installed.

Nothing here imports OpenTelemetry itself. When an Evaluator opens, :func:`open_telemetry`
uses it if it is already imported (a service that sets up tracing, or passes a provider, has
imported it; a process that never did has no provider and no current span to report to), and
returns None otherwise: tracing is then a no-op, the engine's hooks cost one ``is None`` test
per chunk and per model call, and an evaluation never pays for OpenTelemetry's import.

**Spans are made after the fact**, from what the engine measured anyway, once per chunk
(:meth:`Telemetry.chunk`), in the task that ran the chunk, whose context is the caller's: the
service's current span is the parent.

- ``skynet.example``: one per example, from the chunk's start to its results, with the
  example's id, score, error kind and measured time, tokens and cost;
- ``chat {model}``: one per model call of the example (its program's and its judge's), a child
  of the example's span, from the call's start to its reply, with the GenAI semantic
  conventions' attributes (``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
  ``gen_ai.usage.output_tokens``, ``server.address``, ``server.port``) and the engine's
  retries, 429s, queue wait and cost. The model-call records come from the metering path
  (:meth:`Telemetry.call`, called by ``ModelRouter.record``), kept per call token only while
  a tracer provider is set.

Made after the fact, a span costs nothing while the example runs and needs no context carried
into threads, worker processes or the SDK relay. Spans are never started when no tracer
provider is set (the API's proxy); when the first example span of a chunk is not sampled
although it has a parent, the rest of the chunk is skipped too, and so are the next chunks
under the same parent: the samplers of the SDK (parent-based, trace-id ratio) decide alike
for every span of one trace.

**Metrics** (meter ``skynet-eval``): ``skynet.examples`` and ``skynet.errors`` (by
``error.type``, the error kind) per chunk; per model call ``skynet.model.calls``,
``skynet.model.tokens`` (by ``gen_ai.token.type``), ``skynet.model.cost`` (USD, priced calls
only), ``skynet.model.cost_unmeasured`` (calls without a price: never counted as $0),
``skynet.model.rate_limited`` (429s) and the histogram ``skynet.model.queue_wait`` (ms in the
rate governor). Model-call metrics carry ``skynet.stage`` and ``gen_ai.request.model``.

**Never** the API key, the example's ``expected``, its input or output, the feedback or an
error message (a metric's message or feedback may quote the expected value): only ids,
numbers, kinds, model names and the server's host and port.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from time import perf_counter_ns, time_ns
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from llm_client import TokenUsage

if TYPE_CHECKING:
    from ._call._results import Result

__all__ = ["CallRecord", "Telemetry", "available", "open_telemetry", "server_of"]

#: The instrumentation scope's name, for the tracer and the meter.
SCOPE = "skynet-eval"
#: An example id longer than this is shortened in its span (ids are the caller's values).
MAX_ID = 200


def server_of(base_url: str) -> tuple[str | None, int | None]:
    """The host and port of a model's base URL: never its path, query or credentials."""
    try:
        parts = urlsplit(base_url)
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None, None


_NO_TOKENS = TokenUsage()


class CallRecord:
    """One model call as the metering path saw it, for its span."""

    __slots__ = (
        "cost_usd",
        "ended_ns",
        "error_type",
        "model",
        "port",
        "queued_ms",
        "rate_limited",
        "retries",
        "server",
        "stage",
        "started_ns",
        "tokens",
    )

    def __init__(self, stage: str, started_ns: int, ended_ns: int, model: str) -> None:
        self.stage, self.started_ns, self.ended_ns, self.model = stage, started_ns, ended_ns, model
        self.server: str | None = None
        self.port: int | None = None
        self.tokens = _NO_TOKENS
        self.retries = 0
        self.rate_limited = 0
        self.queued_ms = 0.0
        self.cost_usd: float | None = None
        self.error_type: str | None = None


def _id_text(example_id: Any) -> str:
    text = example_id if isinstance(example_id, str) else repr(example_id)
    return text if len(text) <= MAX_ID else text[: MAX_ID - 3] + "..."


def _error_type(error: Any) -> str:
    """A failed call's kind for ``error.type``: its HTTP status, else its class name."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and status:
        return str(status)
    return type(error).__name__


class Telemetry:
    """The engine's tracer, meter and instruments, and the model calls awaiting their spans.

    Built by :func:`open_telemetry` when an Evaluator opens. ``tracer_provider`` and
    ``meter_provider`` are the caller's; None: OpenTelemetry's global ones, looked up at
    each chunk so that a provider set after the Evaluator opened is used.
    """

    def __init__(
        self,
        tracer_provider: Any,
        meter_provider: Any,
        clock: Callable[[], int] = perf_counter_ns,
        wall: Callable[[], int] = time_ns,
    ) -> None:
        from opentelemetry import metrics, trace

        # Bound at import, as every clock of the engine: user code patching `time` or this
        # module changes no span's times ("Clocks user code cannot reach").
        self.clock = clock

        self._trace = trace
        self._given = tracer_provider
        self._provider: Any = None
        self._tracer: Any = None
        self._kind_client = trace.SpanKind.CLIENT
        self._error_status = trace.Status(trace.StatusCode.ERROR)
        # epoch ns = perf_counter ns + offset: the engine's clock is perf_counter's.
        self._offset = wall() - clock()
        self.calls: dict[int, list[CallRecord]] = {}
        #: (trace id, span id) of the last parent whose example spans were not sampled.
        self.unsampled_parent: tuple[int, int] | None = None
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE)
        self._examples = meter.create_counter(
            "skynet.examples", unit="{example}", description="Examples evaluated"
        )
        self._errors = meter.create_counter(
            "skynet.errors", unit="{example}", description="Error results, by error kind"
        )
        self._model_calls = meter.create_counter(
            "skynet.model.calls", unit="{call}", description="Model calls through the engine"
        )
        self._tokens = meter.create_counter(
            "skynet.model.tokens", unit="{token}", description="Tokens of model calls"
        )
        self._cost = meter.create_counter(
            "skynet.model.cost", unit="USD", description="Cost of the priced model calls"
        )
        self._unpriced = meter.create_counter(
            "skynet.model.cost_unmeasured",
            unit="{call}",
            description="Model calls whose cost could not be measured (no price known)",
        )
        self._rate_limited = meter.create_counter(
            "skynet.model.rate_limited", unit="{response}", description="429 responses"
        )
        self._queue_wait = meter.create_histogram(
            "skynet.model.queue_wait",
            unit="ms",
            description="Time a model call waited on the engine's rate governor",
        )

    # -- the tracer ---------------------------------------------------------------------

    def tracer(self) -> Any:
        """The tracer to use now, or None when no tracer provider is set (no spans)."""
        provider = self._given
        if provider is None:
            trace = self._trace
            provider = trace.get_tracer_provider()
            if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
                return None
        if provider is not self._provider:
            self._provider, self._tracer = provider, provider.get_tracer(SCOPE)
        return self._tracer

    def wall_ns(self, perf_ns: int) -> int:
        return perf_ns + self._offset

    # -- the metering path ----------------------------------------------------------------

    def call(
        self,
        token: int,
        stage: str,
        reply: Any,
        *,
        ok: bool,
        started_ns: int,
        server: tuple[str | None, int | None],
    ) -> None:
        """One model call ended (``reply``: a Completion, a Forwarded, or the error): its
        metrics now, and its record for the example's span when spans are being made."""
        model = str(getattr(reply, "model", None) or "(unknown)")
        attributes = {"skynet.stage": stage, "gen_ai.request.model": model}
        self._model_calls.add(1, attributes)
        rate_limited = int(getattr(reply, "rate_limited", 0))
        if rate_limited:
            self._rate_limited.add(rate_limited, attributes)
        record = CallRecord(stage, started_ns, self.clock(), model)
        record.server, record.port = server
        record.retries, record.rate_limited = int(getattr(reply, "retries", 0)), rate_limited
        if ok:
            self._replied(reply, record, attributes)
        else:
            record.error_type = _error_type(reply)
        if self.tracer() is not None:
            self.calls.setdefault(token, []).append(record)

    def _replied(self, reply: Any, record: CallRecord, attributes: dict[str, str]) -> None:
        record.tokens = reply.tokens
        record.queued_ms, record.cost_usd = reply.queued_ms, reply.cost_usd
        self._tokens.add(reply.input_tokens, {**attributes, "gen_ai.token.type": "input"})
        self._tokens.add(reply.output_tokens, {**attributes, "gen_ai.token.type": "output"})
        self._queue_wait.record(reply.queued_ms, attributes)
        if reply.cost_usd is None:
            self._unpriced.add(1, attributes)
        else:
            self._cost.add(reply.cost_usd, attributes)

    # -- the pipeline -----------------------------------------------------------------------

    def chunk(self, results: Sequence[Result], base: int, started_ns: int, errors: int) -> None:
        """A chunk's results (tokens ``base ..``): its metrics, then its spans."""
        self._examples.add(len(results))
        if errors:
            kinds: dict[str, int] = {}
            for result in results:
                if result.error is not None:
                    kinds[result.error.kind] = kinds.get(result.error.kind, 0) + 1
            for kind, count in kinds.items():
                self._errors.add(count, {"error.type": kind})
        calls = self.calls
        records = None
        if calls:
            # With a result cache only the misses ran, numbered base.. in their order: a
            # cached result made no call in this run.
            tokens = iter(range(base, base + len(results)))
            records = [None if r.cached else calls.pop(next(tokens), None) for r in results]
        tracer = self.tracer()
        if tracer is not None:
            _Spans(self, tracer).chunk(results, records, started_ns)

    def drop(self, base: int, n: int) -> None:
        """A chunk ended without results (its caller cancelled): forget its model calls."""
        if self.calls:
            for token in range(base, base + n):
                self.calls.pop(token, None)


class _Spans:
    """The spans of one chunk."""

    __slots__ = ("_telemetry", "_tracer")

    def __init__(self, telemetry: Telemetry, tracer: Any) -> None:
        self._telemetry, self._tracer = telemetry, tracer

    def chunk(
        self,
        results: Sequence[Result],
        records: list[list[CallRecord] | None] | None,
        started_ns: int,
    ) -> None:
        telemetry = self._telemetry
        parent = telemetry._trace.get_current_span().get_span_context()
        parent_key = (parent.trace_id, parent.span_id) if parent.is_valid else None
        if parent_key is not None and parent_key == telemetry.unsampled_parent:
            return  # this parent's children were found unsampled by an earlier chunk
        start = telemetry.wall_ns(started_ns)
        end = telemetry.wall_ns(telemetry.clock())
        for i, result in enumerate(results):
            span = self._tracer.start_span("skynet.example", start_time=start)
            if not span.is_recording():
                span.end(end_time=end)
                if parent_key is not None:
                    # The trace is not sampled: no span of this chunk would be, nor of the
                    # next chunks under the same parent.
                    telemetry.unsampled_parent = parent_key
                    return
                continue
            self._example(span, result)
            if records is not None and records[i]:
                self._model_calls(span, records[i] or [])
            span.end(end_time=end)

    def _example(self, span: Any, result: Result) -> None:
        obs, judge = result.observation, result.judge
        attributes: dict[str, Any] = {
            "skynet.example.id": _id_text(result.example_id),
            "skynet.score": result.score,
            "skynet.queued_ms": obs.queued_ms + judge.queued_ms,
            "skynet.model.calls": obs.llm_calls + judge.llm_calls,
        }
        if obs.duration_ms is not None:
            attributes["skynet.duration_ms"] = obs.duration_ms
        if result.metric_ms is not None:
            attributes["skynet.metric_ms"] = result.metric_ms
        if obs.llm_calls:
            attributes["skynet.input_tokens"] = obs.input_tokens
            attributes["skynet.output_tokens"] = obs.output_tokens
        # Unmeasured stays absent, never 0: `skynet.cost_measured` says which.
        attributes["skynet.cost_measured"] = obs.cost_usd is not None
        if obs.cost_usd is not None:
            attributes["skynet.cost_usd"] = obs.cost_usd
        if judge.llm_calls:
            attributes["skynet.judge.input_tokens"] = judge.input_tokens
            attributes["skynet.judge.output_tokens"] = judge.output_tokens
            attributes["skynet.judge.cost_measured"] = judge.cost_usd is not None
            if judge.cost_usd is not None:
                attributes["skynet.judge.cost_usd"] = judge.cost_usd
        if result.error is not None:
            attributes["error.type"] = result.error.kind
            span.set_status(self._telemetry._error_status)
        span.set_attributes(attributes)

    def _model_calls(self, parent: Any, records: list[CallRecord]) -> None:
        telemetry = self._telemetry
        context = telemetry._trace.set_span_in_context(parent)
        for record in records:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": record.model,
                "skynet.stage": record.stage,
                "skynet.retries": record.retries,
                "skynet.rate_limited": record.rate_limited,
            }
            if record.server is not None:
                attributes["server.address"] = record.server
            if record.port is not None:
                attributes["server.port"] = record.port
            if record.error_type is None:
                attributes["gen_ai.usage.input_tokens"] = record.tokens.input_tokens
                attributes["gen_ai.usage.output_tokens"] = record.tokens.output_tokens
                attributes["skynet.queued_ms"] = record.queued_ms
                attributes["skynet.cost_measured"] = record.cost_usd is not None
                if record.cost_usd is not None:
                    attributes["skynet.cost_usd"] = record.cost_usd
            else:
                attributes["error.type"] = record.error_type
            span = self._tracer.start_span(
                f"chat {record.model}",
                context=context,
                kind=telemetry._kind_client,
                attributes=attributes,
                start_time=telemetry.wall_ns(record.started_ns),
            )
            if record.error_type is not None:
                span.set_status(telemetry._error_status)
            span.end(end_time=telemetry.wall_ns(record.ended_ns))


def available() -> bool:
    """Whether OpenTelemetry's API can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def open_telemetry(tracer_provider: Any = None, meter_provider: Any = None) -> Telemetry | None:
    """The engine's telemetry, or None when OpenTelemetry is not in use in this process:
    neither a provider was given nor ``opentelemetry.trace`` imported by anyone."""
    given = tracer_provider is not None or meter_provider is not None
    if not given and "opentelemetry.trace" not in sys.modules:
        return None
    try:
        from opentelemetry import metrics, trace  # noqa: F401
    except ImportError:  # a namespace package without the API
        return None
    return Telemetry(tracer_provider, meter_provider)
