"""``skynet-eval run``: a whole evaluation with a live progress display and a report.

Flow: ``--output`` is checked with the flags (``check_output_path``: a path that cannot
be written fails in a second, not after the contract check). Then the dataset is read
once (every row checked, counted, its bytes hashed for the fingerprint, the examples kept
for the run) and the results file opened
(``open_results``): its lock is held until the run ends, so a second run writing the same
file is refused; a new file gets a header with the run's fingerprints; ``--resume``
refuses a file whose results were made with other files unless ``--force``, counts each
of the dataset's ids once (foreign ids and duplicates never), and repairs only a torn last
line. Then the contract check on the first 3 examples end to end (exit 1 if it fails; its
results are the run's own; skipped, and said so, on a resume whose header says every file
is unchanged: those files passed it), then the rest, each result appended to
``--output`` as it arrives.

Exit 0 when the run completed (whatever the examples' errors); 1 when the contract check
failed, when the run has fewer results than examples (``check_result_count``), or when
the results file (or the ``--report`` page) could not be written, after
the report of what was written and how to resume; 130 on Ctrl-C and 143 on SIGTERM, after
printing the report of what was done (the results already written are kept;
``--resume`` goes on from there).
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from evaluator import (
    Budget,
    ConfigError,
    ContractError,
    EvaluationError,
    Evaluator,
    Example,
    Report,
    ReportBuilder,
    Result,
    ResultsWriteError,
    ResultsWriter,
    check_contract,
    open_results,
)
from evaluator._cache import depends_on_measurements
from evaluator._executors._base import fit_workers
from evaluator._fingerprint import RunEnd, fingerprint_run
from evaluator._pipeline._assembly import check_result_count

from . import _loop
from ._main import EXIT_FAILED, EXIT_OK
from ._options import RunOptions
from ._output import console, print_report, print_steps, reserved_stdout, write_json
from ._progress import ModelCounts, RunProgress
from ._serving import Serving

__all__ = ["CHECK_EXAMPLES", "engine", "execute"]

CHECK_EXAMPLES = 3
INTERRUPTED = "interrupted"
#: How many of the values stored in a changed form the warning quotes.
SHOWN_CHANGES = 3


@dataclass(slots=True)
class _Plan:
    """What the run starts from: the dataset's size, ids and first examples, and with
    ``--resume`` the ids already done (their results already in the report).
    ``kept`` collects the run's results when ``--report`` needs them and no file does."""

    total: int
    first: list[Example]
    #: Every example the run takes, from the one read of the dataset.
    examples: list[Example] = field(default_factory=list)
    #: The SHA-256 of the dataset file's bytes, hashed in that read.
    sha256: str = ""
    ids: list[Any] = field(default_factory=list)
    done: set[Any] = field(default_factory=set)
    #: ``--repeat K``: the passes over the examples, and the ids each later pass (1 to
    #: K-1) has done already (``done`` is the first pass's).
    repeat: int = 1
    done_repeats: dict[int, set[Any]] = field(default_factory=dict)
    builder: ReportBuilder = field(default_factory=ReportBuilder)
    kept: list[Result] | None = None
    #: Why the contract check need not run again (a resume whose header says every
    #: file is unchanged), or None.
    checked_before: str | None = None


@dataclass(slots=True)
class _Ending:
    """How the stream of results ended early, if it did: stopped by a signal
    (``cancelled``) or by the results file (``write_error``)."""

    cancelled: asyncio.CancelledError | None = None
    write_error: ResultsWriteError | None = None


def execute(options: RunOptions) -> int:
    """The run: 0 completed, 1 the contract check failed or a file could not be written;
    a stop signal raises Interrupted."""
    _warn_all(options.output_notes)
    serving = Serving(options.serving)  # a missing key stops us before the dataset is read
    plan = _plan(options)
    with _results_file(options, plan) as writer:
        try:
            with reserved_stdout(options.json) as stream:
                return _loop.run(
                    lambda: _main(options, serving, plan, writer, stream), note=INTERRUPTED
                )
        except ContractError as exc:  # the metric or program file cannot be loaded
            print(f"skynet-eval run: contract check failed: {exc}", file=sys.stderr)
            return EXIT_FAILED


def _warn(message: str) -> None:
    print(f"skynet-eval run: warning: {message}", file=sys.stderr)


def _warn_all(messages: Iterable[str]) -> None:
    for message in messages:
        _warn(message)


