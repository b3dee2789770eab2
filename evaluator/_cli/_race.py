"""``skynet-eval race``: which of several artifacts is best, at what confidence, for how
much (the race: ``evaluator/_race.py``).

Its flags are ``run``'s where they mean the same (the engine's, the models', the
dataset's: the same option groups), plus the candidates (``--artifact`` /
``--artifact-text``, repeated) and the race's own. Cheap to import (``--help`` imports
it): the engine loads only in :func:`execute`.

Exit 0 when the race ended (a winner, a tie, or the standing when ``--max-evaluations``
or the budget, ``--max-cost``/``--max-calls``/``--max-time``, ran out); 1 when
``--output`` or ``--report`` could not be written.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from evaluator._exceptions import ConfigError
from evaluator._options import validate_timeout

from ._options import (
    DataOptions,
    RunOptions,
    ServingOptions,
    _add_budget_arguments,
    _add_data_arguments,
    _add_model_arguments,
    _artifact,
    _budget,
    _file,
    _positive,
    _program_timeout,
    _same_file,
    engine_fields,
)

if TYPE_CHECKING:
    from evaluator import Budget
    from evaluator._race import RaceResult

__all__ = ["RaceOptions", "execute"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RaceOptions:
    """``skynet-eval race --artifact A --artifact B ... --data D --metric M --program P``."""

    HELP: ClassVar[str] = "race artifacts on the same examples; stop each once it cannot win"
    DESCRIPTION: ClassVar[str] = (
        "Evaluate every candidate artifact on the same examples in rounds, and stop "
        "evaluating a candidate once another is better at --confidence. Prints the "
        "ranking, each candidate's mean and interval, when each was dropped and why, and "
        "what the race spent against evaluating everything."
    )

    metric: str
    program: str
    data: DataOptions
    candidates: tuple[Any, ...]
    labels: tuple[str, ...]
    confidence: float = 0.95
    ties: str = "report"
    score_range: tuple[float, float] = (0.0, 1.0)
    max_evaluations: int | None = None
    seed: int = 0
    output: str | None = None
    report: str | None = None
    timeout: float = 60.0
    program_timeout: float | None = None
    workers: int | None = None
    concurrency: int | None = None
    execution: str | None = None
    program_execution: str | None = None
    ray_address: str | None = None
    serving: ServingOptions = field(default_factory=ServingOptions)
    json: bool = False
    cache: str | None = None
    cache_key_files: tuple[str, ...] = ()
    budget: Budget | None = None
    """--max-cost/--max-calls/--max-time: the race's budget (``Evaluator.race(budget=)``)."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--metric", required=True, metavar="FILE", help="metric file (`score`)")
        parser.add_argument(
            "--program", required=True, metavar="FILE", help="program file (`run(artifact, input)`)"
        )
        parser.add_argument(
            "--artifact",
            dest="candidates",
            action="append",
            type=lambda path: ("file", path),
            metavar="FILE",
            help="a candidate artifact (.json is parsed, else text); repeat for each",
        )
        parser.add_argument(
            "--artifact-text",
            dest="candidates",
            action="append",
            type=lambda text: ("text", text),
            metavar="TEXT",
            help="a candidate artifact as text; repeat for each",
        )
        parser.add_argument(
            "--label",
            action="append",
            default=[],
            metavar="NAME",
            help="the candidates' names in the output, in their order (default: the file "
            "names, or 'text N')",
        )
        _add_data_arguments(parser)
        race = parser.add_argument_group("the race")
        race.add_argument(
            "--confidence",
            type=float,
            default=0.95,
            help="the chance the best candidate is not dropped (default 0.95)",
        )
        race.add_argument(
            "--ties",
            default="report",
            metavar="RULE",
            help="when candidates cannot be told apart: 'report' (run until one is left or "
            "the examples end; report the rest as tied) or 'epsilon=E' (also stop once they "
            "are within E of each other); never one picked silently",
        )
        race.add_argument(
            "--score-range",
            default="0,1",
            metavar="LO,HI",
            help="the bounds of every score (default 0,1); the test needs bounded scores",
        )
        race.add_argument(
            "--max-evaluations",
            type=int,
            metavar="N",
            help="stop after N (candidate, example) evaluations and report the standing",
        )
        race.add_argument(
            "--order-seed",
            type=int,
            default=0,
            help="the seed of the order the race takes the examples in (default 0)",
        )
        parser.add_argument("--output", metavar="FILE", help="write the race here (JSON)")
        parser.add_argument(
            "--report",
            metavar="OUT.html",
            help="also write the race's HTML page here (as `skynet-eval report FILE` does)",
        )
        RunOptions._add_engine_arguments(parser)
        _add_budget_arguments(parser.add_argument_group("budget (never overrun)"))
        _add_model_arguments(parser.add_argument_group("models (skynet.llm)"))
        parser.add_argument("--json", action="store_true", help="print the race as JSON")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Self:
        from evaluator._race import parse_ties

        timeout = validate_timeout(args.timeout, "timeout")
        program_timeout = _program_timeout(args)
        _positive(args.workers, "workers")
        _positive(args.concurrency, "concurrency")
        metric = str(_file(args.metric, "--metric"))
        program = str(_file(args.program, "--program"))
        given = args.candidates or []
        if len(given) < 2:
            raise ConfigError(
                f"a race needs at least 2 candidates, got {len(given)}: give --artifact FILE "
                "(or --artifact-text TEXT) once for each"
            )
        candidates = tuple(
            _artifact(value, None) if kind == "file" else value for kind, value in given
        )
        labels = _labels(given, args.label)
        parse_ties(args.ties)
        if not 0 < args.confidence < 1:
            raise ConfigError(
                f"must be between 0 and 1 (0.95 for 95%), got {args.confidence:g}",
                option="confidence",
                value=args.confidence,
            )
        if args.max_evaluations is not None and args.max_evaluations < 1:
            raise ConfigError(
                f"must be positive, got {args.max_evaluations}",
                option="max_evaluations",
                value=args.max_evaluations,
            )
        data = DataOptions.from_args(args)
        inputs = [metric, program, data.path, *(v for k, v in given if k == "file")]
        output = _written(args.output, "output", inputs)
        report = _written(args.report, "report", [*inputs, output])
        return cls(
            metric=metric,
            program=program,
            data=data,
            candidates=candidates,
            labels=labels,
            confidence=args.confidence,
            ties=args.ties,
            score_range=_score_range(args.score_range),
            max_evaluations=args.max_evaluations,
            seed=args.order_seed,
            output=output,
            report=report,
            timeout=timeout,
            program_timeout=program_timeout,
            **engine_fields(args),
            budget=_budget(args),
        )


