"""What a judges comparison reports, and the statistics behind each figure.

One :class:`JudgeRow` per judge: what it cost and how fast it was (over every call of
every repeat), how far its verdicts agree with the reference (its majority verdict per
example, when it judged each example more than once), how far it agrees with itself
across repeats, and where it departs from the reference (false passes and false fails,
or its mean bias for numeric scores). The report keeps every call's verdict per example
(:class:`JudgeCase`) so that a person can read the cases behind each number.

Choices, stated once:

* Self-agreement is measured on the examples that every repeat scored. For verdicts:
  the share of examples whose verdict never flips, and Fleiss' kappa over the repeats.
  For numeric scores: the share whose score never changes, ICC(1,1) (one-way random
  effects: the share of score variance that lies between examples rather than between
  repeats; it approaches Fleiss' kappa on 0/1 data, so the two columns read alike, and it
  is free of the score's scale), and the mean within-example standard deviation in score units.
* A majority tie (an even number of repeats, split evenly) takes the first repeat's
  verdict, the one a single run would have given; ties are counted per row. An odd
  ``repeat`` has none.
* Intervals are percentile bootstraps over examples (2,000 resamples, seed 0:
  :func:`evaluator._stats.bootstrap_ci`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from .._call._results import Result
from .._stats import bootstrap_ci, percentile
from ._agreement import (
    agreement_rate,
    cohens_kappa,
    confusion_counts,
    fleiss_kappa,
    icc_oneway,
    majority,
    mean_difference,
    pearson,
    stable_share,
    within_std,
)

__all__ = [
    "TIE_RULE",
    "Confusion",
    "JudgeCall",
    "JudgeCase",
    "JudgeRow",
    "JudgesReport",
    "Projection",
    "SelfAgreement",
    "consensus",
    "disagreement",
    "self_agreement",
    "usage_row",
]

TIE_RULE = "a majority tie takes the first repeat's verdict"

Runs = Sequence[Sequence[Result]]  # runs[repeat][example], examples in input order


class Confusion(msgspec.Struct, kw_only=True):
    """Pass/fail verdicts against the reference's. A false pass is leniency (the judge
    passes what the reference fails), a false fail strictness. The rates are over the
    reference's fails and passes; None when it has none."""

    both_pass: int
    false_pass: int
    false_fail: int
    both_fail: int
    lenient_rate: float | None = None
    strict_rate: float | None = None


class SelfAgreement(msgspec.Struct, kw_only=True):
    """How far a judge agrees with itself over ``repeats`` runs of every example.

    ``compared``: examples that every repeat scored (the others are left out). ``stable``:
    the share whose verdict (score) never changed. ``kappa``: Fleiss' kappa for verdicts,
    ICC(1,1) for numeric scores. ``within_std``: numeric scores only, the mean within-
    example standard deviation. ``ties``: verdicts only, examples whose majority was a tie.
    """

    repeats: int
    compared: int = 0
    stable: float | None = None
    stable_ci: tuple[float, float] | None = None
    kappa: float | None = None
    kappa_ci: tuple[float, float] | None = None
    within_std: float | None = None
    ties: int = 0


class Projection(msgspec.Struct, kw_only=True):
    """A judge's cost and wall time for ``examples`` examples, one call each, projected
    from what was measured; ``basis`` says from what, ``limited_by`` which limit binds.
    A figure that could not be projected is None and ``note`` says why."""

    examples: int
    cost_usd: float | None = None
    wall_s: float | None = None
    per_minute: float | None = None
    limited_by: str | None = None
    basis: str = ""
    note: str | None = None


