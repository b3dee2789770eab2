import os
import threading
import time

RELEASE = threading.Event()


def score(input, output, expected=None):
    kind = input.get("kind", "ok")
    if kind == "ok":
        return float(output == expected["label"]), {"feedback": "checked"}
    if kind == "raise":
        raise ValueError("boom " + str(input.get("n")))
    if kind == "slow":
        time.sleep(0.002)
        return 0.5, {"feedback": "slow", "scores": {"part": 0.25}}
    if kind == "invalid":
        return "0.8", {"feedback": "a string score"}
    if kind == "crash":
        os._exit(1)
    if kind == "hang":
        RELEASE.wait(input.get("hang_s", 30))
        return 1.0, {"feedback": "woke"}
    raise AssertionError(kind)
