"""Churn replays side by side: a plot of their figures over time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kgpu.sim.churn_run import ChurnRun

DAY_S = 86400


def plot_churn(runs: Sequence[ChurnRun], path: Path, title: str | None = None) -> Path:
    """GPU allocation, fragmentation and waiting pods against the trace's time, and the
    distribution of pending times, a line per policy, written as a PNG to ``path``."""
    # Figure with the Agg canvas, not pyplot, as report.plot_curves does and for its reason.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 8), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    (alloc, frag), (waiting, pending) = fig.subplots(2, 2)
    for run in runs:
        r = run.result
        days = r.times / DAY_S
        label = f"{run.policy} ({r.time_avg_alloc_pct:.2f}%)"
        alloc.step(days, 100.0 * r.used_milli / r.total_gpu_milli, where="post", label=label)
        frag.step(days, 100.0 * r.frag_milli / r.total_gpu_milli, where="post", label=run.policy)
        waiting.step(days, r.waiting, where="post", label=run.policy)
        # Waits of 0 s have no place on a log axis: they are the curve's start, at 1 s.
        waits = np.sort(np.maximum(r.waited_s, 1))
        share = np.arange(1, len(waits) + 1) / max(len(waits), 1)
        pending.step(waits, 100.0 * share, where="post", label=run.policy)
    if runs:
        r = runs[0].result
        # What the pods present ask for is the same under every policy: the ceiling.
        asked = 100.0 * r.asked_milli / r.total_gpu_milli
        alloc.step(r.times / DAY_S, asked, where="post", color="grey", linestyle=":", label="asked")
    alloc.set_ylabel("allocated GPUs (% of capacity)")
    alloc.legend(loc="upper left", fontsize="small", title="policy (time average)")
    frag.set_ylabel("fragmentation (% of GPU capacity)")
    waiting.set_ylabel("pods waiting")
    for ax in (alloc, frag, waiting):
        ax.set_xlabel("trace time (days)")
        ax.grid(True, alpha=0.3)
    pending.set_xscale("log")
    pending.set_xlabel("pending time (s; placed at once counts as 1 s)")
    pending.set_ylabel("pods (%)")
    pending.legend(loc="lower right", fontsize="small")
    pending.grid(True, alpha=0.3)
    fig.suptitle(title or "GPU allocation as pods come and go")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
