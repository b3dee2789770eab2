"""The judges plot: two panels side by side.

Left, cost per 1,000 calls against agreement with the reference, the Pareto front marked
(the front uses these two figures only). Right, each judge's agreement with itself over
its repeats: Fleiss' kappa (ICC for numeric scores) with its 95% interval, and the share
of examples whose verdict never flipped; a judge that disagrees with itself cannot agree
reliably with anyone else, so the two panels read together.

Needs the optional ``plot`` extra (matplotlib); drawn off-screen (Agg).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._exceptions import ConfigError

__all__ = ["judges_figure", "plot_judges"]


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'skynet-eval[plot]'") from None
    return plt


def _cost_panel(ax: Any, report: Any) -> None:
    rows = [r for r in report.rows if r.cost_per_1k_usd is not None and r.agreement is not None]
    left_out = [r.label for r in report.rows if r not in rows]
    for row in rows:
        ax.scatter(
            row.cost_per_1k_usd,
            row.agreement,
            s=70,
            zorder=3,
            color="tab:orange" if row.pareto else "tab:blue",
            edgecolor="black" if row.pareto else "none",
        )
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
            row.label,
            (row.cost_per_1k_usd, row.agreement),
            textcoords="offset points",
            xytext=(6, 6),
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
    ax.set_xlabel("cost per 1,000 calls (USD)")
    ax.set_ylabel(f"{metric} with {report.reference}")
    title = "Cost against agreement"
    if left_out:
        title += f"\n(not shown, cost or agreement unknown: {', '.join(left_out)})"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)


def _self_panel(ax: Any, report: Any) -> None:
    coefficient = "Fleiss' kappa" if report.kind == "verdicts" else "ICC(1,1)"
    ax.set_title(f"Self-agreement over {report.repeats} repeats", fontsize=10)
    rows = [r for r in report.rows if r.self_agreement is not None]
    shown = [r for r in rows if r.self_agreement.kappa is not None]
    if not shown:
        why = "needs --repeat 2 or more" if report.repeats < 2 else "no judge scored every repeat"
        ax.text(0.5, 0.5, f"self-agreement {why}", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    ys = list(range(len(shown)))[::-1]  # the table's order, top to bottom
    for y, row in zip(ys, shown, strict=True):
        s = row.self_agreement
        ax.scatter(s.kappa, y, s=60, zorder=3, color="tab:green")
        if s.kappa_ci is not None:
            lo, hi = s.kappa_ci
            ax.hlines(y, lo, hi, color="grey", alpha=0.7, zorder=2)
        if s.stable is not None:
            ax.scatter(
                s.stable, y, s=60, zorder=3, marker="D", facecolor="none", color="tab:purple"
            )
    ax.scatter([], [], color="tab:green", label=f"{coefficient} [95% CI]")
    ax.scatter([], [], marker="D", facecolor="none", color="tab:purple", label="never flips")
    ax.set_yticks(ys, [r.label for r in shown])
    low = min([0.0, *(r.self_agreement.kappa_ci[0] for r in shown if r.self_agreement.kappa_ci)])
    ax.set_xlim(low - 0.05, 1.05)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.set_xlabel(f"{coefficient}; share of examples that never flip")
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)


def judges_figure(report: Any) -> Any:
    """The two-panel matplotlib Figure of a JudgesReport (the caller closes it)."""
    plt = _pyplot()
    fig, (cost_ax, self_ax) = plt.subplots(
        1, 2, figsize=(12, 4.8), dpi=120, gridspec_kw={"width_ratios": [3, 2]}
    )
    _cost_panel(cost_ax, report)
    _self_panel(self_ax, report)
    times = f" x {report.repeats} repeats" if report.repeats > 1 else ""
    fig.suptitle(f"Judge models on {report.examples} examples{times}", fontsize=11)
    fig.tight_layout()
    return fig


def plot_judges(report: Any, path: str | Path) -> None:
    """Draw the report to ``path`` (PNG, SVG, PDF: by its suffix)."""
    plt = _pyplot()
    fig = judges_figure(report)
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)
