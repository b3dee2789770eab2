"""The dspy contender of bench_llm.py's benchmark 1: judge calls through ``dspy.Evaluate``.

    python benchmarks/bench_llm_dspy.py URL N THREADS

Run by bench_llm.py in its own process, because dspy (through litellm) must see its
environment before it is imported: the local cost map (no network) and a throwaway cache
directory. Each example makes exactly one judge call: the program calls ``dspy.LM``
directly, so no adapter parsing adds or retries calls. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Any


def main() -> None:
    url, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["DSPY_CACHEDIR"] = tempfile.mkdtemp(prefix="bench-dspy-")
    import dspy

    lm = dspy.LM("openai/judge-1", api_base=url, api_key="x", cache=False)
    dspy.configure(lm=lm)
    failures: list[str] = []

    class Judge(dspy.Module):  # type: ignore[misc]
        def forward(self, i: int) -> Any:
            messages = [
                {
                    "role": "system",
                    "content": "You grade answers. Answer PASS or FAIL, then one sentence.",
                },
                {
                    "role": "user",
                    "content": f"Question {i}: what is {i} + {i}?\nAnswer: {2 * i}\n"
                    f"Expected: {2 * i}",
                },
            ]
            try:
                text = lm(messages=messages)[0]
            except Exception as exc:  # the benchmark counts what dspy users would see
                failures.append(type(exc).__name__)
                raise
            return dspy.Prediction(verdict=text)

    def metric(example: Any, prediction: Any, trace: Any = None) -> float:
        return float(str(prediction.verdict).startswith("PASS"))

    devset = [dspy.Example(i=i).with_inputs("i") for i in range(n)]
    evaluate = dspy.Evaluate(
        devset=devset,
        metric=metric,
        num_threads=threads,
        display_progress=False,
        max_errors=n + 1,
        provide_traceback=False,
    )
    started = time.perf_counter()
    result = evaluate(Judge())
    wall = time.perf_counter() - started
    ok = n - len(failures)
    kinds = sorted(set(failures))
    print(
        json.dumps(
            {"ok": ok, "errors": len(failures), "kinds": kinds, "wall": wall, "score": result.score}
        )
    )


if __name__ == "__main__":
    main()
