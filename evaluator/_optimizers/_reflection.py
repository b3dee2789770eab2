"""What an optimizer's reflection model is told about one result.

The contract: nothing the engine hands an optimizer may carry the example's ``expected``
values. Masking them out of text after the fact cannot keep that promise (a one-letter
answer such as ``B`` cannot be masked without garbling every message; a long one shows up
cut short in a repr, transformed, or in another quoting), so the reflection is built only
from fields that never held ``expected``:

- **the inputs**, copied before the evaluation ran (a metric that writes into ``input``
  cannot reach them);
- **the program's output**, which the program made without seeing ``expected``;
- **the metric's own feedback and scores**, when the metric returned them: the user's
  words, written for the reflection (the contract asks the metric to say what the right
  result looks like; what it says is its author's choice);
- **for an error, the engine's own words**, chosen by where it happened. A failure of
  the program (``program_error``, ``program_timeout``, and a model error or crash in the
  program's stage) comes with its message: the program never saw ``expected``, and the
  message (a bad parse, a too-long prompt) is what the reflection can act on. A failure
  of the metric (``metric_error``, ``metric_timeout``, ``invalid_return``, a model error
  or crash while scoring) comes with a fixed sentence per kind and nothing of the
  exception: its message was made by code that held ``expected`` (``KeyError: 'B'``,
  ``the score is a str ('billing')``), and the reflection cannot fix the metric anyway.
  The full message stays in the result, the report and the results file, for people.
"""

from __future__ import annotations

from .._call._results import ErrorInfo, Result

__all__ = ["METRIC_FAILURE_TEXT", "from_program", "reflection_feedback"]

_NOT_A_JUDGEMENT = "so this score is the failure score, not a judgement of the output"

_WHAT = {
    "metric_error": "The metric failed while scoring this output (it raised an error)",
    "metric_timeout": "The metric did not finish scoring this output within its time limit",
    "invalid_return": "The metric returned a value that breaks the metric contract",
    "llm_error": "A model call made while scoring this output failed",
    "worker_crash": "The process scoring this example crashed",
    "cancelled": "This example was cancelled before it was scored",
    "budget_exhausted": "This example was not evaluated: the spending budget ran out",
}
#: The sentence the reflection sees for an error that did not come from the program.
METRIC_FAILURE_TEXT: dict[str, str] = {
    **{kind: f"{what}, {_NOT_A_JUDGEMENT}." for kind, what in _WHAT.items()},
    "missing_output": "This example has no output to score.",
}
_UNKNOWN = f"This example could not be scored, {_NOT_A_JUDGEMENT}."

# The engine's own openings of messages about the program's call (``_calls._describe``,
# the executors' timeout and crash messages); the program's function is ``run``.
_PROGRAM_OPENINGS = ("`run` ", "the worker process running `run` ")
_PROGRAM_KINDS = frozenset({"program_error", "program_timeout"})
_EITHER_STAGE = frozenset({"llm_error", "worker_crash"})


def from_program(error: ErrorInfo) -> bool:
    """Whether ``error`` happened in the program's stage (whose code never saw
    ``expected``), by its kind, or for the kinds both stages share, by the engine's own
    opening of the message (the metric's function is ``score``, never ``run``)."""
    if error.kind in _PROGRAM_KINDS:
        return True
    return error.kind in _EITHER_STAGE and error.message.startswith(_PROGRAM_OPENINGS)


def reflection_feedback(result: Result) -> str:
    """The feedback text a reflection model may see for ``result`` (see the module)."""
    error = result.error
    if error is None:
        return result.feedback
    if from_program(error):
        return f"The program failed on this example ({error.kind}): {error.message}"
    return METRIC_FAILURE_TEXT.get(error.kind, _UNKNOWN)
