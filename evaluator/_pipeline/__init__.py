"""The streaming evaluation pipeline: the :class:`Evaluator` and what it is made of.

- ``_evaluator``: the Evaluator: its options, its lifetime, the public API, and where
  each stage runs (:func:`choose_execution`);
- ``_flow``: the flow of examples: source, chunk sizer, in-flight bound, dispatch,
  :class:`ResultStream`;
- ``_assembly``: calls from examples and results from outcomes, as pure functions;
- ``_scheduler``: fair shares between callers (tenants and weights): the token book and
  the fair gates in front of each executor.
"""

from ._evaluator import Evaluator as Evaluator
from ._evaluator import EvaluatorStatistics as EvaluatorStatistics
from ._evaluator import ExecutionChoice as ExecutionChoice
from ._evaluator import choose_execution as choose_execution
from ._flow import ResultStream as ResultStream

__all__ = [
    "Evaluator",
    "EvaluatorStatistics",
    "ExecutionChoice",
    "ResultStream",
    "choose_execution",
]
