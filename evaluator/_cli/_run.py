"""``skynet-eval run``: a whole evaluation with a live progress display and a report.

Flow: read the dataset once (every row checked, counted), run the contract check on the
first 3 examples end to end (exit 1 if it fails; its results are the run's own), then
the rest, each result appended to ``--output`` as it arrives. Exit 0 when the run
completed (whatever the examples' errors), 1 when the contract check failed, 130 on
Ctrl-C after printing the report of what was done (the results already written are
kept; ``--resume`` goes on from there).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console

from evaluator import (
    ConfigError,
    ContractError,
    Evaluator,
    Example,
    Models,
    ReportBuilder,
    Result,
    ResultsWriter,
    check_contract,
    read_results,
)

from . import _loop
from ._main import EXIT_FAILED, EXIT_OK
from ._options import RunOptions
from ._output import console, print_report, print_steps, reserved_stdout, write_json
from ._progress import ModelCounts, RunProgress
from ._serving import Serving

if TYPE_CHECKING:
    from llm_client import ModelConfig

__all__ = ["CHECK_EXAMPLES", "execute"]

CHECK_EXAMPLES = 3
INTERRUPTED = "interrupted: the results written so far are kept"


@dataclass(slots=True)
class _Plan:
    """What the run starts from: the dataset's size and first examples, and with
    ``--resume`` the ids already done (their results already in the report)."""

    total: int
    first: list[Example]
    done: set[Any] = field(default_factory=set)
    builder: ReportBuilder = field(default_factory=ReportBuilder)


def execute(options: RunOptions) -> int:
    """The run: 0 completed, 1 the contract check failed; Ctrl-C raises Interrupted."""
    serving = Serving(options.serving)  # a missing key stops us before the dataset is read
    plan = _plan(options)
    try:
        with reserved_stdout(options.json) as stream:
            return _loop.run(lambda: _main(options, serving, plan, stream), note=INTERRUPTED)
    except ContractError as exc:  # the metric or program file cannot be loaded
        print(f"skynet-eval run: contract check failed: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _plan(options: RunOptions) -> _Plan:
    """Read the dataset once (validate every row, count it, keep the first examples),
    and with ``--resume`` read back what is already done."""
    plan = _Plan(total=0, first=[])
    for example in options.data.examples():
        if plan.total < CHECK_EXAMPLES:
            plan.first.append(example)
        plan.total += 1
    if plan.total == 0:
        raise ConfigError(
            f"{options.data.path}: the dataset has no examples",
            option="data",
            value=options.data.path,
        )
    output = Path(options.output) if options.output else None
    if options.resume and output is not None and output.exists():
        for result in read_results(output):
            plan.done.add(result.example_id)
            plan.builder.add(result, resumed=True)
    return plan


def _todo(options: RunOptions, done: set[Any]) -> Iterator[Example]:
    examples = options.data.examples()
    if not done:
        return examples
    return (ex for ex in examples if ex.id not in done)


async def _main(options: RunOptions, serving: Serving, plan: _Plan, stream: TextIO) -> int:
    out = console()
    async with (
        serving.open() as configs,
        Evaluator(
            options.metric,
            options.program,
            timeout=options.timeout,
            program_timeout=options.program_timeout,
            workers=options.workers,
            concurrency=options.concurrency,
            execution=options.execution,
            program_execution=options.program_execution,
            models=_models(configs, serving.simulator_url),
        ) as ev,
    ):
        plan.builder.failure_score = ev.failure_score
        checked: list[Result] = []
        if not await _check(ev, options, plan.first, out, checked):
            out.print("[red]Contract check failed[/red]: the run did not start.")
            return EXIT_FAILED
        plan.builder.restart_clock()
        # The check ran these examples end to end already: keep them rather than pay for
        # their model calls twice (but never twice for an id --resume already has).
        checked = [r for r in checked if r.example_id not in plan.done]
        plan.done.update(r.example_id for r in checked)
        cancelled = await _evaluate(ev, options, plan, checked)
        report = ev.build_report(plan.builder)
        if options.json:
            write_json(stream, report)
        else:
            print_report(report, out, interrupted=cancelled is not None, output=options.output)
    if cancelled is not None:
        raise cancelled  # the report is out: let the stop go on to the loop starter
    return EXIT_OK


def _models(configs: dict[str, ModelConfig], simulator_url: str | None) -> Models | None:
    """The run's models; with --simulator, the simulator serves SDK calls as well."""
    if not configs and simulator_url is None:
        return None
    return Models(
        program=configs.get("program"),
        metric=configs.get("metric"),
        reflection=configs.get("reflection"),
        sdk_base_url=simulator_url,
    )


async def _check(
    ev: Evaluator,
    options: RunOptions,
    first: list[Example],
    out: Console,
    keep: list[Result],
) -> bool:
    """The contract check on the first examples, through ``ev``; prints its steps. Its
    results go to ``keep``: they are the run's own results for those examples."""
    report = await check_contract(
        ev.metric,
        first,
        program=ev.program,
        artifact=options.artifact,
        timeout=ev.timeout,
        evaluator=ev,
        keep=keep,
    )
    if not options.json:
        print_steps(report, out)
    else:
        failed = report.failed
        if failed is not None:
            print(f"contract check failed at {failed.name}: {failed.message}", file=sys.stderr)
    return bool(report.ok)


async def _evaluate(
    ev: Evaluator, options: RunOptions, plan: _Plan, checked: list[Result]
) -> asyncio.CancelledError | None:
    """Every example not done yet, each result written, counted and shown as it comes;
    the cancellation that stopped it early, if one did."""
    writer = ResultsWriter(options.output) if options.output else None
    live = sys.stderr.isatty() and not options.json
    opened: AbstractContextManager[Any] = writer if writer is not None else nullcontext()
    with opened, RunProgress(plan.total, len(plan.done) - len(checked), live=live) as progress:
        if checked:
            _handle(checked, writer, plan.builder, progress, ev)
        stream = ev.stream(options.artifact, _todo(options, plan.done))
        try:
            async with stream:
                # Results arrive in chunks: write, count and display each at once.
                async for batch in stream.batches():
                    _handle(batch, writer, plan.builder, progress, ev)
        except asyncio.CancelledError as exc:
            # Ctrl-C (the loop starter cancelled this task): what was written stays in
            # --output for --resume; the caller reports it, then lets the stop go on.
            return exc
    return None


def _handle(
    batch: Sequence[Result],
    writer: ResultsWriter | None,
    builder: ReportBuilder,
    progress: RunProgress,
    ev: Evaluator,
) -> None:
    if writer is not None:
        writer.write(batch)
    builder.add_many(batch)
    models = ev.statistics().models
    cost = (
        None
        if models.program_cost_usd is None or models.judge_cost_usd is None
        else models.program_cost_usd + models.judge_cost_usd
    )
    progress.advance(
        batch,
        ModelCounts(
            calls=models.program_calls + models.judge_calls,
            rate_limited=models.rate_limited,
            cost=cost,
        ),
    )
