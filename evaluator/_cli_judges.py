"""``skynet-eval judges``: one judge metric, several models, one table (and a plot)."""

from __future__ import annotations

import argparse
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ._cli_common import (
    add_dataset_args,
    add_simulator_arg,
    cli_key_error,
    console,
    key_env,
    load_artifact,
    load_simulator_config,
    user_errors,
)
from ._dataset import load_examples
from ._exceptions import ConfigError
from ._options import validate_timeout


def _price(text: str) -> tuple[str, float, float]:
    model, sep, rest = text.partition("=")
    parts = rest.split(",")
    try:
        if not sep or len(parts) != 2:
            raise ValueError
        return model.strip(), float(parts[0]), float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected MODEL=INPUT,OUTPUT in USD per million tokens, "
            f"e.g. judge-mini=0.15,0.6; got {text!r}"
        ) from None


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
    parser.add_argument("--models", required=True, help="comma-separated model names")
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
        "--base-url", default="https://api.openai.com/v1", help="OpenAI-compatible base URL"
    )
    parser.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key"
    )
    parser.add_argument("--rpm", type=float, help="requests per minute, per model")
    parser.add_argument("--tpm", type=float, help="tokens per minute, per model")
    parser.add_argument(
        "--price",
        type=_price,
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
    from llm_client import ModelConfig, ModelConfigError

    timeout = validate_timeout(args.timeout, "--timeout")
    for flag in ("metric", "program"):
        value = getattr(args, flag)
        if value is not None and not Path(value).is_file():
            raise ConfigError(f"--{flag} {value!r} does not exist")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        raise ConfigError("--models needs at least one model name")
    prices = {m: (i, o) for m, i, o in args.price}
    unknown = sorted(set(prices) - set(models))
    if unknown:
        raise ConfigError(f"--price names model(s) {unknown} that are not in --models")
    if args.reference is not None and args.reference not in models:
        raise ConfigError(f"--reference {args.reference!r} is not one of --models {models}")
    reference = args.reference or (None if args.labels else models[0])
    examples = list(
        load_examples(args.data, input_cols=args.input_cols, output_cols=args.output_cols)
    )
    artifact = load_artifact(args.artifact)
    sim_config = load_simulator_config(args.simulator) if args.simulator else None
    if sim_config is None:
        # A missing key is a usage error now, not one failed row per model later.
        try:
            ModelConfig(
                model=models[0], base_url=args.base_url, api_key_env=key_env(args.api_key_env)
            ).api_key()
        except ModelConfigError as exc:
            raise cli_key_error(exc) from None

    async def main() -> Any:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        from ._judges import compare_judges

        async with AsyncExitStack() as stack:
            base_url, api_key_env = args.base_url, key_env(args.api_key_env)
            if sim_config is not None:
                from llm_client import Simulator

                sim = await stack.enter_async_context(Simulator(sim_config))
                base_url, api_key_env = sim.base_url, None
            configs = [
                ModelConfig(
                    model=m,
                    base_url=base_url,
                    api_key_env=api_key_env,
                    rpm=args.rpm,
                    tpm=args.tpm,
                    price_input=prices.get(m, (None, None))[0],
                    price_output=prices.get(m, (None, None))[1],
                )
                for m in models
            ]
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[errors]} errors"),
                console=console(stderr=True),
                transient=True,
                disable=not sys.stderr.isatty(),
            )
            tasks = {m: progress.add_task(m, total=len(examples), errors=0) for m in models}
            errors = dict.fromkeys(models, 0)

            def on_result(model: str, result: Any) -> None:
                if result.error is not None:
                    errors[model] += 1
                progress.update(tasks[model], advance=1, errors=errors[model])

            with progress:
                return await compare_judges(
                    args.metric,
                    examples,
                    configs,
                    reference_model=reference,
                    labels=args.labels,
                    program=args.program,
                    artifact=artifact,
                    timeout=timeout,
                    on_result=on_result,
                )

    report = anyio.run(main)
    print_table(report)
    if args.output:
        Path(args.output).write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    if args.plot:
        from ._plot import plot_judges

        plot_judges(report, args.plot)
        console().print(f"plot written to {args.plot}")
    return 0


def _fmt(value: float | None, spec: str, unknown: str = "–") -> str:
    return unknown if value is None else format(value, spec)


def print_table(report: Any) -> None:
    from rich.table import Table

    against = report.reference or "nothing (no reference)"
    table = Table(title=f"Judges on {report.examples} examples; agreement against {against}")
    for name in (
        "model",
        "scored",
        "errors",
        "mean",
        "$/1k ex",
        "$ total",
        "in tok/ex",
        "out tok/ex",
        "p50 ms",
        "p95 ms",
        "429s",
        "retries",
        "agreement [95% CI]",
        "kappa" if report.kind == "verdicts" else "pearson",
        "front",
    ):
        table.add_column(name, justify="left" if name == "model" else "right")
    for row in report.rows:
        ci = f" [{row.agreement_ci[0]:.2f}, {row.agreement_ci[1]:.2f}]" if row.agreement_ci else ""
        cost_1k = (
            "unknown"
            if row.cost_per_1k_usd is None and row.cost_note
            else _fmt(row.cost_per_1k_usd, ".4f")
        )
        cost = "unknown" if row.cost_usd is None and row.cost_note else _fmt(row.cost_usd, ".5f")
        table.add_row(
            row.model,
            str(row.scored),
            str(row.errors),
            _fmt(row.mean_score, ".3f"),
            cost_1k,
            cost,
            _fmt(row.input_tokens_per_example, ".0f"),
            _fmt(row.output_tokens_per_example, ".0f"),
            _fmt(row.latency_p50_ms, ".0f"),
            _fmt(row.latency_p95_ms, ".0f"),
            str(row.rate_limited),
            str(row.retries),
            _fmt(row.agreement, ".3f") + ci,
            _fmt(row.kappa if report.kind == "verdicts" else row.pearson, ".3f"),
            "★" if row.pareto else "",
        )
    out = console(wide=True)
    out.print(table)
    for row in report.rows:
        if row.failure:
            out.print(f"[red]{row.model}[/red]: {row.failure}", markup=True)
        elif row.cost_note:
            out.print(f"{row.model}: cost unknown: {row.cost_note}")
