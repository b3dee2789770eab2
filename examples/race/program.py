"""A stand-in for a prompted model whose skill the artifact sets: it answers an example
correctly when the example's difficulty is below the artifact's threshold, and its verdict
is flipped with a small probability (fixed per candidate and example, so runs repeat)."""

import hashlib


def run(artifact, input):
    key = f"{artifact['name']}:{input['n']}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
    return (input["difficulty"] < artifact["threshold"]) != (draw < artifact["noise"])
