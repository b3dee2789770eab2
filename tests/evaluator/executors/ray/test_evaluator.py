"""An Evaluator with both stages on Ray: results, the report's cluster rows, statistics."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from evaluator import Evaluator
from evaluator._report import report_rows

pytestmark = pytest.mark.usefixtures("ray_cluster")

PROGRAM = """
def run(artifact, input):
    return artifact + str(input["n"] * 2)
"""

METRIC = """
def score(input, output, expected=None):
    good = output == expected["want"]
    return (1.0 if good else 0.0), {"feedback": "right" if good else f"got {output!r}"}
"""


async def test_program_and_metric_on_ray(tmp_path: Path) -> None:
    """Both stages run on the cluster (one connection, two sets of actors); every
    example gets its result, and the report counts nodes, actors and batches."""
    (tmp_path / "program.py").write_text(textwrap.dedent(PROGRAM))
    (tmp_path / "metric.py").write_text(textwrap.dedent(METRIC))
    rows = [
        {"id": f"e{i}", "input": {"n": i}, "expected": {"want": f"x{i * 2 if i % 4 else -1}"}}
        for i in range(40)
    ]
    async with Evaluator(
        tmp_path / "metric.py",
        tmp_path / "program.py",
        execution="ray",
        program_execution="ray",
    ) as ev:
        results = await ev.evaluate_many("x", rows)
        report = await ev.evaluate("x", rows)
        stats = ev.statistics()
    assert [r.example_id for r in results] == [f"e{i}" for i in range(40)]
    assert [r.score for r in results] == [0.0 if i % 4 == 0 else 1.0 for i in range(40)]
    assert report.n == 40 and report.ok == 40 and report.mean_score == 0.75
    cluster = report.cluster
    assert cluster is not None and cluster.nodes == 2 and cluster.actors == 4
    assert sum(cluster.calls_by_node.values()) == 160  # two runs of two stages
    assert cluster.lost_nodes == [] and cluster.calls_requeued == 0
    assert stats.cluster is not None and stats.metric.kind == "ray"
    labels = [label for label, _ in report_rows(report)]
    assert {"ray nodes", "ray actors", "ray batches / calls requeued"} <= set(labels)
