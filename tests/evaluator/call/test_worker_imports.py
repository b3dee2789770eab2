"""The worker boundary: what a worker process's entry module imports of the engine stays
within the call layer (``evaluator/_call/``) and the few modules named below, and none of
it imports asyncio."""

from __future__ import annotations

import json
import subprocess
import sys

# Besides evaluator._call.*: the package itself and what its __init__ imports (the
# fingerprint's audit hook, which reads the dataset's Selection), the worker's own
# modules, and the routed-SDK request it answers.
ALLOWED = {
    "evaluator",
    "evaluator._call",
    "evaluator._data",
    "evaluator._data._datafile",
    "evaluator._data._dataset",
    "evaluator._exceptions",
    "evaluator._fingerprint",
    "evaluator._executors",
    "evaluator._executors._process",
    "evaluator._executors._process._child",
    "evaluator._executors._process._cut",
    "evaluator._executors._process._relay",
    "evaluator._executors._process._wire",
    "evaluator._sdk",
    "evaluator._sdk._owner",
    "evaluator._sdk._request",
}

_PROBE = """
import json, sys
import evaluator._executors._process._child
print(json.dumps({
    "engine": sorted(m for m in sys.modules if m.split(".")[0] == "evaluator"),
    "asyncio": "asyncio" in sys.modules,
}))
"""


def _worker_imports() -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    loaded: dict[str, object] = json.loads(done.stdout)
    return loaded


def test_worker_entry_imports_only_the_call_layer() -> None:
    """Importing the worker's entry module in a fresh interpreter loads no engine module
    outside the call layer and the allowed few, and does not import asyncio."""
    loaded = _worker_imports()
    engine = set(loaded["engine"])  # type: ignore[call-overload]
    outside = {m for m in engine if not m.startswith("evaluator._call.") and m not in ALLOWED}
    assert not outside, f"a worker imports modules outside the call layer: {sorted(outside)}"
    assert "evaluator._call._calls" in engine  # the probe did import the call layer
    assert loaded["asyncio"] is False