def _plan(options: RunOptions) -> _Plan:
    """Read the dataset once: validate every row, hash the file's bytes, keep the
    examples (the run takes them from memory: no second read, no second parse)."""
    read = options.data.read()
    examples = read.examples
    plan = _Plan(
        total=len(examples),
        first=examples[:CHECK_EXAMPLES],
        examples=examples,
        sha256=read.sha256,
        ids=[example.id for example in examples],
        repeat=options.repeat,
        builder=ReportBuilder(repeats=options.repeat),
    )
    if plan.total == 0:
        raise ConfigError(
            f"{options.data.path}: the dataset has no examples",
            option="data",
            value=options.data.path,
        )
    if options.report is not None and options.output is None:
        plan.kept = []
    _warn_unused_output_cols(options)
    return plan


def _warn_unused_output_cols(options: RunOptions) -> None:
    """``--output-cols`` on canonical rows (no ``--input-cols``) only wraps a non-object
    ``expected`` into ``{NAME: value}``: when no row of the file has one, it did nothing.
    The file's rows are read again for this, only when the flags are given so."""
    data = options.data
    if not data.output_cols or data.input_cols:
        return
    from evaluator._data._dataset import _READERS

    reader = _READERS.get(Path(data.path).suffix.lower())
    if reader is None:
        return
    for _, row in reader(Path(data.path), None):
        expected = row.get("expected") if isinstance(row, dict) else None
        if len(data.output_cols) == 1 and expected is not None and not isinstance(expected, dict):
            return  # wrapped: it did something
    _warn(
        f"--output-cols {' '.join(data.output_cols)} did nothing: without --input-cols the "
        "rows are canonical, and their expected values are their 'expected' objects; "
        "--output-cols names the expected columns of flat rows (with --input-cols), or "
        "with one name wraps a canonical row's non-object 'expected'"
    )


@contextmanager
def _results_file(options: RunOptions, plan: _Plan) -> Iterator[ResultsWriter | None]:
    """``--output`` opened for the whole run (its lock held), with ``--resume`` what it
    already holds counted into ``plan``; None without ``--output``.

    The refusals (another run holds the file, it is not a results file, its results were
    made with other files) are ConfigErrors: one line, exit 2, the file unchanged.
    """
    if options.output is None:
        yield None
        return
    path = Path(options.output)
    created = not path.exists()
    prints = fingerprint_run(
        dataset=options.data.path,
        metric=options.metric,
        program=options.program,
        artifact=options.artifact,
        artifact_path=options.artifact_path,
        input_cols=options.data.input_cols,
        output_cols=options.data.output_cols,
        selection=options.data.selection,
        id_col=options.data.id_col,
        dataset_sha256=plan.sha256,
    )
    writer, resumed = open_results(
        path,
        fingerprints=prints,
        resume=options.resume,
        force=options.force,
        dataset_ids=plan.ids,
        on_result=partial(plan.builder.add, resumed=True),
        repeat=options.repeat,
    )
    with writer:
        _warn_all(resumed.notes)
        plan.done = resumed.done_ids
        plan.done_repeats = resumed.done_repeats
        passes = 1 + max(resumed.done_repeats, default=0)
        if passes > options.repeat:
            _warn(
                f"{path} holds results of {passes} repeats and this run has --repeat "
                f"{options.repeat}: the extra repeats' results stay in the file and are "
                f"counted in the report; give --repeat {passes} to resume them all"
            )
        if resumed.results and not resumed.legacy and not resumed.forced:
            plan.checked_before = (
                f"contract check skipped: {path}'s header says the metric, program, "
                f"artifact and dataset are the ones its {resumed.results:,} result(s) "
                "were made with, and they passed it then"
            )
        try:
            yield writer
        finally:
            if created and writer.written == 0:
                # Nothing was written (the contract check failed, say): leave no empty
                # file behind. Removed while the lock is still held.
                path.unlink(missing_ok=True)


