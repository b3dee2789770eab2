"""DSPy integration: the user's ``score`` as a metric for every DSPy optimizer.

Importing this module does not import dspy; dspy is needed only when ``dspy.GEPA`` asks
for feedback (the reply is a ``dspy.Prediction``).
"""

from ._dspy import DSPyMetric as DSPyMetric
from ._dspy import to_dspy_metric as to_dspy_metric

__all__ = ["DSPyMetric", "to_dspy_metric"]
