"""The run report, one for ``run`` and for ``skynet-eval report``.

Layout: ``_summary`` holds :class:`Report` and :class:`ReportBuilder`, the one summary
of a run (counts, means, latencies, costs, error groups, distributions), built live by
``run`` and offline from a results file by ``report``; ``_stats`` is the page's view of
it (:class:`RunSummary`) and the histograms; ``_terminal`` holds every table row of it,
``run``'s and ``report``'s (printed by ``evaluator._cli._output``); ``html/`` is
``skynet-eval report``'s page and run-to-run comparison. Reading the results file is
``evaluator._results_file``'s.

The summary's names and the rows of ``run``'s report are re-exported here.
"""

from ._summary import *  # noqa: F403 - the summary's names, as its __all__ lists them
from ._summary import __all__ as _summary_names
from ._terminal import failure_rows as failure_rows
from ._terminal import repeat_rows as repeat_rows
from ._terminal import report_rows as report_rows

__all__ = sorted([*_summary_names, "failure_rows", "repeat_rows", "report_rows"])
