def score(input, output, expected=None):
    # A common mistake: the score comes back as text.
    return str(1.0 if output == expected["label"] else 0.0), {"feedback": "checked"}
