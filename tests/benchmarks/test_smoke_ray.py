"""`benchmarks/bench_ray.py --smoke` runs end to end and prints its ratios (not timed).

Apart from ``test_smoke.py``: it needs Ray (skipped without it) and takes about half a
minute on two cores (a local instance, then a three-node simulated cluster).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

# A real Ray instance or cluster (the mark implies slow).
pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None, reason="needs Ray (the extra `ray`)"
    ),
]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.timeout(300)
def test_bench_ray_smoke() -> None:
    """`python benchmarks/bench_ray.py --smoke` exits 0, loses nothing, leaves nothing."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_ray.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "labelled otherwise: 0" in done.stdout
    assert "processes left on the cluster: 0" in done.stdout
