"""The service's metric: does the reply mention the expected keyword?"""


def score(input, output, expected=None):
    keyword = expected["keyword"]
    if keyword.lower() in str(output).lower():
        return 1.0, {"feedback": "Mentions the keyword."}
    return 0.0, {"feedback": f"The reply should mention {keyword!r}."}
