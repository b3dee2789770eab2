"""skynet-eval's engine: load the user's files, check the metric contract, evaluate.

The optimizer integrations are the submodules ``evaluator.dspy`` and ``evaluator.gepa``
(imported on demand, so ``import evaluator`` never imports dspy or gepa).

Names are imported when first used (a module ``__getattr__``): ``import evaluator``
costs little (it imports only ``_fingerprint``, whose audit hook notes the files user
code reads, for the result cache's key), and a worker process, which imports a few of
the engine's modules, never runs the whole engine's imports. Type checkers read the
explicit re-exports below.

Layout (sub-packages; docs/architecture.md lists the flat modules too):

- ``_call/``: the call layer, one user call in every executor; all a worker imports
- ``_data/``: the dataset files read into rows, and rows into ``Example`` values
- ``_executors/``: where user calls run: async, thread, inline, process, ray
- ``_pipeline/``: the ``Evaluator``, the flow that feeds the executors, result assembly
- ``_cache/``: the result cache: the key, the memory and the disk tiers
- ``_sdk/``: the user's own model SDKs, routed through the engine's model client
- ``_judges/``: ``skynet-eval judges``: judge comparison, agreement, the plot
- ``_optimizers/``: the GEPA and DSPy adapters behind ``evaluator.gepa`` and ``.dspy``
- ``_report/``: the run report (live and offline), its rows, ``skynet-eval report``'s page
- ``_results_file/``: the results file: writing, resuming, reading it back
- ``_cli/``: the command line
"""

import importlib
import typing

# Before any user file is imported: the hook that notes the files user code reads, for
# the result cache's key (``_fingerprint.read_by``).
from . import _fingerprint as _fingerprint

if typing.TYPE_CHECKING:
    from ._cache import CacheStatistics as CacheStatistics
    from ._cache import CacheWarning as CacheWarning
    from ._call._contract import validate_return as validate_return
    from ._call._loader import UserFunction as UserFunction
    from ._call._loader import load_metric as load_metric
    from ._call._loader import load_program as load_program
    from ._call._results import ERROR_KINDS as ERROR_KINDS
    from ._call._results import ErrorInfo as ErrorInfo
    from ._call._results import Observation as Observation
    from ._call._results import Result as Result
    from ._call._results import Scored as Scored
    from ._call._results import Usage as Usage
    from ._check import CheckStep as CheckStep
    from ._check import ContractReport as ContractReport
    from ._check import check_contract as check_contract
    from ._data._dataset import Example as Example
    from ._data._dataset import load_examples as load_examples
    from ._exceptions import ConfigError as ConfigError
    from ._exceptions import ContractError as ContractError
    from ._exceptions import DatasetError as DatasetError
    from ._exceptions import EvaluationError as EvaluationError
    from ._exceptions import InvalidReturn as InvalidReturn
    from ._exceptions import NotAResultsFile as NotAResultsFile
    from ._exceptions import OutputPathError as OutputPathError
    from ._exceptions import OutsideCallError as OutsideCallError
    from ._exceptions import ResultsFileError as ResultsFileError
    from ._exceptions import ResultsLocked as ResultsLocked
    from ._exceptions import ResultsWriteError as ResultsWriteError
    from ._exceptions import ResumeMismatch as ResumeMismatch
    from ._judges import JudgeRow as JudgeRow
    from ._judges import JudgesReport as JudgesReport
    from ._judges import compare_judges as compare_judges
    from ._models import Budget as Budget
    from ._models import Models as Models
    from ._models import ModelStatistics as ModelStatistics
    from ._pipeline import Evaluator as Evaluator
    from ._pipeline import EvaluatorStatistics as EvaluatorStatistics
    from ._pipeline import ResultStream as ResultStream
    from ._race import RaceCandidate as RaceCandidate
    from ._race import RaceResult as RaceResult
    from ._race import RaceRound as RaceRound
    from ._race import RaceSpend as RaceSpend
    from ._race import Ties as Ties
    from ._report import CacheSummary as CacheSummary
    from ._report import Latency as Latency
    from ._report import ModelBudget as ModelBudget
    from ._report import NamedScore as NamedScore
    from ._report import Report as Report
    from ._report import ReportBuilder as ReportBuilder
    from ._report import StageExecution as StageExecution
    from ._report.html import Comparison as Comparison
    from ._report.html import compare_results as compare_results
    from ._report.html import write_html_report as write_html_report
    from ._results_file._load import load_results_file as load_results_file
    from ._results_file._store import ResultsWriter as ResultsWriter
    from ._results_file._store import ResumeWarning as ResumeWarning
    from ._results_file._store import open_results as open_results

