"""``skynet-eval judges``: one judge metric, several models, one table (and a plot)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ._cli_common import (
    add_dataset_args,
    add_simulator_arg,
    console,
    load_artifact,
    load_simulator_config,
    user_errors,
)
from ._dataset import load_examples
from ._exceptions import ConfigError
from ._judges import (
    choose_reference,
    compare_judges,
    judges_from_flags,
    parse_price,
    print_judges,
    serve_judges,
)
from ._options import validate_timeout


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "judges",
        help="compare judge models: cost, latency and agreement",
        description=(
            "Run a judge metric once per model over the same outputs and compare cost, "
            "latency and agreement with a reference model or human labels."
        ),
    )
    parser.add_argument("--metric", required=True, help="the judge metric file (calls skynet.llm)")
    add_dataset_args(parser)
    parser.add_argument("--models", help="comma-separated model names, behind one --base-url")
    parser.add_argument(
        "--models-file",
        metavar="FILE",
        help="models across providers (.toml or .json): name, label, base_url, api_key_env, "
        "prices, rpm/tpm, call options per model",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, metavar="K", help="judge every example K times"
    )
    parser.add_argument(
        "--project", type=int, metavar="N", help="project each model's cost and time for N examples"
    )
    ref = parser.add_mutually_exclusive_group()
    ref.add_argument("--reference", help="agreement against this model (default: the first)")
    ref.add_argument("--labels", metavar="COLUMN", help="agreement against human labels in COLUMN")
    parser.add_argument(
        "--program", help="program file; its outputs are computed once for all judges"
    )
    parser.add_argument(
        "--artifact", help="artifact file for the program (.json parsed, else text)"
    )
    parser.add_argument(
        "--base-url", help="OpenAI-compatible base URL (default: https://api.openai.com/v1)"
    )
    parser.add_argument(
        "--api-key-env",
        help="environment variable holding the API key (default: OPENAI_API_KEY; none: no key)",
    )
    parser.add_argument("--rpm", type=float, help="requests per minute, per model")
    parser.add_argument("--tpm", type=float, help="tokens per minute, per model")
    parser.add_argument(
        "--price",
        type=parse_price,
        action="append",
        default=[],
        metavar="MODEL=IN,OUT",
        help="price override in USD per million input,output tokens (repeatable)",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="metric timeout in seconds")
    add_simulator_arg(parser)
    parser.add_argument("--output", metavar="FILE", help="write the report as JSON")
    parser.add_argument(
        "--plot", metavar="FILE.png", help="draw cost per 1,000 examples against agreement"
    )
    parser.set_defaults(handler=user_errors(run_judges))


def run_judges(args: argparse.Namespace) -> int:
    timeout = validate_timeout(args.timeout, "--timeout")
    for flag in ("metric", "program"):
        value = getattr(args, flag)
        if value is not None and not Path(value).is_file():
            raise ConfigError(f"--{flag} {value!r} does not exist")
    sim_config = load_simulator_config(args.simulator) if args.simulator else None
    specs = judges_from_flags(
        models_file=args.models_file,
        models=args.models,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        rpm=args.rpm,
        tpm=args.tpm,
        price=args.price,
        repeat=args.repeat,
        project=args.project,
        simulator=sim_config,
    )
    reference = choose_reference(specs, args.reference, args.labels)
    labels = [s.label for s in specs]
    examples = list(
        load_examples(args.data, input_cols=args.input_cols, output_cols=args.output_cols)
    )
    artifact = load_artifact(args.artifact)

    async def main() -> Any:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        async with serve_judges(specs, sim_config) as judges:
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[errors]} errors"),
                console=console(stderr=True),
                transient=True,
                disable=not sys.stderr.isatty(),
            )
            total = len(examples) * args.repeat
            tasks = {m: progress.add_task(m, total=total, errors=0) for m in labels}
            errors = dict.fromkeys(labels, 0)

            def on_result(model: str, result: Any) -> None:
                if result.error is not None:
                    errors[model] += 1
                progress.update(tasks[model], advance=1, errors=errors[model])

            with progress:
                return await compare_judges(
                    args.metric,
                    examples,
                    judges,
                    reference_model=reference,
                    labels=args.labels,
                    program=args.program,
                    artifact=artifact,
                    timeout=timeout,
                    repeat=args.repeat,
                    project=args.project,
                    on_result=on_result,
                )

    report = anyio.run(main)
    print_judges(report)
    if args.output:
        Path(args.output).write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    if args.plot:
        from ._plot import plot_judges

        plot_judges(report, args.plot)
        console().print(f"plot written to {args.plot}")
    return 0
