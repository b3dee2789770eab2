"""The optimizer adapters behind the public ``evaluator.gepa`` and ``evaluator.dspy``:
GEPA's ``EvaluatorAdapter``, DSPy's metric, what GEPA's reflection may see, and the
background engine DSPy's calls use. Importing this package imports neither dspy nor gepa."""
