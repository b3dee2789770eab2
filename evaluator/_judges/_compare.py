"""Comparing judge models: one judge metric, several models, one table.

Every model scores the same outputs (from the dataset, or from one run of the program
reused for all), all models at once under their own rate budgets. Each row reports
cost, tokens, latency, rate-limit trouble and agreement with a reference model or with
human labels, with a bootstrap interval so that a small dataset does not overclaim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import anyio
import msgspec

from llm_client import ModelConfig

from ._agreement import agreement_rate, bootstrap_ci, cohens_kappa, pareto_front, pearson
from ._dataset import Example, examples_from_rows
from ._loader import UserFunction, load_metric
from ._results import Result

__all__ = ["JudgeRow", "JudgesReport", "compare_judges", "verdict_of"]

_TRUE = frozenset({"pass", "true", "yes", "y", "1", "correct", "good", "ok"})
_FALSE = frozenset({"fail", "false", "no", "n", "0", "incorrect", "bad", "wrong"})


class JudgeRow(msgspec.Struct, kw_only=True):
    """One model's figures over the dataset."""

    model: str
    examples: int
    scored: int
    errors: int
    error_kinds: dict[str, int] = {}
    mean_score: float | None = None
    cost_usd: float | None = None
    cost_per_1k_usd: float | None = None
    cost_note: str | None = None
    input_tokens_per_example: float | None = None
    output_tokens_per_example: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    rate_limited: int = 0
    retries: int = 0
    compared: int = 0
    agreement: float | None = None
    agreement_ci: tuple[float, float] | None = None
    kappa: float | None = None
    pearson: float | None = None
    pareto: bool = False
    failure: str | None = None


class JudgesReport(msgspec.Struct, kw_only=True):
    """All rows, and what agreement was measured against."""

    reference: str | None
    kind: str  # "verdicts" (agreement, kappa) or "scores" (Pearson)
    examples: int
    rows: list[JudgeRow]