class JudgeRow(msgspec.Struct, kw_only=True):
    """One judge's figures over the dataset.

    ``label`` names the row (``model`` is the name the server knows). ``examples`` counts
    the dataset's examples; ``scored`` and ``errors`` count calls, ``examples * repeats``
    in all. Cost and tokens are totals and per call (one call of the judge on one
    example). Latency is over every call that succeeded, without the time it waited on the
    rate governor (``rate_limited`` and the projection speak for the limits); ``service_ms_mean``
    is its mean. ``agreement`` is the agreement rate
    (verdicts) or Pearson's r (scores) of the judge's majority (mean) with the reference.
    """

    label: str
    model: str
    provider: str | None = None
    base_url: str | None = None
    simulated: bool = False
    examples: int
    repeats: int = 1
    scored: int
    errors: int
    error_kinds: dict[str, int] = {}
    mean_score: float | None = None
    cost_usd: float | None = None
    cost_per_1k_usd: float | None = None
    cost_note: str | None = None
    input_tokens_per_example: float | None = None
    output_tokens_per_example: float | None = None
    calls_per_example: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    service_ms_mean: float | None = None
    concurrency: int | None = None
    rate_limited: int = 0
    retries: int = 0
    compared: int = 0
    agreement: float | None = None
    agreement_ci: tuple[float, float] | None = None
    kappa: float | None = None
    pearson: float | None = None
    confusion: Confusion | None = None
    bias: float | None = None
    bias_ci: tuple[float, float] | None = None
    self_agreement: SelfAgreement | None = None
    projection: Projection | None = None
    pareto: bool = False
    failure: str | None = None


class JudgeCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One call of one judge on one example: its score, or why there is none."""

    score: float | None = None
    feedback: str = ""
    error: str | None = None


class JudgeCase(msgspec.Struct, kw_only=True):
    """One example as every judge saw it: the reference, each judge's verdict (majority
    or mean over repeats) and every call. ``disagree``: judges whose verdict differs from
    the reference; ``flips``: judges whose repeats did not all agree."""

    id: Any
    input: dict[str, Any]
    output: Any = msgspec.UNSET
    reference: float | None = None
    verdicts: dict[str, float | None] = {}
    calls: dict[str, list[JudgeCall]] = {}
    disagree: list[str] = []
    flips: list[str] = []


class JudgesReport(msgspec.Struct, kw_only=True):
    """All rows, what agreement was measured against, and every case."""

    reference: str | None
    kind: str  # "verdicts" (agreement, kappa, confusion) or "scores" (Pearson, bias)
    examples: int
    rows: list[JudgeRow]
    repeats: int = 1
    tie_rule: str = TIE_RULE
    project: int | None = None
    cases: list[JudgeCase] = []


def _cost(results: list[Result]) -> tuple[float | None, str | None]:
    """The judge's total cost, or None with the reason: never a 0 for unknown prices."""
    called = [r for r in results if r.judge.llm_calls]
    unknown = [r for r in called if r.judge.cost_usd is None]
    if unknown:
        notes = [n for r in unknown for n in r.judge.notes]
        return None, notes[0] if notes else "price unknown"
    if not called:
        return None, "no model call completed"
    return math.fsum(r.judge.cost_usd or 0.0 for r in called), None


def usage_row(label: str, model: str, runs: Runs) -> JudgeRow:
    """Counts, cost, tokens, latency and rate-limit trouble over every call."""
    results = [r for run in runs for r in run]
    n = len(results)
    ok = [r for r in results if r.error is None]
    kinds: dict[str, int] = {}
    for r in results:
        if r.error is not None:
            kinds[r.error.kind] = kinds.get(r.error.kind, 0) + 1
    cost, note = _cost(results)
    # The judge's own time: a wait on our rate governor says how hard the run pushed the
    # configured limits, not how fast the model answers.
    service = [max(0.0, r.metric_ms - r.judge.queued_ms) for r in ok if r.metric_ms is not None]
    failure = None
    if n and not ok:
        first = next(r.error for r in results if r.error is not None)
        failure = f"every call failed; first: {first.kind}: {first.message}"
    return JudgeRow(
        label=label,
        model=model,
        examples=len(runs[0]) if runs else 0,
        repeats=len(runs),
        scored=len(ok),
        errors=n - len(ok),
        error_kinds=kinds,
        mean_score=math.fsum(r.score for r in ok) / len(ok) if ok else None,
        cost_usd=cost,
        cost_per_1k_usd=cost * 1000 / n if cost is not None and n else None,
        cost_note=note,
        input_tokens_per_example=sum(r.judge.input_tokens for r in results) / n if n else None,
        output_tokens_per_example=sum(r.judge.output_tokens for r in results) / n if n else None,
        calls_per_example=sum(r.judge.llm_calls for r in results) / n if n else None,
        latency_p50_ms=percentile(service, 0.5),
        latency_p95_ms=percentile(service, 0.95),
        service_ms_mean=math.fsum(service) / len(service) if service else None,
        rate_limited=sum(r.judge.rate_limited for r in results),
        retries=sum(r.judge.retries for r in results),
        failure=failure,
    )


