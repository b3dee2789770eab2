"""What metric and program files import: ``llm``, ``reward``, ``observation``,
``service_cost``. A facade: each name delegates to the engine's current call."""

from evaluator._facade import allm as allm
from evaluator._facade import llm as llm
from evaluator._facade import observation as observation
from evaluator._facade import reward as reward
from evaluator._facade import service_cost as service_cost

__all__ = ["allm", "llm", "observation", "reward", "service_cost"]
