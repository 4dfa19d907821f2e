"""The ``kgpu`` command line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from kgpu.config import POLICIES, ProfileError
from kgpu.sim.openb import TraceError

console = Console()


def _progress() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    )


@click.group()
@click.version_option(package_name="kgpu")
def main() -> None:
    """kgpu: a GPU-aware batch scheduler for Kubernetes, and its trace simulator."""


@main.group()
def simulate() -> None:
    """Place a workload on a cluster offline, through the same core as the live scheduler."""


@simulate.command("openb")
@click.option("--nodes", "nodes_csv", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--pods", "pods_csv", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--policy", default="kgpu", show_default=True, help=f"one of {', '.join(POLICIES)}")
@click.option("--seed", default=42, show_default=True, type=int)
@click.option(
    "--tune",
    default=1.3,
    show_default=True,
    type=float,
    help="scale the workload to this multiple of the cluster's GPU capacity",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="write the result (curve included) as JSON to this file",
)
def simulate_openb(
    nodes_csv: Path, pods_csv: Path, policy: str, seed: int, tune: float, json_out: Path | None
) -> None:
    """Replay an openb trace (Alibaba cluster-trace-gpu-v2023) as the FGD paper does."""
    from kgpu.sim.openb_run import run_openb

    if tune <= 0:
        raise click.BadParameter(
            f"--tune is {tune}, expected a positive number", param_hint="--tune"
        )
    with _progress() as bar:
        task = bar.add_task(f"{policy} seed {seed}", total=None)
        try:
            run = run_openb(
                nodes_csv,
                pods_csv,
                policy,
                seed,
                tune,
                progress=lambda k: bar.advance(task, k),
                on_start=lambda n: bar.update(task, total=n),
            )
        except (ProfileError, TraceError) as exc:
            raise click.ClickException(str(exc)) from exc
    data = run.to_json()
    console.print(
        f"policy={data['policy']} seed={seed} tune={tune} pods={data['pods']} "
        f"failed={data['failed_pods']} total_gpus={data['total_gpus']} "
        f"final_gpu_alloc={data['final_gpu_alloc_pct']:.2f}% "
        f"frag={data['frag_gpu_pct']:.2f}% elapsed={data['elapsed_s']:.2f}s"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(data, indent=1))
        console.print(f"wrote {json_out}")


@simulate.command("manifests")
@click.argument(
    "directory", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR"
)
@click.option("--policy", default="kgpu", show_default=True, help=f"one of {', '.join(POLICIES)}")
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="write each pod's outcome and each node's free resources as JSON to this file",
)
def simulate_manifests(directory: Path, policy: str, json_out: Path | None) -> None:
    """Place the Nodes and Pods of DIR's *.yaml files; print each pod's node and GPUs, or
    why it is pending. Pending pods are an outcome, not an error: the exit code is 0."""
    from rich.table import Table
    from rich.text import Text

    from kgpu.sim.manifests import ManifestError, PodStatus
    from kgpu.sim.manifests import simulate_manifests as run_manifests

    try:
        run = run_manifests(directory, policy)
    except (ProfileError, ManifestError) as exc:
        raise click.ClickException(str(exc)) from exc
    table = Table("pod", "status", "node", "GPUs", "reason")
    for r in run.results:
        gpus = ",".join(map(str, r.gpus))
        if r.gpus and r.gpu_milli < 1000:
            gpus += f" ({r.gpu_milli / 1000:g} GPU)"
        style = "yellow" if r.status == PodStatus.PENDING else None
        # Text, not str: a message such as "requests[nvidia.com/gpu]" is not rich markup.
        cells = (r.pod, str(r.status), r.node, gpus, r.message)
        table.add_row(*(Text(c) for c in cells), style=style)
    console.print(table)
    pending = sum(r.status == PodStatus.PENDING for r in run.results)
    console.print(
        f"policy={policy} nodes={len(run.state)} pods={len(run.results)} "
        f"placed={len(run.results) - pending} pending={pending}"
    )
    for note in run.notes:
        console.print(f"note: {note}", style="dim", markup=False, highlight=False)
    if json_out is not None:
        json_out.write_text(json.dumps(run.to_json(), indent=1))
        console.print(f"wrote {json_out}")


@simulate.command("workspaces")
@click.option(
    "--nodes",
    "nodes_path",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="Node manifests: a directory of *.yaml files or one file (bound Pods hold GPUs)",
)
@click.option(
    "--workspaces",
    "workspaces_path",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="Workspace manifests (kgpu.io/v1alpha1), placed in file order",
)
@click.option("--profile", default="byo", show_default=True, help="node-group profile or file")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path))
def simulate_workspaces(
    nodes_path: Path, workspaces_path: Path, profile: str, json_out: Path | None
) -> None:
    """Place inference Workspaces on a cluster's GPU node groups; print the group each got,
    the nodes its replicas take, or why it is denied. Denials are an outcome: exit code 0."""
    from kgpu.framework.group_scheduler import DENIAL
    from kgpu.kube.workspace_admission import GroupProfileError
    from kgpu.sim.manifests import ManifestError
    from kgpu.sim.workspaces import Outcome
    from kgpu.sim.workspaces import simulate_workspaces as run_workspaces

    try:
        run = run_workspaces(nodes_path, workspaces_path, profile)
    except (GroupProfileError, ManifestError) as exc:
        raise click.ClickException(str(exc)) from exc
    # Plain lines, not a table: a denial's reasons are long, one per node group.
    out = Console(soft_wrap=True, highlight=False)
    groups = ", ".join(f"{g} x{n}" for g, n in run.groups) or "none"
    out.print(f"node groups: {groups}", markup=False)
    for r in run.results:
        if r.outcome == Outcome.DENIED:
            out.print(f"{r.workspace}: {r.outcome}", style="yellow", markup=False)
            lines = (DENIAL, *r.reasons) if r.reasons else (r.message,)
        else:
            taken = f" on {','.join(r.nodes)}" if r.nodes else ""
            out.print(f"{r.workspace}: {r.outcome}{taken}", markup=False)
            lines = (r.message,)
        for line in lines:
            out.print(f"    {line}", markup=False)
    placed = sum(r.outcome != Outcome.DENIED for r in run.results)
    out.print(
        f"profile={profile} workspaces={len(run.results)} placed={placed} "
        f"denied={len(run.results) - placed}",
        markup=False,
    )
    for note in run.notes:
        out.print(f"note: {note}", style="dim", markup=False)
    if json_out is not None:
        json_out.write_text(json.dumps(run.to_json(), indent=1))
        out.print(f"wrote {json_out}", markup=False)


def _bar_task(bar: Progress, name: str) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """A bar for one replay: what to call per batch of pods, and once the count is known."""
    task = bar.add_task(name, total=None)

    def advance(k: int) -> None:
        bar.advance(task, k)

    def start(n: int) -> None:
        bar.update(task, total=n)

    return advance, start


def _policy_list(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise click.BadParameter("expected at least one policy", param_hint="--policies")
    return names


@main.command()
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
    names = _policy_list(policies)
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
    with _progress() as bar:
        for name in names:
            advance, start = _bar_task(bar, name)
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


if __name__ == "__main__":
    main()