#: Where each public name lives.
_WHERE = {
    "CacheStatistics": "._cache",
    "CacheWarning": "._cache",
    "CheckStep": "._check",
    "ContractReport": "._check",
    "check_contract": "._check",
    "validate_return": "._call._contract",
    "Example": "._data._dataset",
    "load_examples": "._data._dataset",
    "ConfigError": "._exceptions",
    "ContractError": "._exceptions",
    "DatasetError": "._exceptions",
    "EvaluationError": "._exceptions",
    "InvalidReturn": "._exceptions",
    "NotAResultsFile": "._exceptions",
    "OutputPathError": "._exceptions",
    "OutsideCallError": "._exceptions",
    "ResultsFileError": "._exceptions",
    "ResultsLocked": "._exceptions",
    "ResultsWriteError": "._exceptions",
    "ResumeMismatch": "._exceptions",
    "JudgeRow": "._judges",
    "JudgesReport": "._judges",
    "compare_judges": "._judges",
    "UserFunction": "._call._loader",
    "load_metric": "._call._loader",
    "load_program": "._call._loader",
    "Budget": "._models",
    "Models": "._models",
    "ModelStatistics": "._models",
    "Evaluator": "._pipeline",
    "EvaluatorStatistics": "._pipeline",
    "ResultStream": "._pipeline",
    "RaceCandidate": "._race",
    "RaceResult": "._race",
    "RaceRound": "._race",
    "RaceSpend": "._race",
    "Ties": "._race",
    "CacheSummary": "._report",
    "Latency": "._report",
    "ModelBudget": "._report",
    "NamedScore": "._report",
    "Report": "._report",
    "ReportBuilder": "._report",
    "StageExecution": "._report",
    "Comparison": "._report.html",
    "compare_results": "._report.html",
    "load_results_file": "._results_file._load",
    "write_html_report": "._report.html",
    "ERROR_KINDS": "._call._results",
    "ErrorInfo": "._call._results",
    "Observation": "._call._results",
    "Result": "._call._results",
    "Scored": "._call._results",
    "Usage": "._call._results",
    "ResultsWriter": "._results_file._store",
    "ResumeWarning": "._results_file._store",
    "open_results": "._results_file._store",
}

__all__ = [
    "ERROR_KINDS",
    "Budget",
    "CacheStatistics",
    "CacheSummary",
    "CacheWarning",
    "CheckStep",
    "Comparison",
    "ConfigError",
    "ContractError",
    "ContractReport",
    "DatasetError",
    "ErrorInfo",
    "EvaluationError",
    "Evaluator",
    "EvaluatorStatistics",
    "Example",
    "InvalidReturn",
    "JudgeRow",
    "JudgesReport",
    "Latency",
    "ModelBudget",
    "ModelStatistics",
    "Models",
    "NamedScore",
    "NotAResultsFile",
    "Observation",
    "OutputPathError",
    "OutsideCallError",
    "RaceCandidate",
    "RaceResult",
    "RaceRound",
    "RaceSpend",
    "Report",
    "ReportBuilder",
    "Result",
    "ResultStream",
    "ResultsFileError",
    "ResultsLocked",
    "ResultsWriteError",
    "ResultsWriter",
    "ResumeMismatch",
    "ResumeWarning",
    "Scored",
    "StageExecution",
    "Ties",
    "Usage",
    "UserFunction",
    "check_contract",
    "compare_judges",
    "compare_results",
    "load_examples",
    "load_metric",
    "load_program",
    "load_results_file",
    "open_results",
    "validate_return",
    "write_html_report",
]


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    # The public names only: the engine's modules and helpers are not the package's API.
    return sorted(__all__)
