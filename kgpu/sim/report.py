"""Reports of replays side by side: a table per policy and a plot of allocation curves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from kgpu.sim.openb_run import OpenbRun


def results_table(runs: Sequence[OpenbRun], title: str | None = None) -> Table:
    """One row per replay, in the order given; the best final allocation is in bold."""
    table = Table(title=title)
    table.add_column("policy")
    table.add_column("pods", justify="right")
    table.add_column("failed", justify="right")
    table.add_column("GPU alloc %", justify="right")
    table.add_column("frag %", justify="right")
    table.add_column("elapsed s", justify="right")
    best = max((r.result.final_alloc_pct for r in runs), default=None)
    for run in runs:
        alloc = f"{run.result.final_alloc_pct:.2f}"
        table.add_row(
            run.policy,
            str(run.result.pods),
            str(run.result.failed),
            f"[bold]{alloc}[/bold]" if run.result.final_alloc_pct == best else alloc,
            f"{run.frag_pct:.2f}",
            f"{run.result.elapsed_s:.2f}",
        )
    return table


def plot_curves(runs: Sequence[OpenbRun], path: Path, title: str | None = None) -> Path:
    """Allocation (% of GPU capacity) against arrived GPU workload (%), a line per policy,
    written as a PNG to ``path``: the whole replay on the left, its tail on the right."""
    # Figure with the Agg canvas, not pyplot: pyplot keeps global figures and picks a
    # backend from the environment, neither of which a command line run wants.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    whole, tail = fig.subplots(1, 2, width_ratios=[3, 2])
    curves = [(run, run.result.curve()) for run in runs]
    curves = [(run, c) for run, c in curves if c]
    right = max([100, *(c[-1][0] for _, c in curves)])
    # Policies part only once the cluster is nearly full, where the lines would overlap
    # at full scale; the tail panel zooms there.
    zoom_from = 80
    low = min([100.0, *(y for _, c in curves for x, y in c if x >= zoom_from)])
    for run, curve in curves:
        xs, ys = zip(*curve, strict=True)
        label = f"{run.policy} ({run.result.final_alloc_pct:.2f}%)"
        for ax in (whole, tail):
            ax.plot(xs, ys, label=label, linewidth=1.4)
    for ax in (whole, tail):
        ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1, label="all placed")
        ax.axvline(100, color="grey", linewidth=0.6)
        ax.set_xlabel("arrived GPU workload (% of cluster GPU capacity)")
        ax.grid(True, alpha=0.3)
    whole.set_xlim(0, right)
    whole.set_ylim(0, 100)
    whole.set_ylabel("allocated GPUs (% of capacity)")
    whole.set_title("whole replay")
    whole.legend(loc="lower right", fontsize="small", title="policy (final)")
    tail.set_xlim(zoom_from, right)
    tail.set_ylim(max(0.0, low - 1), 100)
    tail.set_title(f"from {zoom_from}% arrived")
    fig.suptitle(title or "GPU allocation as the workload arrives")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
