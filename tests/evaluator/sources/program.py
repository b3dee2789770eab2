import time


def run(artifact, input):
    kind = input.get("program", "ok")
    if kind == "raise":
        raise RuntimeError("program failed")
    if kind == "hang":
        time.sleep(input.get("hang_s", 30))
    if kind == "slow":
        time.sleep(0.02)
    return artifact + ":" + str(input.get("n"))
