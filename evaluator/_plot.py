"""The judges plot: cost per 1,000 examples against agreement, Pareto front marked.

Needs the optional ``plot`` extra (matplotlib); drawn off-screen (Agg).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._exceptions import ConfigError


def plot_judges(report: Any, path: str | Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'skynet-eval[plot]'") from None
    rows = [r for r in report.rows if r.cost_per_1k_usd is not None and r.agreement is not None]
    left_out = [r.model for r in report.rows if r not in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for row in rows:
        ax.scatter(
            row.cost_per_1k_usd,
            row.agreement,
            s=70,
            zorder=3,
            color="tab:orange" if row.pareto else "tab:blue",
            edgecolor="black" if row.pareto else "none",
        )
        label = row.model
        if row.agreement_ci is not None:
            lo, hi = row.agreement_ci
            ax.errorbar(
                row.cost_per_1k_usd,
                row.agreement,
                yerr=[[row.agreement - lo], [hi - row.agreement]],
                fmt="none",
                ecolor="grey",
                alpha=0.6,
                zorder=2,
            )
        ax.annotate(
            label, (row.cost_per_1k_usd, row.agreement), textcoords="offset points", xytext=(6, 6)
        )
    front = sorted((r for r in rows if r.pareto), key=lambda r: r.cost_per_1k_usd)
    if len(front) > 1:
        ax.plot(
            [r.cost_per_1k_usd for r in front],
            [r.agreement for r in front],
            linestyle="--",
            color="tab:orange",
            label="Pareto front",
            zorder=1,
        )
        ax.legend(loc="lower right")
    costs = [r.cost_per_1k_usd for r in rows if r.cost_per_1k_usd]
    if costs and max(costs) / min(costs) > 20:
        ax.set_xscale("log")  # judge prices span orders of magnitude
    ax.margins(x=0.15, y=0.1)
    metric = "agreement" if report.kind == "verdicts" else "Pearson r"
    ax.set_xlabel("cost per 1,000 examples (USD)")
    ax.set_ylabel(f"{metric} with {report.reference}")
    title = "Judge models: cost against agreement"
    if left_out:
        title += f"\n(not shown, cost or agreement unknown: {', '.join(left_out)})"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
