"""Comparing judge models: one judge metric, several models, one table.

Every model scores the same outputs (from the dataset, or from one run of the program
reused for all), all models at once, each through its own model client (its own base
URL, key and rate budget). With ``repeat`` K each model judges every example K times:
K passes over the examples through the same Evaluator, every call made anew (nothing in
the engine caches or merges a judge's calls), so the repeats measure the judge's own
variability. The figures and the choices behind them are in :mod:`._report`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from llm_client import ModelConfig

from .._call._loader import UserFunction, load_metric
from .._call._results import Result
from .._data._dataset import Example, examples_from_rows
from .._exceptions import ConfigError
from ._agreement import pareto_front
from ._projection import project as _project
from ._report import (
    JudgeCall,
    JudgeCase,
    JudgeRow,
    JudgesReport,
    consensus,
    disagreement,
    scores_by_example,
    self_agreement,
    usage_row,
)
from ._spec import JudgeSpec

__all__ = ["MAX_REPEAT", "compare_judges", "verdict_of"]

#: More repeats than this measure little more and multiply the bill.
MAX_REPEAT = 100

_TRUE = frozenset({"pass", "true", "yes", "y", "1", "correct", "good", "ok"})
_FALSE = frozenset({"fail", "false", "no", "n", "0", "incorrect", "bad", "wrong"})


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


@dataclass
class _Judge:
    """One judge being run: what it is, and what came back."""

    label: str
    config: ModelConfig
    spec: JudgeSpec | None
    runs: list[list[Result]] = field(default_factory=list)
    concurrency: int | None = None
    failure: str | None = None


def _judges(models: Sequence[ModelConfig | JudgeSpec]) -> list[_Judge]:
    judges = []
    for m in models:
        if isinstance(m, JudgeSpec):
            judges.append(_Judge(m.label, m.config(), m))
        elif isinstance(m, ModelConfig):
            judges.append(_Judge(m.model, m, None))
        else:
            raise ConfigError(
                f"each model must be a ModelConfig or a JudgeSpec, got {type(m).__name__}",
                option="models",
            )
    labels = [j.label for j in judges]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ConfigError(
            f"each judge needs its own label; {twice} appear more than once (give a JudgeSpec "
            "a unique label to judge with one model twice)",
            option="models",
        )
    return judges


def _count(value: Any, name: str, upper: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"must be a whole number of at least 1, got {value!r}", option=name)
    if upper is not None and value > upper:
        raise ConfigError(f"must be at most {upper}, got {value}", option=name)


async def _outputs(
    examples: list[Example], program: Any, artifact: Any, evaluator_options: dict[str, Any]
) -> list[Example]:
    """Run the program once; every judge then scores the same outputs."""
    from .._pipeline import Evaluator

    def keep(input: Any, output: Any, expected: Any = None) -> tuple[float, dict[str, str]]:
        return 0.0, {"feedback": ""}

    passthrough = UserFunction(
        path=Path(__file__),
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


async def _run_judge(
    judge: _Judge,
    fn: UserFunction,
    examples: list[Example],
    repeat: int,
    timeout: float,
    on_result: Callable[[str, Result], None] | None,
    evaluator_options: dict[str, Any],
) -> None:
    """``repeat`` passes of one judge over the examples; a judge whose model client cannot
    start (a key not set, a bad URL) keeps its row, with the reason."""
    from .._models import Models
    from .._pipeline import Evaluator

    order = {ex.id: i for i, ex in enumerate(examples)}
    runs: list[list[Result]] = [[] for _ in range(repeat)]
    ev = Evaluator(
        metric=fn, timeout=timeout, models=Models(metric=judge.config), **evaluator_options
    )
    try:
        await ev.__aenter__()
    except Exception as exc:  # one judge's trouble, not the comparison's
        judge.failure = f"could not start: {exc}"
        return

    async def one_pass(run: list[Result]) -> None:
        async for result in ev.stream(None, examples):
            run.append(result)
            if on_result is not None:
                on_result(judge.label, result)
        run.sort(key=lambda r: order[r.example_id])

    async with contextlib.aclosing(ev):
        async with anyio.create_task_group() as tg:
            for run in runs:
                tg.start_soon(one_pass, run)
        workers = getattr(ev.statistics().metric, "workers", None)
    judge.runs = runs
    cap = judge.config.max_concurrency
    judge.concurrency = min(cap, workers) if isinstance(workers, int) else cap


def _row(judge: _Judge, examples: int, repeat: int) -> JudgeRow:
    if judge.failure is not None:
        row = JudgeRow(
            label=judge.label,
            model=judge.config.model,
            examples=examples,
            repeats=repeat,
            scored=0,
            errors=examples * repeat,
            error_kinds={"not_started": examples * repeat},
            cost_note="no model call completed",
            failure=judge.failure,
        )
    else:
        row = usage_row(judge.label, judge.config.model, judge.runs)
        row.concurrency = judge.concurrency
    row.base_url = judge.config.base_url
    if judge.spec is not None:
        row.provider = judge.spec.provider
        row.simulated = judge.spec.simulated
    return row


def _label(example: Example, column: str) -> float | None:
    for source in (example.expected or {}, example.input):
        if column in source:
            return verdict_of(source[column])
    return None


def _call(result: Result) -> JudgeCall:
    if result.error is not None:
        return JudgeCall(error=f"{result.error.kind}: {result.error.message}")
    return JudgeCall(score=result.score, feedback=result.feedback)


def _cases(
    examples: list[Example],
    judges: list[_Judge],
    verdicts: dict[str, list[float | None]],
    reference: list[float | None] | None,
) -> list[JudgeCase]:
    cases = []
    for i, ex in enumerate(examples):
        calls = {j.label: [_call(run[i]) for run in j.runs] for j in judges if j.runs}
        ref = reference[i] if reference is not None else None
        mine = {label: v[i] for label, v in verdicts.items()}
        cases.append(
            JudgeCase(
                id=ex.id,
                input=ex.input,
                output=ex.output,
                reference=ref,
                verdicts=mine,
                calls=calls,
                disagree=[k for k, v in mine.items() if None not in (v, ref) and v != ref],
                flips=[
                    k for k, c in calls.items() if len({x.score for x in c if x.error is None}) > 1
                ],
            )
        )
    return cases


async def compare_judges(
    metric: str | Path | UserFunction,
    examples: Iterable[Any],
    models: Sequence[ModelConfig | JudgeSpec],
    *,
    reference_model: str | None = None,
    labels: str | None = None,
    program: Any = None,
    artifact: Any = None,
    timeout: float = 60.0,
    repeat: int = 1,
    project: int | None = None,
    on_result: Callable[[str, Result], None] | None = None,
    **evaluator_options: Any,
) -> JudgesReport:
    """Score ``examples`` with the judge ``metric`` once per model (``repeat`` times each),
    all models at once, and compare them.

    ``models``: ``ModelConfig`` s (each labelled by its model name) or :class:`JudgeSpec` s
    (by their label). Agreement is measured against ``reference_model`` (a label) or the
    ``labels`` column, using each judge's majority verdict over its repeats.
    ``project`` adds each judge's projected cost and time for that many examples.
    ``on_result(label, result)`` sees every result as it arrives (``repeat`` per example).
    """
    if reference_model is not None and labels is not None:
        raise ConfigError("give a reference model or a labels column, not both")
    _count(repeat, "repeat", MAX_REPEAT)
    if project is not None:
        _count(project, "project", None)
    judges = _judges(models)
    names = [j.label for j in judges]
    if reference_model is not None and reference_model not in names:
        raise ConfigError(
            f"is {reference_model!r}, which is not among the judges {names}",
            option="reference_model",
        )
    fn = metric if isinstance(metric, UserFunction) else load_metric(metric)
    rows_in = list(examples_from_rows(examples))
    if program is not None:
        rows_in = await _outputs(rows_in, program, artifact, evaluator_options)
    async with anyio.create_task_group() as tg:
        for judge in judges:
            tg.start_soon(
                _run_judge, judge, fn, rows_in, repeat, timeout, on_result, evaluator_options
            )
    return _report(judges, rows_in, repeat, reference_model, labels, project)


def _report(
    judges: list[_Judge],
    examples: list[Example],
    repeat: int,
    reference_model: str | None,
    labels: str | None,
    project_examples: int | None,
) -> JudgesReport:
    rows = [_row(j, len(examples), repeat) for j in judges]
    scores = {j.label: scores_by_example(j.runs) if j.runs else [] for j in judges}
    observed = [s for per in scores.values() for row in per for s in row if s is not None]
    reference: list[float | None] | None = None
    ref_name: str | None = None
    if labels is not None:
        ref_name = f"labels:{labels}"
        reference = [_label(ex, labels) for ex in examples]
        observed += [v for v in reference if v is not None]
    binary = all(v in (0.0, 1.0) for v in observed)
    verdicts: dict[str, list[float | None]] = {}
    for row, judge in zip(rows, judges, strict=True):
        if not judge.runs:
            continue
        verdicts[judge.label], ties = consensus(scores[judge.label], binary)
        if repeat > 1:
            row.self_agreement = self_agreement(scores[judge.label], binary, ties)
    if reference_model is not None:
        ref_name = f"model:{reference_model}"
        reference = verdicts.get(reference_model, [None] * len(examples))
    if reference is not None:
        for row in rows:
            if row.label in verdicts:
                disagreement(row, verdicts[row.label], reference, binary)
    for row, on_front in zip(
        rows, pareto_front([(r.cost_per_1k_usd, r.agreement) for r in rows]), strict=True
    ):
        row.pareto = on_front
    if project_examples is not None:
        for row, judge in zip(rows, judges, strict=True):
            cfg = judge.config
            row.projection = _project(
                row, project_examples, rpm=cfg.rpm, tpm=cfg.tpm, rate_margin=cfg.rate_margin
            )
    return JudgesReport(
        reference=ref_name,
        kind="verdicts" if binary else "scores",
        examples=len(examples),
        rows=rows,
        repeats=repeat,
        project=project_examples,
        cases=_cases(examples, judges, verdicts, reference),
    )