def verdict_of(value: Any) -> float | None:
    """A label or score as a number: PASS/FAIL words become 1/0; None when unreadable."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return 1.0
        if text in _FALSE:
            return 0.0
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _row(model: str, results: list[Result]) -> JudgeRow:
    n = len(results)
    ok = [r for r in results if r.error is None]
    kinds: dict[str, int] = {}
    for r in results:
        if r.error is not None:
            kinds[r.error.kind] = kinds.get(r.error.kind, 0) + 1
    costs = [r.judge.cost_usd for r in results if r.judge.llm_calls]
    unknown = [r for r in results if r.judge.llm_calls and r.judge.cost_usd is None]
    cost: float | None = None
    note = None
    if unknown:
        notes = [n for r in unknown for n in r.judge.notes]
        note = notes[0] if notes else "price unknown"
    elif not costs:
        note = "no model call completed"
    else:
        cost = sum(c for c in costs if c is not None)
    latencies = [r.metric_ms for r in ok if r.metric_ms is not None]
    failure = None
    if n and not ok:
        first = results[0].error
        failure = f"every example failed; first: {first.message}" if first else None
    return JudgeRow(
        model=model,
        examples=n,
        scored=len(ok),
        errors=n - len(ok),
        error_kinds=kinds,
        mean_score=sum(r.score for r in ok) / len(ok) if ok else None,
        cost_usd=cost,
        cost_per_1k_usd=cost * 1000 / n if cost is not None and n else None,
        cost_note=note,
        input_tokens_per_example=sum(r.judge.input_tokens for r in results) / n if n else None,
        output_tokens_per_example=sum(r.judge.output_tokens for r in results) / n if n else None,
        latency_p50_ms=_percentile(latencies, 0.5),
        latency_p95_ms=_percentile(latencies, 0.95),
        rate_limited=sum(r.judge.rate_limited for r in results),
        retries=sum(r.judge.retries for r in results),
        failure=failure,
    )


def _agree(row: JudgeRow, mine: list[float | None], ref: list[float | None], binary: bool) -> None:
    pairs = [(a, b) for a, b in zip(mine, ref, strict=True) if a is not None and b is not None]
    row.compared = len(pairs)
    if not pairs:
        return
    if binary:
        a = [p[0] >= 0.5 for p in pairs]
        b = [p[1] >= 0.5 for p in pairs]
        row.agreement = agreement_rate(a, b)
        row.kappa = cohens_kappa(a, b)
        row.agreement_ci = bootstrap_ci(
            lambda s: agreement_rate([x for x, _ in s], [y for _, y in s]),
            list(zip(a, b, strict=True)),
        )
    else:
        row.pearson = pearson([p[0] for p in pairs], [p[1] for p in pairs])
        row.agreement = row.pearson
        if row.pearson is not None:
            row.agreement_ci = bootstrap_ci(
                lambda s: pearson([x for x, _ in s], [y for _, y in s]), pairs
            )


async def _outputs(
    examples: list[Example], program: Any, artifact: Any, evaluator_options: dict[str, Any]
) -> list[Example]:
    """Run the program once; every judge then scores the same outputs."""
    from ._pipeline import Evaluator

    def keep(input: Any, output: Any, expected: Any = None) -> tuple[float, dict[str, str]]:
        return 0.0, {"feedback": ""}

    passthrough = UserFunction(
        path=__import__("pathlib").Path(__file__),
        module_name=__name__,
        name="score",
        fn=keep,
        arity=3,
        is_async=False,
        uses_llm=False,
        execution="inline",
    )
    async with Evaluator(metric=passthrough, program=program, **evaluator_options) as ev:
        results = await ev.evaluate_many(artifact, examples)
    return [
        msgspec.structs.replace(ex, output=r.output) if r.error is None else ex
        for ex, r in zip(examples, results, strict=True)
    ]


async def compare_judges(
    metric: str | UserFunction,
    examples: Iterable[Any],
    models: Sequence[ModelConfig],
    *,
    reference_model: str | None = None,
    labels: str | None = None,
    program: Any = None,
    artifact: Any = None,
    timeout: float = 60.0,
    on_result: Callable[[str, Result], None] | None = None,
    **evaluator_options: Any,
) -> JudgesReport:
    """Score ``examples`` with the judge ``metric`` once per model, all models at once."""
    from ._models import Models
    from ._pipeline import Evaluator

    if reference_model is not None and labels is not None:
        raise ValueError("give a reference model or a labels column, not both")
    names = [m.model for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"each model may be named once, got {names}")
    if reference_model is not None and reference_model not in names:
        raise ValueError(f"the reference model {reference_model!r} is not among {names}")
    fn = metric if isinstance(metric, UserFunction) else load_metric(metric)
    rows_in = list(examples_from_rows(examples))
    if program is not None:
        rows_in = await _outputs(rows_in, program, artifact, evaluator_options)
    results: dict[str, list[Result]] = {}

    async def one(config: ModelConfig) -> None:
        async with Evaluator(
            metric=fn, timeout=timeout, models=Models(metric=config), **evaluator_options
        ) as ev:
            got: list[Result] = []
            async for result in ev.stream(None, rows_in):
                got.append(result)
                if on_result is not None:
                    on_result(config.model, result)
        order = {ex.id: i for i, ex in enumerate(rows_in)}
        got.sort(key=lambda r: order[r.example_id])
        results[config.model] = got

    async with anyio.create_task_group() as tg:
        for config in models:
            tg.start_soon(one, config)

    rows = [_row(m, results[m]) for m in names]
    scores = {m: [None if r.error else r.score for r in results[m]] for m in names}
    reference: list[float | None] | None = None
    ref_name: str | None = None
    if labels is not None:
        ref_name = f"labels:{labels}"
        reference = [_label(ex, labels) for ex in rows_in]
    elif reference_model is not None:
        ref_name = f"model:{reference_model}"
        reference = scores[reference_model]
    observed = [v for m in names for v in scores[m] if v is not None]
    if reference is not None:
        observed += [v for v in reference if v is not None]
    binary = all(v in (0.0, 1.0) for v in observed)
    if reference is not None:
        for row in rows:
            _agree(row, scores[row.model], reference, binary)
    front = pareto_front([(r.cost_per_1k_usd, r.agreement) for r in rows])
    for row, on_front in zip(rows, front, strict=True):
        row.pareto = on_front
    return JudgesReport(
        reference=ref_name,
        kind="verdicts" if binary else "scores",
        examples=len(rows_in),
        rows=rows,
    )


def _label(example: Example, column: str) -> float | None:
    for source in (example.expected or {}, example.input):
        if column in source:
            return verdict_of(source[column])
    return None
