"""The run report, one for ``run`` and for ``skynet-eval report``.

Layout: ``_summary`` holds :class:`Report` and :class:`ReportBuilder`, the one summary
of a run (counts, means, latencies, costs, error groups, distributions), built live by
``run`` and offline from a results file by ``report``; ``_stats`` is the page's view of
it (:class:`RunSummary`) and the histograms; ``_terminal`` lays out either as table rows
(printed by ``evaluator._cli._output``); ``html/`` is ``skynet-eval report``'s page and
run-to-run comparison. Reading the results file is ``evaluator._results_file``'s.

The summary's names are re-exported here (the engine imports them from ``._report``).
"""

from ._summary import *  # noqa: F403 - the summary's names, as its __all__ lists them
from ._summary import __all__ as __all__
