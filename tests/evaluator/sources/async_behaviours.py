import asyncio


async def score(input, output, expected=None):
    kind = input.get("kind", "ok")
    if kind == "ok":
        return float(output == expected["label"]), {"feedback": "checked"}
    if kind == "raise":
        raise ValueError("boom " + str(input.get("n")))
    if kind == "slow":
        await asyncio.sleep(0.002)
        return 0.5, {"feedback": "slow", "scores": {"part": 0.25}}
    if kind == "invalid":
        return "0.8", {"feedback": "a string score"}
    if kind == "hang":
        await asyncio.sleep(input.get("hang_s", 30))
        return 1.0, {"feedback": "woke"}
    raise AssertionError(kind)
