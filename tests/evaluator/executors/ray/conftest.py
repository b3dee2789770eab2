"""One small Ray cluster for the Ray executor's tests: started once, stopped after.

Module-scoped, and the tests that use it are one module: it is stopped before any other
test runs (several count this process's children).

Two nodes of one CPU each (``ray.cluster_utils.Cluster``: a head and a worker node, real
raylets on this machine), on 127.0.0.1 only: the tests reach nothing but loopback. The
driver connects to it with ``ray.init``, so the executors use that connection and ship
the user's folder to the nodes, as they do for any cluster. Skipped when Ray is not
installed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray")
# tests/conftest.py keeps Ray on loopback (set before Ray is imported).
assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0"

#: Each node's object store: the smallest Ray accepts; the tests move kilobytes.
OBJECT_STORE = 80 * 1024 * 1024


def node_args() -> dict[str, Any]:
    return {
        "num_cpus": 1,
        "node_ip_address": "127.0.0.1",
        "object_store_memory": OBJECT_STORE,
        "include_dashboard": False,
    }


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A two-node local cluster (two CPUs in all) with the test process connected."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=node_args())
    try:
        cluster.add_node(**node_args())
        ray.init(address=cluster.address, logging_level=logging.ERROR)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]  # untyped in ray
