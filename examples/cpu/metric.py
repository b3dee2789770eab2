"""A CPU-bound metric: run each generated `solve(n)` against unit tests.

Each row's output is the source of a function; the metric executes it in the worker
(never in the engine) against the row's tests, with a few hundred milliseconds of pure
Python per example, the kind of metric that outgrows one machine's cores.

    skynet-eval run --metric examples/cpu/metric.py --data examples/cpu/data.jsonl
    skynet-eval run --metric examples/cpu/metric.py --data examples/cpu/data.jsonl --execution ray
"""


def _checks(solve, tests):
    passed = 0
    for n, want in tests:
        if solve(n) == want:
            passed += 1
    return passed


def score(input, output, expected=None):
    namespace = {}
    try:
        exec(compile(output, "<candidate>", "exec"), namespace)
    except SyntaxError as exc:
        return 0.0, {"feedback": f"the candidate does not compile: {exc.msg} (line {exc.lineno})"}
    solve = namespace.get("solve")
    if not callable(solve):
        return 0.0, {"feedback": "the candidate defines no solve(n)"}
    tests = [tuple(t) for t in expected["tests"]]
    passed = _checks(solve, tests)
    return passed / len(tests), {
        "feedback": f"{passed} of {len(tests)} tests pass",
        "scores": {"all_pass": float(passed == len(tests))},
    }
