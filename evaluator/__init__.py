"""skynet-eval's engine: load the user's files, check the metric contract, evaluate."""

from ._contract import validate_return as validate_return
from ._dataset import Example as Example
from ._dataset import load_examples as load_examples
from ._exceptions import ConfigError as ConfigError
from ._exceptions import ContractError as ContractError
from ._exceptions import DatasetError as DatasetError
from ._exceptions import EvaluationError as EvaluationError
from ._exceptions import InvalidReturn as InvalidReturn
from ._exceptions import OutsideCallError as OutsideCallError
from ._loader import UserFunction as UserFunction
from ._loader import load_metric as load_metric
from ._loader import load_program as load_program
from ._results import ErrorInfo as ErrorInfo
from ._results import Observation as Observation
from ._results import Result as Result
from ._results import Scored as Scored
from ._results import Usage as Usage

__all__ = [
    "ConfigError",
    "ContractError",
    "DatasetError",
    "ErrorInfo",
    "EvaluationError",
    "Example",
    "InvalidReturn",
    "Observation",
    "OutsideCallError",
    "Result",
    "Scored",
    "Usage",
    "UserFunction",
    "load_examples",
    "load_metric",
    "load_program",
    "validate_return",
]
