"""The run report's page: ``skynet-eval report``, one self-contained HTML page per run.

Layout (the results file is read by ``evaluator._results_file._load``, the run summarised
by ``evaluator._report._summary``, viewed by ``evaluator._report._stats``): ``_compare``
matches two runs by id (its paired bootstrap interval is
``evaluator._stats.bootstrap_mean_ci``); ``_rows`` lays out the page's table data;
``_svg`` draws the charts; ``_html`` writes the markup (``assets/`` holds the page's
script and stylesheet); ``_build`` ties them together (the terminal's rows of the same
summary are ``evaluator._report._terminal``'s); ``_race`` is a race file's page;
``_command`` is the ``report`` subcommand's logic.
"""

from ..._results_file._load import ResultsFile as ResultsFile
from ..._results_file._load import ResultsFileError as ResultsFileError
from ..._results_file._load import load_results_file as load_results_file
from .._stats import Distribution as Distribution
from .._stats import RunSummary as RunSummary
from .._stats import summarize as summarize
from ._build import BuiltReport as BuiltReport
from ._build import build_report as build_report
from ._build import write_html_report as write_html_report
from ._compare import Comparison as Comparison
from ._compare import NamedDelta as NamedDelta
from ._compare import PairedDifference as PairedDifference
from ._compare import compare_results as compare_results

__all__ = [
    "BuiltReport",
    "Comparison",
    "Distribution",
    "NamedDelta",
    "PairedDifference",
    "ResultsFile",
    "ResultsFileError",
    "RunSummary",
    "build_report",
    "compare_results",
    "load_results_file",
    "summarize",
    "write_html_report",
]
