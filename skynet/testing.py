"""Unit-test a metric: ``score_example(metric, output, replies=[...])`` returns the
:class:`evaluator.Result` the engine would record. A facade of ``evaluator._testing``."""

from evaluator._testing import Replies as Replies
from evaluator._testing import ScriptError as ScriptError
from evaluator._testing import ascore_example as ascore_example
from evaluator._testing import score_example as score_example

__all__ = ["Replies", "ScriptError", "ascore_example", "score_example"]
