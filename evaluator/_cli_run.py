"""``skynet-eval run``: a whole evaluation with a live progress display and a report.

Flow: load the files, run the contract check on the first 3 examples end to end (exit 1
if it fails), then the whole dataset, each result appended to ``--output`` as it
arrives. Exit 0 when the run completed (whatever the examples' errors), 2 on a usage
error (a one-line message, never a traceback), 130 on Ctrl-C after printing the report
of what was done (results already written are kept; ``--resume`` goes on from there).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgspec

from ._cli_common import (
    add_dataset_args,
    add_simulator_arg,
    cli_key_error,
    console,
    key_env,
    load_artifact,
    load_simulator_config,
    print_steps,
    reserved_stdout,
    user_errors,
)
from ._dataset import Example, load_examples
from ._exceptions import ConfigError, ContractError
from ._models import Models
from ._report import Report, ReportBuilder, report_rows
from ._results import Result
from ._store import ResultsWriter, read_results

__all__ = ["add_parser", "run_command"]

CHECK_EXAMPLES = 3
_PLAIN_EVERY_S = 2.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="evaluate a program (or a dataset's outputs) with a metric",
        description=(
            "Run the program on every example, score each output with the metric, and "
            "print a report. Without --program the run is score-only: each example's "
            "'output' field is scored."
        ),
    )
    parser.add_argument("--metric", required=True, metavar="FILE", help="metric file (`score`)")
    parser.add_argument("--program", metavar="FILE", help="program file (`run(artifact, input)`)")
    artifact = parser.add_mutually_exclusive_group()
    artifact.add_argument(
        "--artifact", metavar="FILE", help="the candidate artifact: .json is parsed, else text"
    )
    artifact.add_argument("--artifact-text", metavar="TEXT", help="the artifact as text")
    add_dataset_args(parser)
    parser.add_argument("--output", metavar="FILE", help="append results here (JSON Lines)")
    parser.add_argument(
        "--resume", action="store_true", help="skip the examples already in --output"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="metric timeout, s (default 60, max 600)"
    )
    parser.add_argument("--program-timeout", type=float, help="program timeout, s (default 600)")
    parser.add_argument("--workers", type=int, help="worker threads or processes")
    parser.add_argument("--concurrency", type=int, help="examples in flight at most")
    parser.add_argument(
        "--execution",
        choices=("process", "thread", "async", "inline"),
        help="where the metric runs (default: the file's EXECUTION, else by its kind)",
    )
    parser.add_argument(
        "--program-execution",
        choices=("process", "thread", "async", "inline"),
        help="where the program runs",
    )
    models = parser.add_argument_group("models (skynet.llm)")
    models.add_argument("--model", help="the program model")
    models.add_argument("--metric-model", help="the metric (judge) model")
    models.add_argument("--reflection-model", help="the reflection model")
    models.add_argument("--base-url", help="OpenAI-compatible base URL of --model")
    models.add_argument("--metric-base-url", help="base URL of --metric-model")
    models.add_argument("--reflection-base-url", help="base URL of --reflection-model")
    models.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="VAR",
        help="environment variable holding the API key (default OPENAI_API_KEY); "
        "'none' for a server without keys",
    )
    models.add_argument("--rpm", type=float, help="requests per minute per model")
    models.add_argument("--tpm", type=float, help="tokens per minute per model")
    models.add_argument("--price-input", type=float, help="USD per 1M input tokens (override)")
    models.add_argument("--price-output", type=float, help="USD per 1M output tokens (override)")
    add_simulator_arg(models)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=user_errors(run_command))


# -- configuration --------------------------------------------------------------------


def _check_positive(value: float | int | None, flag: str) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{flag} must be positive, got {value:g}")


def build_models(args: argparse.Namespace) -> Models | None:
    """The models from the flags; each base URL defaults to that of its fallback."""
    from llm_client import ModelConfig

    if not (args.model or args.metric_model or args.reflection_model):
        for flag in ("base_url", "metric_base_url", "reflection_base_url", "rpm", "tpm"):
            if getattr(args, flag) is not None:
                name = "--" + flag.replace("_", "-")
                raise ConfigError(
                    f"{name} needs a model: add --model, --metric-model or --reflection-model"
                )
        return None
    api_key_env = key_env(args.api_key_env)
    if args.simulator:
        api_key_env = None  # the simulator takes no key; base URLs are set once it listens
    program_url = args.base_url
    reflection_url = args.reflection_base_url or program_url
    metric_url = args.metric_base_url or reflection_url

    def config(model: str | None, url: str | None) -> ModelConfig | None:
        if model is None:
            return None
        options: dict[str, Any] = {"model": model, "api_key_env": api_key_env}
        if url is not None:
            options["base_url"] = url
        for name in ("rpm", "tpm", "price_input", "price_output"):
            value = getattr(args, name)
            if value is not None:
                options[name] = value
        return ModelConfig(**options)

    return Models(
        program=config(args.model, program_url),
        metric=config(args.metric_model, metric_url),
        reflection=config(args.reflection_model, reflection_url),
    )


# -- progress ---------------------------------------------------------------------------


class _Progress:
    """A rich progress bar on a terminal; plain periodic lines otherwise."""

    def __init__(self, total: int, done: int, *, live: bool) -> None:
        self.total = total
        self.done = done
        self.live = live
        self.errors = 0
        self.started = time.perf_counter()
        self.new = 0
        self._last_line = self.started
        self._bar: Any = None
        self._task: Any = None
        self.stats: dict[str, Any] = {}

    def __enter__(self) -> _Progress:
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]evaluating"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                console=console(stderr=True),
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("run", total=self.total, completed=self.done, info="")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._bar is not None:
            self._bar.refresh()
            self._bar.__exit__(*exc_info)
        elif self.new:
            self._line()

    def _info(self) -> str:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        parts = [f"{self.new / elapsed:,.0f} ex/s", f"{self.errors:,} errors"]
        calls = self.stats.get("calls", 0)
        if calls:
            parts.append(f"{calls:,} model calls")
            parts.append(f"{self.stats.get('rate_limited', 0):,} 429s")
            cost = self.stats.get("cost")
            parts.append("cost ?" if cost is None else f"${cost:.4f}")
        return "  ".join(parts)

    def _line(self) -> None:
        elapsed = time.perf_counter() - self.started
        rate = self.new / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = f"{left / rate:,.0f}s" if rate > 0 else "?"
        print(
            f"{self.done:,}/{self.total:,} done  {self._info()}  ETA {eta}",
            file=sys.stderr,
            flush=True,
        )

    def advance(self, results: list[Result], stats: dict[str, Any]) -> None:
        self.done += len(results)
        self.new += len(results)
        self.errors += sum(1 for r in results if r.error is not None)
        self.stats = stats
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, info=self._info())
            return
        now = time.perf_counter()
        if now - self._last_line >= _PLAIN_EVERY_S:
            self._last_line = now
            self._line()


# -- the run ----------------------------------------------------------------------------


def _count(args: argparse.Namespace) -> tuple[int, list[Example]]:
    """Read the dataset once: validate every row, count it, keep the first examples."""
    total = 0
    first: list[Example] = []
    for example in load_examples(
        args.data, input_cols=args.input_cols, output_cols=args.output_cols
    ):
        if total < CHECK_EXAMPLES:
            first.append(example)
        total += 1
    return total, first


def _todo(args: argparse.Namespace, done: set[Any]) -> Iterator[Example]:
    examples = load_examples(args.data, input_cols=args.input_cols, output_cols=args.output_cols)
    if not done:
        return examples
    return (ex for ex in examples if ex.id not in done)


async def _check(
    ev: Any,
    args: argparse.Namespace,
    artifact: Any,
    first: list[Example],
    out: Any,
    keep: list[Result],
) -> bool:
    """The contract check on the first examples, through ``ev``; prints its steps. Its
    results go to ``keep``: they are the run's own results for those examples."""
    from ._check import check_contract

    report = await check_contract(
        ev.metric,
        first,
        program=ev.program,
        artifact=artifact,
        timeout=ev.timeout,
        evaluator=ev,
        keep=keep,
    )
    if not args.json:
        print_steps(report, out)
    else:
        failed = report.failed
        if failed is not None:
            print(f"contract check failed at {failed.name}: {failed.message}", file=sys.stderr)
    return bool(report.ok)