async def _main(
    options: RunOptions,
    serving: Serving,
    plan: _Plan,
    writer: ResultsWriter | None,
    stream: TextIO,
) -> int:
    out = console()
    async with (
        serving.open() as configs,
        engine(options, serving, configs, plan.total, options.budget) as ev,
    ):
        plan.builder.failure_score = ev.failure_score
        _cache_note(ev)
        checked: list[Result] = []
        if plan.checked_before is not None:
            _say(plan.checked_before, out, options.json)
        elif not await _check(ev, options, plan.first, out, checked):
            out.print("[red]Contract check failed[/red]: the run did not start.")
            return EXIT_FAILED
        plan.builder.restart_clock()
        if options.program is None and depends_on_measurements(ev.metric):
            _say(
                "note: a score-only run (no --program) measures no program time or cost, "
                "which this metric reads (reward(), observation() or a REWARD_SPEC): "
                "reward() scores speed and cost 0 and says they were not measured; give "
                "--program to measure them",
                out,
                options.json,
            )
        # The check ran these examples end to end already: keep them rather than pay for
        # their model calls twice (but never twice for an id --resume already has).
        checked = [r for r in checked if r.example_id not in plan.done]
        plan.done.update(r.example_id for r in checked)
        with _frozen_heap():
            ending = await _evaluate(ev, options, plan, writer, checked)
        interrupted = ending.cancelled is not None
        report = ev.build_report(plan.builder)
        if writer is not None and not writer.finish(
            RunEnd(
                wall_s=report.wall_s,
                examples=report.n - report.resumed,
                throughput=report.throughput,
                interrupted=interrupted,
            )
        ):
            _warn(f"{writer.path}: the run's wall time could not be recorded (the results stand)")
        if options.json:
            write_json(stream, report)
            if options.output_defaulted:  # the user did not name it: say where it is
                print(f"skynet-eval run: results: {options.output}", file=sys.stderr)
        else:
            print_report(report, out, interrupted=interrupted, output=options.output)
        if writer is not None:
            _warn_changes(writer)
        page_ok = await _html_report(options, plan, report, out, interrupted=interrupted)
    if ending.write_error is not None:
        print(f"skynet-eval run: error: {ending.write_error}", file=sys.stderr)
    if ending.cancelled is not None:
        _say_what_was_kept(options, plan, report.n)
        raise ending.cancelled  # the reports are out: let the stop go on to the loop starter
    incomplete = check_result_count(plan.total * plan.repeat, report.n)
    if ending.write_error is None and incomplete is not None:
        # Never exit 0 for a run with fewer results than examples.
        print(f"skynet-eval run: error: {incomplete}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if ending.write_error is None and page_ok else EXIT_FAILED


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """The objects alive when the stream starts (the dataset's examples, the engine's
    modules) kept out of the cyclic garbage collector's scans until it ends: they live
    for the whole run, and each full collection walked them all (0.2 s of a 100,000-row
    inline run). What the run makes after is collected as usual; ``unfreeze`` gives the
    rest back to the collector (``main`` may be called again in one process)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def engine(
    options: Any, serving: Serving, configs: Any, total: int, budget: Budget | None = None
) -> Evaluator:
    """The (unopened) Evaluator of a command's engine flags: ``run``'s and ``race``'s
    options structs share these fields. ``budget``: the Evaluator's (``run``'s
    --max-cost/--max-calls/--max-time; ``race`` gives its budget to the race)."""
    return Evaluator(
        options.metric,
        options.program,
        timeout=options.timeout,
        program_timeout=options.program_timeout,
        workers=fit_workers(options.workers, total),
        concurrency=options.concurrency,
        execution=options.execution,
        program_execution=options.program_execution,
        ray_address=options.ray_address,
        models=serving.models(configs),
        cache=options.cache,
        cache_key_files=options.cache_key_files,
        budget=budget,
    )


def _cache_note(ev: Evaluator) -> None:
    """With a cache: what its key holds beside the metric and program, and what not."""
    files = ev.cache_key_files
    if files is None:
        return
    from evaluator._cache import NOT_KEYED

    held = ", ".join(str(p) for p in files[:8]) + (
        f" and {len(files) - 8:,} more" if len(files) > 8 else ""
    )
    print(
        f"skynet-eval run: note: the cache key holds the metric and program files"
        f"{', and ' + held if files else ''}, the artifact, each example and the model "
        f"settings; not {NOT_KEYED} (add such files with --cache-key-file PATH)",
        file=sys.stderr,
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


def _say_what_was_kept(options: RunOptions, plan: _Plan, kept: int) -> None:
    """After a stop: how many of the examples have results and how to go on, or that
    nothing was kept (never a claim that results were kept when none were written)."""
    if options.output is None or not kept:
        print(
            "skynet-eval run: stopped before any result was written: nothing was kept",
            file=sys.stderr,
        )
        return
    how = "--resume" if not options.output_defaulted else f"--output {options.output} --resume"
    print(
        f"skynet-eval run: stopped: {kept:,} of {plan.total * plan.repeat:,} "
        f"{'examples' if plan.repeat == 1 else 'example repeats'} have results in "
        f"{options.output}; to go on, run the same command with {how}",
        file=sys.stderr,
    )


def _say(message: str, out: Console, json: bool) -> None:
    """A line about the run: with the report, or on stderr when stdout is for --json."""
    if json:
        print(f"skynet-eval run: {message}", file=sys.stderr)
    else:
        out.print(message, markup=False, soft_wrap=True)


def _todo(plan: _Plan, repeat: int = 0) -> Iterator[Example]:
    """The examples pass ``repeat`` has still to run (``--repeat``; 0: the first pass)."""
    done = plan.done if not repeat else plan.done_repeats.get(repeat, set())
    if not done:
        return iter(plan.examples)
    head = len(done)
    if head <= len(plan.examples) and all(ex.id in done for ex in plan.examples[:head]):
        # The done ones are the first examples (the contract check's, a run stopped
        # early): the rest as a list slice, not a test per example in Python.
        return iter(plan.examples[head:])
    return (ex for ex in plan.examples if ex.id not in done)


def _done_count(plan: _Plan) -> int:
    return len(plan.done) + sum(len(ids) for r, ids in plan.done_repeats.items() if r < plan.repeat)


async def _evaluate(
    ev: Evaluator,
    options: RunOptions,
    plan: _Plan,
    writer: ResultsWriter | None,
    checked: list[Result],
) -> _Ending:
    """Every example not done yet, each result written, counted and shown as it comes;
    what ended it early, if anything did. With ``--repeat K``, K passes one after the
    other, each one stream (so an id is unique within a pass), its results marked with
    the pass (:attr:`Result.repeat`)."""
    live = sys.stderr.isatty() and not options.json
    total = plan.total * plan.repeat
    with RunProgress(total, _done_count(plan) - len(checked), live=live) as progress:
        try:
            if checked:  # made by the check, before the clock started
                _handle(checked, progress, writer=writer, plan=plan, ev=ev, timed=False)
            for repeat in range(plan.repeat):
                handle = partial(_handle, writer=writer, plan=plan, ev=ev, repeat=repeat)
                todo = _todo(plan, repeat)
                async with ev.stream(options.artifact, todo) as stream:
                    # Results arrive in chunks: write, count and display each at once.
                    async for batch in stream.batches():
                        handle(batch, progress)
        except ResultsWriteError as exc:
            # The disk failed: leaving the stream cancels the rest. The file holds whole
            # lines only; the report says what was written, the error how to resume.
            return _Ending(write_error=exc)
        except asyncio.CancelledError as exc:
            # A stop signal (the loop starter cancelled this task): what was written
            # stays in --output for --resume; the caller reports it, then lets the stop
            # go on.
            return _Ending(cancelled=exc)
    return _Ending()


def _handle(
    batch: Sequence[Result],
    progress: RunProgress,
    *,
    writer: ResultsWriter | None,
    plan: _Plan,
    ev: Evaluator,
    timed: bool = True,
    repeat: int = 0,
) -> None:
    if repeat:
        for result in batch:
            result.repeat = repeat
    # Written first: a result is counted in the report only once it is in the file.
    if writer is not None:
        writer.write(batch)
    plan.builder.add_many(batch, timed=timed)
    if plan.kept is not None:
        plan.kept.extend(batch)
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
        errors=plan.builder.n - plan.builder.ok,
        timed=timed,
    )


def _warn_changes(writer: ResultsWriter) -> None:
    """One warning for every value the results file holds in a changed form."""
    if not writer.changed:
        return
    shown = "; ".join(str(change) for change in writer.changes[:SHOWN_CHANGES])
    more = writer.changed - min(SHOWN_CHANGES, len(writer.changes))
    _warn(
        f"{writer.changed} value(s) could not be stored in {writer.path} as they were "
        f"(JSON cannot hold them) and are stored in a changed form: {shown}"
        f"{f' (and {more} more)' if more > 0 else ''}. Scores are unchanged; return "
        "JSON-compatible values from the program and the metric to keep them exactly"
    )


async def _html_report(
    options: RunOptions, plan: _Plan, report: Report, out: Console, *, interrupted: bool
) -> bool:
    """``--report``: the run's HTML page, built off the loop (100,000 examples take
    seconds). False when it could not be written (said on stderr)."""
    if options.report is None:
        return True
    from evaluator import write_html_report

    source: Any = options.output if options.output is not None else (plan.kept or [])
    build = partial(
        write_html_report,
        source,
        options.report,
        data=options.data.path,
        input_cols=options.data.input_cols,
        output_cols=options.data.output_cols,
        meta={
            "wall_s": report.wall_s,
            "throughput": report.throughput,
            "interrupted": True if interrupted else None,
        },
    )
    try:
        built = await asyncio.to_thread(build)
    except (EvaluationError, OSError) as exc:
        print(f"skynet-eval run: error: --report {options.report}: {exc}", file=sys.stderr)
        return False
    if not options.json:
        out.print(f"report: {built.path}", markup=False, soft_wrap=True)
    return True
