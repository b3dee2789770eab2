"""``skynet-eval judges``: one judge metric, several models, one table (and a plot).

Every model judges the same outputs (the program's, computed once, or the dataset's);
the table compares their cost, latency and agreement with a reference model or with
human labels. ``--output`` writes the report as JSON, ``--plot`` draws cost against
agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from evaluator import Example, JudgesReport, compare_judges

from . import _loop
from ._main import EXIT_OK
from ._options import JudgesOptions
from ._output import console, print_judges
from ._progress import JudgesProgress
from ._serving import Serving

__all__ = ["execute"]


def execute(options: JudgesOptions) -> int:
    """Judge with every model, print the table, write the files asked for."""
    serving = Serving(options.serving)  # a missing key stops us before any work
    examples = list(options.data.examples())
    report = _loop.run(lambda: _compare(options, serving, examples))
    print_judges(report)
    if options.output:
        Path(options.output).write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    if options.plot:
        from evaluator._plot import plot_judges

        plot_judges(report, options.plot)
        console().print(f"plot written to {options.plot}")
    return EXIT_OK


async def _compare(
    options: JudgesOptions, serving: Serving, examples: Sequence[Example]
) -> JudgesReport:
    async with serving.open() as configs:
        with JudgesProgress(list(configs), len(examples)) as progress:
            return await compare_judges(
                options.metric,
                examples,
                list(configs.values()),
                reference_model=options.reference,
                labels=options.labels,
                program=options.program,
                artifact=options.artifact,
                timeout=options.timeout,
                on_result=progress.on_result,
            )