def _labels(given: list[tuple[str, str]], labels: list[str]) -> tuple[str, ...]:
    if labels and len(labels) != len(given):
        raise ConfigError(
            f"give one --label per candidate ({len(given)}), or none; got {len(labels)}",
            option="label",
        )
    if labels:
        return tuple(labels)
    texts = iter(range(1, len(given) + 1))
    names = [Path(v).name if k == "file" else f"text {next(texts)}" for k, v in given]
    if len(set(names)) < len(names):  # the same file name in two folders: the whole paths
        names = [v if k == "file" else n for (k, v), n in zip(given, names, strict=True)]
    return tuple(names)


def _score_range(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    try:
        bounds = (float(low), float(high))
    except ValueError:
        bounds = (math.nan, math.nan)
    if not (all(map(math.isfinite, bounds)) and bounds[0] < bounds[1]):
        raise ConfigError(
            f"must be LO,HI with LO < HI (e.g. 0,1), got {text!r}",
            option="score_range",
            value=text,
        )
    return bounds


def _written(path: str | None, option: str, inputs: list[str | None]) -> str | None:
    """A file the race writes: one that can be written, and none it reads or writes."""
    if path is None:
        return None
    for used in inputs:
        if used is not None and _same_file(path, used):
            raise ConfigError(
                f"{path} is one of the race's own files and would be overwritten; give "
                "another name",
                option=option,
                value=path,
            )
    from evaluator._outpath import check_output_path

    check_output_path(path, option=option)
    return path


def execute(options: RaceOptions) -> int:
    """The race: 0 when it ended, 1 when a file could not be written."""
    from . import _loop
    from ._output import reserved_stdout, write_json
    from ._serving import Serving

    serving = Serving(options.serving)
    examples = list(options.data.examples())
    with reserved_stdout(options.json) as stream:
        race = _loop.run(lambda: _race(options, serving, examples))
        if options.json:
            write_json(stream, race)
    if not options.json:
        from evaluator._report.html._race import print_race

        from ._output import console

        print_race(race, console())
    return _write(options, race)


async def _race(options: RaceOptions, serving: Any, examples: list[Any]) -> RaceResult:
    from ._run import engine

    async with (
        serving.open() as configs,
        engine(options, serving, configs, len(examples)) as ev,
    ):
        return await ev.race(
            list(options.candidates),
            examples,
            confidence=options.confidence,
            ties=options.ties,
            labels=list(options.labels),
            score_range=options.score_range,
            max_evaluations=options.max_evaluations,
            seed=options.seed,
            budget=options.budget,
        )


def _write(options: RaceOptions, race: RaceResult) -> int:
    from evaluator._race import write_race_file

    from ._output import console

    code = 0
    if options.output is not None:
        try:
            write_race_file(race, options.output)
            if not options.json:
                console().print(f"race: {options.output}", markup=False, soft_wrap=True)
        except OSError as exc:
            print(f"skynet-eval race: error: --output {options.output}: {exc}", file=sys.stderr)
            code = 1
    if options.report is not None:
        from evaluator._report.html._race import write_race_page

        try:
            write_race_page(race, Path(options.report), option="report")
            if not options.json:
                console().print(f"report: {options.report}", markup=False, soft_wrap=True)
        except OSError as exc:
            print(f"skynet-eval race: error: --report {options.report}: {exc}", file=sys.stderr)
            code = 1
    return code
