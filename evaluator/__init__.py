"""skynet-eval's engine: load the user's files, check the metric contract, evaluate.

The optimizer integrations are the submodules ``evaluator.dspy`` and ``evaluator.gepa``
(imported on demand, so ``import evaluator`` never imports dspy or gepa).
"""

from ._check import CheckStep as CheckStep
from ._check import ContractReport as ContractReport
from ._check import check_contract as check_contract
from ._contract import validate_return as validate_return
from ._dataset import Example as Example
from ._dataset import load_examples as load_examples
from ._exceptions import ConfigError as ConfigError
from ._exceptions import ContractError as ContractError
from ._exceptions import DatasetError as DatasetError
from ._exceptions import EvaluationError as EvaluationError
from ._exceptions import InvalidReturn as InvalidReturn
from ._exceptions import OutsideCallError as OutsideCallError
from ._judges import JudgeRow as JudgeRow
from ._judges import JudgesReport as JudgesReport
from ._judges import compare_judges as compare_judges
from ._loader import UserFunction as UserFunction
from ._loader import load_metric as load_metric
from ._loader import load_program as load_program
from ._models import Models as Models
from ._models import ModelStatistics as ModelStatistics
from ._pipeline import Evaluator as Evaluator
from ._pipeline import EvaluatorStatistics as EvaluatorStatistics
from ._pipeline import ResultStream as ResultStream
from ._report import Latency as Latency
from ._report import NamedScore as NamedScore
from ._report import Report as Report
from ._report import ReportBuilder as ReportBuilder
from ._report_html import Comparison as Comparison
from ._report_html import ResultsFileError as ResultsFileError
from ._report_html import compare_results as compare_results
from ._report_html import load_results_file as load_results_file
from ._report_html import write_html_report as write_html_report
from ._results import ERROR_KINDS as ERROR_KINDS
from ._results import ErrorInfo as ErrorInfo
from ._results import Observation as Observation
from ._results import Result as Result
from ._results import Scored as Scored
from ._results import Usage as Usage
from ._store import ResultsWriter as ResultsWriter
from ._store import ResumeWarning as ResumeWarning
from ._store import read_results as read_results

__all__ = [
    "ERROR_KINDS",
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
    "ModelStatistics",
    "Models",
    "NamedScore",
    "Observation",
    "OutsideCallError",
    "Report",
    "ReportBuilder",
    "Result",
    "ResultStream",
    "ResultsFileError",
    "ResultsWriter",
    "ResumeWarning",
    "Scored",
    "Usage",
    "UserFunction",
    "check_contract",
    "compare_judges",
    "compare_results",
    "load_examples",
    "load_metric",
    "load_program",
    "load_results_file",
    "read_results",
    "validate_return",
    "write_html_report",
]