def scores_by_example(runs: Runs) -> list[list[float | None]]:
    """``[example][repeat]``: each call's score, None where it failed."""
    return [
        [None if run[i].error is not None else run[i].score for run in runs]
        for i in range(len(runs[0]) if runs else 0)
    ]


def consensus(
    scores: Sequence[Sequence[float | None]], binary: bool
) -> tuple[list[float | None], int]:
    """Each example's verdict over its scored repeats (majority for verdicts, mean for
    scores; None when no repeat scored it), and how many majorities were ties."""
    out: list[float | None] = []
    ties = 0
    for row in scores:
        got = [s for s in row if s is not None]
        if not got:
            out.append(None)
        elif binary:
            verdict, tie = majority([s >= 0.5 for s in got])
            ties += tie
            out.append(1.0 if verdict else 0.0)
        else:
            out.append(math.fsum(got) / len(got))
    return out, ties


def self_agreement(
    scores: Sequence[Sequence[float | None]], binary: bool, ties: int
) -> SelfAgreement:
    """Flip-free share and Fleiss' kappa (verdicts) or ICC(1,1) (scores) across repeats,
    over the examples every repeat scored, each with a bootstrap interval."""
    repeats = len(scores[0]) if scores else 0
    complete = [[float(s) for s in row if s is not None] for row in scores]
    complete = [row for row in complete if len(row) == repeats]
    out = SelfAgreement(repeats=repeats, compared=len(complete), ties=ties if binary else 0)
    if repeats < 2 or not complete:
        return out
    out.stable = stable_share(complete)
    out.stable_ci = bootstrap_ci(stable_share, complete)
    if binary:
        verdicts = [[s >= 0.5 for s in row] for row in complete]
        out.kappa = fleiss_kappa(verdicts)
        out.kappa_ci = bootstrap_ci(fleiss_kappa, verdicts)
    else:
        out.kappa = icc_oneway(complete)
        out.kappa_ci = bootstrap_ci(icc_oneway, complete) if out.kappa is not None else None
        out.within_std = within_std(complete)
    return out


def _confusion(mine: list[bool], ref: list[bool]) -> Confusion:
    both_pass, false_pass, false_fail, both_fail = confusion_counts(mine, ref)
    ref_fails, ref_passes = false_pass + both_fail, both_pass + false_fail
    return Confusion(
        both_pass=both_pass,
        false_pass=false_pass,
        false_fail=false_fail,
        both_fail=both_fail,
        lenient_rate=false_pass / ref_fails if ref_fails else None,
        strict_rate=false_fail / ref_passes if ref_passes else None,
    )


def disagreement(
    row: JudgeRow, mine: Sequence[float | None], ref: Sequence[float | None], binary: bool
) -> None:
    """Fill ``row``'s agreement with the reference and where they part: agreement, kappa
    and the confusion matrix for verdicts; Pearson's r and the mean bias for scores."""
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
        row.confusion = _confusion(a, b)
        return
    row.pearson = pearson([p[0] for p in pairs], [p[1] for p in pairs])
    row.agreement = row.pearson
    if row.pearson is not None:
        row.agreement_ci = bootstrap_ci(
            lambda s: pearson([x for x, _ in s], [y for _, y in s]), pairs
        )
    row.bias = mean_difference([p[0] for p in pairs], [p[1] for p in pairs])
    row.bias_ci = bootstrap_ci(
        lambda s: mean_difference([x for x, _ in s], [y for _, y in s]), pairs
    )
