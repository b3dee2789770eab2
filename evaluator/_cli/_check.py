"""``skynet-eval check``: the contract check of a metric on the first examples.

The models, simulator and prices are ``run``'s flags (one definition in ``_options``), so
a judge metric is checked with the model it will call. Exit 0 when every step passes, 1
when one fails (the report says which and why).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from evaluator import ContractReport, Example, check_contract

from . import _loop
from ._main import EXIT_FAILED, EXIT_OK
from ._options import CheckOptions
from ._output import console, print_steps, reserved_stdout, write_json
from ._serving import Serving

__all__ = ["execute"]


def execute(options: CheckOptions) -> int:
    """Check, print the steps (or one JSON object with ``--json``), exit 0 or 1."""
    serving = Serving(options.serving)  # a missing key stops us before the dataset is read
    examples = options.data.examples()
    with reserved_stdout(options.json) as stream:
        report = _loop.run(lambda: _check(options, serving, examples))
        if options.json:
            write_json(stream, report)
            return EXIT_OK if report.ok else EXIT_FAILED
    out = console()
    print_steps(report, out)
    if report.ok:
        out.print(f"[green]Contract check passed[/green] on {Path(options.metric)}.")
    else:
        failed = report.failed
        out.print(f"[red]Contract check failed[/red] at step {failed.name if failed else '?'}.")
    return EXIT_OK if report.ok else EXIT_FAILED


async def _check(
    options: CheckOptions, serving: Serving, examples: Iterable[Example]
) -> ContractReport:
    async with serving.open() as configs:
        return await check_contract(
            options.metric,
            examples,
            program=options.program,
            artifact=options.artifact,
            timeout=options.timeout,
            program_timeout=options.program_timeout,
            execution=options.execution,
            program_execution=options.program_execution,
            models=serving.models(configs),
        )
