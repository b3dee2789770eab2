"""A support-ticket classifier driven by its artifact: keyword rules in a prompt-like text.

The artifact holds lines ``keyword -> label``; the first keyword found in the message
(case-insensitive) gives the label, and a line ``Otherwise answer: <label>`` the default.
No model needed, deterministic: an optimizer improves the result by editing the rules.
"""


def parse_rules(artifact):
    rules, default = [], "other"
    for line in str(artifact or "").splitlines():
        line = line.strip()
        if "->" in line:
            keyword, _, label = line.partition("->")
            if keyword.strip() and label.strip():
                rules.append((keyword.strip().lower(), label.strip()))
        elif line.lower().startswith("otherwise answer:"):
            default = line.split(":", 1)[1].strip() or default
    return rules, default


def run(artifact, input):
    rules, default = parse_rules(artifact)
    message = input["message"].lower()
    for keyword, label in rules:
        if keyword in message:
            return label
    return default
