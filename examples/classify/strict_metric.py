"""The classify metric, strict: a label outside the dataset's set is the program's bug,
so it raises (the example's result is a `metric_error` naming it) instead of scoring 0."""

LABELS = {"billing", "technical", "account", "shipping", "other"}


def score(input, output, expected=None):
    if output not in LABELS:
        raise ValueError(f"unknown label {output!r}")
    want = expected["label"]
    if output == want:
        return 1.0, {"feedback": "Correct."}
    return 0.0, {"feedback": f"Expected {want!r}, got {output!r}."}
