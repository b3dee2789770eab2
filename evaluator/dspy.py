"""DSPy integration: the user's ``score`` as a metric for every DSPy optimizer.

``to_dspy_metric`` adapts the metric; a judge metric's model is given to it (``lm=``,
``reflection_lm=``, ``models=``) and served by an engine the metric owns (close it with
``with`` or ``close()``). Importing this module does not import dspy; dspy is needed
only when ``dspy.GEPA`` asks for feedback (the reply is a ``dspy.Prediction``).
"""

from ._exceptions import EngineClosedError as EngineClosedError
from ._exceptions import NoModelError as NoModelError
from ._optimizers._dspy import DSPyMetric as DSPyMetric
from ._optimizers._dspy import DSPyMetricStatistics as DSPyMetricStatistics
from ._optimizers._dspy import to_dspy_metric as to_dspy_metric

__all__ = [
    "DSPyMetric",
    "DSPyMetricStatistics",
    "EngineClosedError",
    "NoModelError",
    "to_dspy_metric",
]
