"""GEPA integration: score GEPA's candidates with the engine.

``EvaluatorAdapter`` implements GEPA's adapter protocol on an open ``Evaluator``.
Importing this module does not import gepa; gepa is needed once the adapter builds its
first ``EvaluationBatch``.
"""

from ._optimizers._gepa import EvaluatorAdapter as EvaluatorAdapter
from ._optimizers._gepa import Trajectory as Trajectory

__all__ = ["EvaluatorAdapter", "Trajectory"]
