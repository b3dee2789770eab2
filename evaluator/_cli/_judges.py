"""``skynet-eval judges``: one judge metric, several models, one table (and a plot).

Every model judges the same outputs (the program's, computed once, or the dataset's),
``--repeat K`` times each; the table compares their cost, latency, self-agreement and
agreement with a reference model or with human labels. The judges come from ``--models``
(behind one base URL and key) or a models file (each model its own provider, key and
price); with ``--simulator`` each provider is served by its own local simulator.
``--output`` writes the report as JSON, ``--plot`` draws cost against agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from evaluator import Example, JudgesReport
from evaluator._judges import compare_judges, print_judges, serve_judges

from . import _loop
from ._main import EXIT_OK
from ._options import JudgesOptions
from ._output import console
from ._progress import JudgesProgress

__all__ = ["execute"]


def execute(options: JudgesOptions) -> int:
    """Judge with every model, print the table, write the files asked for."""
    examples = list(options.data.examples())
    report = _loop.run(lambda: _compare(options, examples))
    print_judges(report)
    if options.output:
        Path(options.output).write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    if options.plot:
        from evaluator._judges._plot import plot_judges

        plot_judges(report, options.plot)
        console().print(f"plot written to {options.plot}")
    return EXIT_OK


async def _compare(options: JudgesOptions, examples: Sequence[Example]) -> JudgesReport:
    async with serve_judges(options.judges, options.simulator) as judges:
        labels = [judge.label for judge in judges]
        with JudgesProgress(labels, len(examples) * options.repeat) as progress:
            return await compare_judges(
                options.metric,
                examples,
                judges,
                reference_model=options.reference,
                labels=options.labels,
                program=options.program,
                artifact=options.artifact,
                timeout=options.timeout,
                repeat=options.repeat,
                project=options.project,
                on_result=progress.on_result,
            )
