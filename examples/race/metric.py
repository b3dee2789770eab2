def score(input, output, expected=None):
    if output:
        return 1.0, {"feedback": "Correct."}
    return 0.0, {"feedback": "Wrong."}
