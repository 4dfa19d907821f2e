"""`kgpu demo`: every policy on a built-in synthetic cluster and workload."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kgpu.cli.common import bar_task, console, policy_list, progress_bar
from kgpu.config import POLICIES, ProfileError


@click.command()
@click.option(
    "--out",
    "out_dir",
    default=Path("out/demo"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="folder for allocation.png and results.json",
)
@click.option("--nodes", "node_count", default=400, show_default=True, type=click.IntRange(1))
@click.option("--pods", "pod_count", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=42, show_default=True, type=int)
@click.option(
    "--policies",
    default=",".join(POLICIES),
    show_default=True,
    help="comma-separated policies (built-in names or profile YAML files)",
)
def demo(out_dir: Path, node_count: int, pod_count: int, seed: int, policies: str) -> None:
    """Replay a built-in synthetic cluster and workload under each policy, as the FGD paper
    does with its trace (workload arriving up to 130% of GPU capacity); print a table and
    write a plot of allocation against arrived workload."""
    from kgpu.config import load_profile
    from kgpu.sim.openb_run import run_trace
    from kgpu.sim.report import plot_curves, results_table
    from kgpu.sim.synthetic import synthetic_nodes, synthetic_pods

    tune = 1.3
    names = policy_list(policies)
    try:
        for name in names:
            load_profile(name)  # fail on a bad name before minutes of replays
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from exc
    nodes = synthetic_nodes(node_count, seed)
    trace = synthetic_pods(pod_count, seed)
    gpus = sum(n.gpu_count for n in nodes)
    console.print(
        f"synthetic: {len(nodes)} nodes, {gpus} GPUs, {len(trace)} pods "
        f"tuned to {tune:.0%} of GPUs, seed {seed}"
    )
    runs = []
    with progress_bar() as bar:
        for name in names:
            advance, start = bar_task(bar, name)
            runs.append(run_trace(nodes, trace, name, seed, tune, advance, start))
    console.print(results_table(runs, title="final GPU allocation and fragmentation"))
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_curves(
        runs, out_dir / "allocation.png", title=f"{len(nodes)} nodes, {gpus} GPUs, seed {seed}"
    )
    data = {
        "cluster": {"nodes": len(nodes), "gpus": gpus},
        "workload": {"pods": len(trace), "seed": seed, "tune": tune},
        "runs": [run.to_json() for run in runs],
    }
    results = out_dir / "results.json"
    results.write_text(json.dumps(data, indent=1))
    console.print(f"wrote {png} and {results}")
