def score(input, output, expected=None):
    want = expected["verdict"]
    if output == want:
        return 1.0, {"feedback": "Correct verdict."}
    return 0.0, {"feedback": f"Expected {want}, the grader said {output}."}