def _print_report(report: Report, args: argparse.Namespace, out: Any, *, interrupted: bool) -> None:
    if args.json:
        stream = getattr(args, "json_stream", None) or sys.stdout
        stream.write(msgspec.json.encode(report).decode() + "\n")
        stream.flush()
        return
    from rich.table import Table

    title = "Report (interrupted: partial)" if interrupted else "Report"
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for label, value in report_rows(report):
        table.add_row(label, value)
    out.print(table)
    if args.output:
        out.print(f"results: {args.output}", markup=False)


def _prepare(args: argparse.Namespace) -> tuple[int, list[Example], set[Any], ReportBuilder]:
    """Count the dataset, and with --resume read back what is already done."""
    total, first = _count(args)
    if total == 0:
        raise ConfigError(f"--data {args.data}: the dataset has no examples")
    builder = ReportBuilder()
    done: set[Any] = set()
    output = Path(args.output) if args.output else None
    if output is not None and output.exists() and output.stat().st_size:
        if not args.resume:
            raise ConfigError(
                f"--output {args.output} already holds results: pass --resume to go on "
                "from them, or choose another file"
            )
        for result in read_results(output):
            done.add(result.example_id)
            builder.add(result, resumed=True)
    return total, first, done, builder


async def _main(
    args: argparse.Namespace,
    artifact: Any,
    models: Models | None,
    prepared: tuple[int, list[Example], set[Any], ReportBuilder],
) -> int:

    out = console()
    total, first, done, builder = prepared
    async with AsyncExitStack() as stack:
        if args.simulator_config is not None and models is not None:
            from llm_client import Simulator

            sim = await stack.enter_async_context(Simulator(args.simulator_config))
            models = _served_by(models, sim.base_url)
        return await _evaluate(args, artifact, models, out, total, first, done, builder)


