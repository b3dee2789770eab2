"""Wiring ``skynet.llm`` to the model client, and metering every call per example.

A call from a program's ``run`` goes to the **program model**; a call from a metric's
``score`` goes to the **metric model**, or to the **reflection model** when no metric
model is set (``docs/contract.md``). Each reply's usage is added to the meter of the example
that made it (by its call token), so the pipeline can build the program's
:class:`Observation` and the judge's :class:`Usage` without any global state.

Model calls that user code makes through its own SDK (the openai client, litellm,
dspy.LM) are routed here too (``evaluator/_sdk/``): the router opens the
:class:`~evaluator._sdk._gateway.Gateway` that serves them, and :attr:`ModelRouter.port`
is what the executors hand each call, for ``skynet.llm`` and SDK calls alike. A call
that went around the metered paths makes its example's cost unmeasured
(:meth:`ModelRouter.mark_unmeasured`), and every later one's in that stage.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import msgspec

from llm_client import BudgetExhaustedError, ModelConfig, Redactor, Share, Spend, TokenUsage

from ._call._context import Stage
from ._call._results import Observation, Usage
from ._report import ModelBudget
from ._scrub import ResultScrubber

if TYPE_CHECKING:
    from llm_client import GovernorStatistics, ModelClient

    from ._sdk._gateway import Gateway, ModelPort
    from ._telemetry import Telemetry

__all__ = [
    "Budget",
    "Meter",
    "MeterBook",
    "ModelRouter",
    "ModelStatistics",
    "Models",
    "budget_source",
]

_T = TypeVar("_T")


def budget_source(stats: GovernorStatistics) -> str:
    """Where a governor's budget came from: "configured", "learned from headers",
    "adaptive (429s)" or "none" (the governor says it: ``GovernorStatistics.budget_source``).
    """
    return stats.budget_source


#: How to give a model its price, in words every front end knows: ``ModelConfig``'s and
#: a models file's keys; ``run``/``check`` spell them ``--price-input``/``--price-output``
#: and ``judges`` ``--price MODEL=IN,OUT`` (a note is stored in the results file, which
#: any of them may show, so it names no one command's flag).
PRICE_HINT = "give the model a price (price_input/price_output, USD per million tokens)"


class Models(msgspec.Struct, frozen=True, kw_only=True):
    """Which model serves which stage; any of them may be missing.

    ``program`` serves ``llm()`` in ``run``; ``metric`` serves ``llm()`` in ``score``,
    falling back to ``reflection`` (the model an optimizer reflects with).
    ``sdk_base_url`` (the simulator's, with ``--simulator``) serves every SDK call the
    user's code makes, whatever base URL its client names.
    """

    program: ModelConfig | None = None
    metric: ModelConfig | None = None
    reflection: ModelConfig | None = None
    sdk_base_url: str | None = None

    @property
    def judge(self) -> ModelConfig | None:
        """The model a metric's ``llm()`` calls: the metric model, else the reflection one."""
        return self.metric if self.metric is not None else self.reflection


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """A spending limit that is never overrun (``llm_client/_spend.py``): at most ``usd``
    dollars, ``calls`` model calls (each attempt, retries included) and ``seconds`` of
    wall time; None: no limit on that. On the Evaluator (``budget=``) it holds for the
    Evaluator's whole life; on ``evaluate_many``/``stream``/``evaluate`` for that call
    (inside the Evaluator's). ``max_tokens``: the output cap a model call that sets none
    is sent with under a dollar limit, so that its worst case is known."""

    usd: float | None = None
    calls: int | None = None
    seconds: float | None = None
    max_tokens: int = 4096

    def __post_init__(self) -> None:
        from ._exceptions import ConfigError

        for name in ("usd", "calls", "seconds"):
            value = getattr(self, name)
            if value is None:
                continue
            integral = name == "calls"
            if (
                isinstance(value, bool)
                or not isinstance(value, int if integral else (int, float))
                or not value >= 0
                or value == float("inf")
            ):
                kind = "a whole number" if integral else "a finite number"
                raise ConfigError(f"must be {kind} >= 0 or None", option=name, value=value)
        if (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or (self.max_tokens < 1)
        ):
            raise ConfigError(
                "must be a whole number >= 1", option="max_tokens", value=self.max_tokens
            )

    def ledger(self, parent: Spend | None = None, name: str = "budget") -> Spend:
        """A fresh ledger of these limits, inside ``parent``'s."""
        return Spend(
            usd=self.usd,
            calls=self.calls,
            seconds=self.seconds,
            max_tokens=self.max_tokens,
            parent=parent,
            name=name,
        )


_NO_TOKENS = TokenUsage()
# ``TokenUsage.__add__`` called as a function: the ``+`` of a reply (a subclass) first
# looks for the subclass's reflected add, which costs as much again as the sum.
_add_tokens = TokenUsage.__add__


class Meter:
    """Usage of one example's stage, summed over its model calls: the tokens as one
    :class:`~llm_client.TokenUsage`, and the calls, cost and time beside them."""

    __slots__ = ("calls", "cost_usd", "notes", "queued_ms", "rate_limited", "retries", "tokens")

    def __init__(self) -> None:
        self.calls = 0
        self.tokens = _NO_TOKENS
        self.cost_usd: float | None = 0.0
        self.queued_ms = 0.0
        self.retries = 0
        self.rate_limited = 0
        self.notes: list[str] = []

    def _count(self, calls: int, tokens: TokenUsage, part: Any) -> None:
        """Add the calls, the tokens and the counts of ``part`` (a reply or another meter)."""
        self.calls += calls
        self.tokens = _add_tokens(self.tokens, tokens)
        self.queued_ms += part.queued_ms
        self.retries += part.retries
        self.rate_limited += int(part.rate_limited)

    def add(self, completion: Any) -> None:
        # A hedged call's second copy is a call too (its cost is in the completion's).
        self._count(1 + int(getattr(completion, "hedges", 0)), completion, completion)
        if completion.cost_usd is None:
            # One unpriced call makes the total unmeasured: never a silent partial sum.
            if self.cost_usd is not None:
                note = completion.cost_note or f"no price known for model {completion.model!r}"
                # A missing price is the user's to give; missing or impossible usage is not.
                fix = f"; {PRICE_HINT}" if "price" in note else ""
                self.notes.append(f"cost not measured: {note}{fix}")
            self.cost_usd = None
        elif self.cost_usd is not None:
            self.cost_usd += completion.cost_usd

    def merge(self, other: Meter) -> None:
        """Add ``other``'s usage to this one's; one unpriced call makes the cost None, and
        each note is kept once."""
        self._count(other.calls, other.tokens, other)
        if other.cost_usd is None:
            self.cost_usd = None
        elif self.cost_usd is not None:
            self.cost_usd += other.cost_usd
        for note in other.notes:
            if note not in self.notes:
                self.notes.append(note)

    def add_failure(self, error: Any) -> None:
        """A call given up (an exception, or a routed SDK call's error reply): no reply and
        no cost, but its retries and 429s still count."""
        self.retries += int(getattr(error, "retries", 0))
        self.rate_limited += int(getattr(error, "rate_limited", 0))

    def unmeasured(self, why: str) -> None:
        """Traffic the engine did not meter: the cost is unknown, never a partial sum."""
        note = f"cost not measured: {why}"
        if note not in self.notes:
            self.notes.append(note)
        self.cost_usd = None

    def observation(self, duration_ms: float | None) -> Observation:
        """The program stage's observation of one example."""
        tokens = self.tokens
        return Observation(
            input_tokens=tokens.input_tokens,
            output_tokens=tokens.output_tokens,
            cached_tokens=tokens.cached_tokens,
            reasoning_tokens=tokens.reasoning_tokens,
            duration_ms=duration_ms,
            queued_ms=self.queued_ms,
            cost_usd=self.cost_usd,
            llm_calls=self.calls,
            retries=self.retries,
            rate_limited=self.rate_limited,
            notes=tuple(self.notes),
        )

    def usage(self) -> Usage:
        """The judge's usage on one example."""
        tokens = self.tokens
        return Usage(
            input_tokens=tokens.input_tokens,
            output_tokens=tokens.output_tokens,
            cached_tokens=tokens.cached_tokens,
            reasoning_tokens=tokens.reasoning_tokens,
            llm_calls=self.calls,
            cost_usd=self.cost_usd,
            queued_ms=self.queued_ms,
            retries=self.retries,
            rate_limited=self.rate_limited,
            notes=tuple(self.notes),
        )


class MeterBook(dict[int, Meter]):
    """Meters by call token; once traffic around the metered paths was seen in a stage
    (:attr:`bypass`), every meter popped from then on is unmeasured too: a connection
    kept open may carry later examples' calls without a new connect to see."""

    def __init__(self) -> None:
        super().__init__()
        self.bypass: str | None = None

    def meter(self, token: int) -> Meter:
        meter = self.get(token)
        if meter is None:
            meter = self[token] = Meter()
        return meter

    def mark(self, token: int, why: str) -> None:
        self.meter(token).unmeasured(why)
        if self.bypass is None:
            self.bypass = (
                f"{why} was seen earlier in this run; a connection kept open may carry this "
                "example's calls unseen"
            )
            self[_STICKY] = Meter()  # keeps the book truthy: the pipeline pops every token

    def mark_all(self, why: str) -> None:
        """A call no example can be charged with (``why``): every meter popped from now
        on, those of the examples running now included, is unmeasured."""
        if self.bypass is None:
            self.bypass = (
                f"{why} (seen while this example ran or before; no example can be charged "
                "with it, so this one's cost is not known)"
            )
            self[_STICKY] = Meter()

    @overload
    def pop(self, key: int, /) -> Meter: ...
    @overload
    def pop(self, key: int, default: Meter, /) -> Meter: ...
    @overload
    def pop(self, key: int, default: _T, /) -> Meter | _T: ...
    def pop(self, key: int, /, *default: Any) -> Any:
        meter = dict.pop(self, key, None)
        if self.bypass is None or key == _STICKY:
            if meter is not None:
                return meter
            if default:
                return default[0]
            raise KeyError(key)
        if meter is None:
            meter = Meter()
        if meter.cost_usd is not None:  # an unmeasured one keeps its own reason
            meter.unmeasured(self.bypass)
        return meter


#: The key that keeps a book with a bypass non-empty (tokens are never negative).
_STICKY = -1


class ModelStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Model calls made through the engine since it opened, by stage."""

    program_calls: int = 0
    judge_calls: int = 0
    failed_calls: int = 0
    rate_limited: int = 0
    retries: int = 0
    program_cost_usd: float | None = 0.0
    judge_cost_usd: float | None = 0.0
    sdk_calls: int = 0  # of the calls above, those routed from the user's own SDK


def _no_share(token: int) -> Share | None:
    return None


class ModelRouter:
    """Owns one :class:`ModelClient` per distinct model configuration and routes calls.

    Open it inside the running loop. :meth:`handler` is the ``LLMHandler`` that the
    executors hand to ``skynet.llm``: it routes by stage and meters the reply into the
    calling example's :class:`Meter`, found by the call's token. :attr:`port` adds the
    routed SDK calls to it (``evaluator/_sdk/``).
    """

    def __init__(
        self, models: Models | None, clock: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        self.models = models or Models()
        #: When a model call starts, for its span: bound at import, out of user code's reach.
        self.clock = clock
        self._stack: contextlib.AsyncExitStack | None = None
        self._program: ModelClient | None = None
        self._judge: ModelClient | None = None
        self.program_meters = MeterBook()
        self.judge_meters = MeterBook()
        #: Each stage's usage over the whole run, by stage name (the glossary's).
        self._totals: dict[Stage, Meter] = {"run": Meter(), "score": Meter()}
        self._failed = 0
        #: The call tokens of examples a model call of which did not fit its budget.
        self.refused: set[int] = set()
        self._gateway: Gateway | None = None
        self._port: ModelPort | None = None
        #: The tenant's share of a call token (the flow's ``TenantBook``): model calls
        #: are made under it, so the governor shares budgets between callers by weight.
        self.share_of: Callable[[int], Share | None] = _no_share
        # The second line of defence: a model call's exception enters the engine here,
        # and leaves without any key the engine holds (the client redacts it already).
        self._redact = Redactor()
        #: The keys the run knows, out of every result it makes (evaluator/_scrub.py).
        self.scrubber = ResultScrubber()
        # OpenTelemetry hook: every metered call is shown to it (evaluator/_telemetry.py).
        self.telemetry: Telemetry | None = None

    @property
    def has_program_model(self) -> bool:
        return self.models.program is not None

    @property
    def has_judge_model(self) -> bool:
        return self.models.judge is not None

    async def __aenter__(self) -> ModelRouter:
        from ._sdk._gateway import Gateway, ModelPort

        configs = [c for c in (self.models.program, self.models.judge) if c is not None]
        self._stack = contextlib.AsyncExitStack()
        await self._stack.__aenter__()
        try:
            if configs:
                await self._open_clients(configs)
            gateway = Gateway(self, self.models.sdk_base_url)
            self._gateway = await self._stack.enter_async_context(gateway)
            self._port = ModelPort(self, gateway)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def _open_clients(self, configs: list[ModelConfig]) -> None:
        from llm_client import ModelClient

        assert self._stack is not None
        clients: dict[Any, ModelClient] = {}
        for config in configs:
            if config not in clients:  # one client per distinct configuration
                clients[config] = await self._stack.enter_async_context(ModelClient(config))
        keys = [c.api_key() for c in clients]  # a KeyedModelConfig's too (no variable)
        self._redact = Redactor(keys)
        self.scrubber.know(keys)
        if self.models.program is not None:
            self._program = clients[self.models.program]
        judge = self.models.judge
        if judge is not None:
            self._judge = clients[judge]

    def in_flight_limit(self, stage: Stage) -> Callable[[], int] | None:
        """The live in-flight limit of ``stage``'s model (None: the stage has none), for
        the executor that runs its calls: a stage keeps as many calls going as its model
        admits, not a fixed number."""
        client = self._program if stage == "run" else self._judge
        if client is None:
            return None

        def limit() -> int:
            return client.in_flight_limit or client.config.max_concurrency

        return limit

    def unpriced(self) -> list[str]:
        """The configured models whose price is not known (a dollar budget needs one)."""
        return sorted(
            {c.config.model for c in (self._program, self._judge) if c is not None and not c.priced}
        )

    def know_key(self, key: str | None) -> None:
        """A key a routed SDK call carried: kept out of results like the configured ones."""
        if key:
            self.scrubber.know((key,))

    @property
    def port(self) -> ModelPort:
        """``skynet.llm`` and routed SDK calls, for the executors (open the router first)."""
        if self._port is None:
            raise RuntimeError("the model router is not open")
        return self._port

    async def close_gateway(self) -> None:
        """Cancel routed calls still in flight (their threads see a connection error), so
        that executors closing after this wait for no model call."""
        if self._gateway is not None:
            await self._gateway.aclose()

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
                "--model (the program model; in Python, Evaluator(models=Models(program=...)))"
                if stage == "run"
                else "--metric-model or --reflection-model (in Python, "
                "Evaluator(models=Models(metric=...)))"
            )
            raise RuntimeError(f"skynet.llm() has no model to call: set {which}")
        if input is None:
            messages = [{"role": "user", "content": instruction}]
        else:
            messages = [
                {"role": "system", "content": instruction},
                {"role": "user", "content": input},
            ]
        started = self.clock()
        try:
            completion = await client.complete(messages=messages, **options)
        except Exception as exc:
            self.record_failure(token, stage, exc, started, client.config.base_url)
            clean = self._redact.exception(exc)
            if clean is exc:
                raise
            raise clean from None
        self.record(token, stage, completion, started, client.config.base_url)
        return str(completion.text)

    # -- metering (skynet.llm and routed SDK calls) -------------------------------------

    def _book(self, stage: Stage) -> MeterBook:
        return self.program_meters if stage == "run" else self.judge_meters

    def record(
        self, token: int, stage: Stage, usage: Any, started_ns: int = 0, base_url: str = ""
    ) -> None:
        """A reply (a ``Completion``, a routed ``Forwarded``): into the example's meter.

        ``started_ns`` (``perf_counter_ns``) and ``base_url``: when and where the call went,
        for its span."""
        self._book(stage).meter(token).add(usage)
        self._totals[stage].add(usage)
        if self.telemetry is not None:
            self._show(token, stage, usage, True, started_ns, base_url)

    def record_failure(
        self, token: int, stage: Stage, error: Any, started_ns: int = 0, base_url: str = ""
    ) -> None:
        """A call that got no reply, or an error reply: its retries and 429s count."""
        self._failed += 1
        if isinstance(error, BudgetExhaustedError):
            self.refused.add(token)
        self._book(stage).meter(token).add_failure(error)
        self._totals[stage].add_failure(error)
        if self.telemetry is not None:
            self._show(token, stage, error, False, started_ns, base_url)

    def _show(
        self, token: int, stage: Stage, reply: Any, ok: bool, started_ns: int, base_url: str
    ) -> None:
        from ._telemetry import server_of

        assert self.telemetry is not None
        started_ns = started_ns or self.clock()
        server = server_of(base_url) if base_url else (None, None)
        self.telemetry.call(token, stage, reply, ok=ok, started_ns=started_ns, server=server)

    def mark_unmeasured(self, token: int, stage: Stage, why: str) -> None:
        """Call ``token`` reached the network around the metered paths (``why`` names the
        host): its cost is unmeasured, and so is every later example's of ``stage``."""
        self._book(stage).mark(token, why)
        self._totals[stage].unmeasured(why)

    def mark_unattributed(self, stage: Stage, why: str) -> None:
        """A call of ``stage`` that no example can be charged with (a thread the user
        started, ``why`` says what): the examples of ``stage`` running now, and every
        later one, are unmeasured, and so is the stage's total."""
        self._book(stage).mark_all(why)
        self._totals[stage].unmeasured(why)

    # -- what the gateway asks -----------------------------------------------------------

    def model_for(self, stage: Stage) -> str | None:
        """The configured model name of ``stage``'s ``skynet.llm``, if any."""
        config = self.models.program if stage == "run" else self.models.judge
        return None if config is None else config.model

    def is_configured(self, model: str) -> bool:
        return any(
            c is not None and c.model == model
            for c in (self.models.program, self.models.metric, self.models.reflection)
        )

    def configured_client(self, model: str, base_url: str) -> ModelClient | None:
        """The configured client of ``model`` at ``base_url``, if there is one."""
        base = base_url.rstrip("/")
        for client in (self._program, self._judge):
            if client is not None:
                config = client.config
                if config.model == model and config.base_url.rstrip("/") == base:
                    return client
        return None

    def statistics(self) -> ModelStatistics:
        program, judge = self._totals["run"], self._totals["score"]
        return ModelStatistics(
            program_calls=program.calls,
            judge_calls=judge.calls,
            failed_calls=self._failed,
            rate_limited=program.rate_limited + judge.rate_limited,
            retries=program.retries + judge.retries,
            program_cost_usd=program.cost_usd,
            judge_cost_usd=judge.cost_usd,
            sdk_calls=self._gateway.routed if self._gateway is not None else 0,
        )

    def budgets(self) -> tuple[ModelBudget, ...]:
        """The rate budget in force for each model client (open), and where it came from."""
        roles: dict[int, tuple[ModelClient, list[str]]] = {}
        for role, client in (("program", self._program), ("judge", self._judge)):
            if client is not None:
                roles.setdefault(id(client), (client, []))[1].append(role)
        # SDK hook: the clients opened for the user's own SDK calls to other models.
        for client in self._gateway.clients() if self._gateway is not None else ():
            roles.setdefault(id(client), (client, []))[1].append("sdk")
        budgets = []
        for client, names in roles.values():
            stats = client.statistics()
            budgets.append(
                ModelBudget(
                    model=client.config.model,
                    roles=tuple(names),
                    max_concurrency=stats.max_concurrency,
                    rpm=stats.rpm,
                    tpm=stats.tpm,
                    source=budget_source(stats),
                    in_flight_start=stats.in_flight_start,
                    in_flight_limit=stats.in_flight_limit,
                    in_flight_min=stats.in_flight_min,
                    in_flight_max=stats.in_flight_max,
                    in_flight_source=stats.in_flight_source,
                    in_flight_history=stats.in_flight_history,
                    hedging=stats.hedging,
                )
            )
        return tuple(budgets)