def _served_by(models: Models, base_url: str) -> Models:
    """Every configured model, pointed at the simulator."""

    def move(config: Any) -> Any:
        return None if config is None else msgspec.structs.replace(config, base_url=base_url)

    return Models(
        program=move(models.program), metric=move(models.metric), reflection=move(models.reflection)
    )


async def _evaluate(
    args: argparse.Namespace,
    artifact: Any,
    models: Models | None,
    out: Any,
    total: int,
    first: list[Example],
    done: set[Any],
    builder: ReportBuilder,
) -> int:
    from ._pipeline import Evaluator

    async with Evaluator(
        args.metric,
        args.program,
        timeout=args.timeout,
        program_timeout=args.program_timeout,
        workers=args.workers,
        concurrency=args.concurrency,
        execution=args.execution,
        program_execution=args.program_execution,
        models=models,
    ) as ev:
        builder.failure_score = ev.failure_score
        checked: list[Result] = []
        if not await _check(ev, args, artifact, first, out, checked):
            out.print("[red]Contract check failed[/red]: the run did not start.")
            return 1
        builder.restart_clock()
        # The check ran these examples end to end already: keep them rather than pay for
        # their model calls twice (but never twice for an id --resume already has).
        checked = [r for r in checked if r.example_id not in done]
        done.update(r.example_id for r in checked)
        writer = ResultsWriter(args.output) if args.output else None
        live = sys.stderr.isatty() and not args.json
        interrupted = False
        with (
            writer if writer is not None else _nothing(),
            _Progress(total, len(done) - len(checked), live=live) as progress,
        ):
            if checked:
                _handle(checked, writer, builder, progress, ev)
            stream = ev.stream(artifact, _todo(args, done))
            try:
                async with stream:
                    # Results arrive in chunks: write, count and display each at once.
                    async for batch in stream.batches():
                        _handle(batch, writer, builder, progress, ev)
            except asyncio.CancelledError:
                # Ctrl-C: asyncio.Runner cancelled this task. Report what was done; the
                # results already written stay in --output for --resume.
                interrupted = True
        report = builder.build(abandoned_threads=ev.statistics().abandoned_threads)
        _print_report(report, args, out, interrupted=interrupted)
    if interrupted:
        print("interrupted: the results written so far are kept", file=sys.stderr)
        return 130
    return 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


def _handle(
    batch: list[Result],
    writer: ResultsWriter | None,
    builder: ReportBuilder,
    progress: _Progress,
    ev: Any,
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
        {
            "calls": models.program_calls + models.judge_calls,
            "rate_limited": models.rate_limited,
            "cost": cost,
        },
    )


def run_command(args: argparse.Namespace) -> int:
    from llm_client import ModelConfigError

    from ._options import validate_timeout

    try:
        validate_timeout(args.timeout, "--timeout")
        if args.program_timeout is not None:
            validate_timeout(args.program_timeout, "--program-timeout", upper=None)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("`", "")) from None
    _check_positive(args.workers, "--workers")
    _check_positive(args.concurrency, "--concurrency")
    if args.resume and not args.output:
        raise ConfigError("--resume needs --output FILE (the results to go on from)")
    for flag, path in (("--metric", args.metric), ("--program", args.program)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{flag}: no such file {path!r}")
    if args.program is None and (args.artifact or args.artifact_text):
        raise ConfigError("--artifact is used by a program: add --program FILE")
    artifact = load_artifact(args.artifact, getattr(args, "artifact_text", None))
    try:
        models = build_models(args)
        for config in (models.program, models.metric, models.reflection) if models else ():
            if config is not None:
                config.api_key()  # a missing key is a usage error now, not a failed run later
        args.simulator_config = load_simulator_config(args.simulator) if args.simulator else None
        if args.simulator and models is None:
            raise ConfigError(
                "--simulator serves models: add --model, --metric-model or --reflection-model"
            )
    except ModelConfigError as exc:
        raise cli_key_error(exc) from None
    prepared = _prepare(args)
    try:
        with reserved_stdout(args.json) as stream:
            args.json_stream = stream
            return _run(_main(args, artifact, models, prepared))
    except ContractError as exc:
        print(f"skynet-eval run: contract check failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the results written so far are kept", file=sys.stderr)
        return 130


def _run(coro: Any) -> int:
    """Run on uvloop when it is installed (faster I/O), else the default loop."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return int(runner.run(coro))
