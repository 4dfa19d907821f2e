"""`kgpu simulate`: place a workload offline, through the same core as the live scheduler."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource
from rich.console import Console

from kgpu.cli.common import bar_task, console, policy_list, progress_bar
from kgpu.config import POLICIES, ProfileError
from kgpu.sim.churn_trace import PHASES
from kgpu.sim.openb import TraceError

if TYPE_CHECKING:
    from kgpu.sim.manifest_results import ManifestRun


@click.group()
def simulate() -> None:
    """Place a workload on a cluster offline, through the same core as the live scheduler."""


@simulate.command("openb")
@click.option("--nodes", "nodes_csv", required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--pods", "pods_csv", required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--policy",
    default="kgpu",
    show_default=True,
    help=f"one of {', '.join(POLICIES)}; with --churn, a comma-separated list or 'all'",
)
@click.option("--seed", default=42, show_default=True, type=int)
@click.option(
    "--tune",
    default=1.3,
    show_default=True,
    type=float,
    help="scale the workload to this multiple of the cluster's GPU capacity (not with --churn)",
)
@click.option(
    "--churn",
    is_flag=True,
    help="replay arrivals and departures at the trace's creation_time and deletion_time "
    "(see above)",
)
@click.option(
    "--node-share",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="with --churn: replay on a seeded sample of this share of the nodes",
)
@click.option(
    "--phases",
    default=",".join(PHASES),
    show_default=True,
    help="with --churn: replay the pods whose pod_phase is one of these (pods without a "
    "phase always)",
)
@click.option(
    "--defrag",
    is_flag=True,
    help="with --churn: turn on the policies' defragmentation switch (move best-effort "
    "pods so that waiting GPU pods fit; docs/POLICY.md)",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="write the result (curve or series included) as JSON to this file",
)
@click.option(
    "--plot",
    "plot_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="write a plot to this folder: allocation.png, or churn.png with --churn",
)
def simulate_openb(
    nodes_csv: Path,
    pods_csv: Path,
    policy: str,
    seed: int,
    tune: float,
    churn: bool,
    node_share: float,
    phases: str,
    defrag: bool,
    json_out: Path | None,
    plot_dir: Path | None,
) -> None:
    """Replay an openb trace (Alibaba cluster-trace-gpu-v2023) as the FGD paper does:
    pods tuned to --tune x the GPUs arrive in a seeded order and never leave; a pod that
    fits nowhere is dropped.

    With --churn, pods come and go on the trace's clock instead: each arrives at its
    creation_time and is deleted at its deletion_time, whether it was placed or is still
    waiting; at the same second departures come before arrivals. A pod without a
    deletion_time stays to the end; one deleted the second it was created is not
    scheduled. Every phase is replayed by default, since pod_phase is what the trace's own
    scheduler made of the pod (Failed pods ran, Pending ones never did); --phases leaves
    some out. A pod that fits nowhere waits in a queue retried whenever a departure frees
    something: highest priority first (openb pods have none), then first come, first
    tried; one that does not fit does not hold back the others. Its pending time runs from
    its arrival to its placement, its deletion, or the end of the replay. Reported per
    policy: allocation over time, averaged over time from the first arrival to the last
    event, pending time p50 and p99, and fragmentation (FGD's) over time (docs/POLICY.md).
    On the whole openb node list the trace's pods never ask for more than about 1% of the
    GPUs at once, so nothing waits: --node-share 0.005 makes them contend. --defrag moves
    best-effort pods (qos BE) so that waiting GPU pods fit, and reports the moves and
    their cost.
    """
    if churn:
        _simulate_churn(
            nodes_csv, pods_csv, policy, seed, node_share, phases, defrag, json_out, plot_dir
        )
        return
    from kgpu.sim.openb_run import run_openb

    source = click.get_current_context().get_parameter_source
    for name in ("node_share", "phases", "defrag"):
        if source(name) != ParameterSource.DEFAULT:
            flag = "--" + name.replace("_", "-")
            raise click.BadParameter("applies to --churn only", param_hint=flag)
    if tune <= 0:
        raise click.BadParameter(
            f"--tune is {tune}, expected a positive number", param_hint="--tune"
        )
    with progress_bar() as bar:
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
    if plot_dir is not None:
        from kgpu.sim.report import plot_curves

        png = plot_curves([run], plot_dir / "allocation.png", title=f"{pods_csv.name}, seed {seed}")
        console.print(f"wrote {png}")


def _simulate_churn(
    nodes_csv: Path,
    pods_csv: Path,
    policy: str,
    seed: int,
    node_share: float,
    phases: str,
    defrag: bool,
    json_out: Path | None,
    plot_dir: Path | None,
) -> None:
    """``simulate openb --churn``: one churn replay per policy, figures and plot."""
    from kgpu.config import load_profile
    from kgpu.sim.churn_report import plot_churn
    from kgpu.sim.churn_run import run_churn
    from kgpu.sim.churn_trace import parse_phases, read_timed_pods
    from kgpu.sim.openb import read_nodes

    if click.get_current_context().get_parameter_source("tune") != ParameterSource.DEFAULT:
        raise click.BadParameter(
            "does not apply to --churn, which replays the trace's own pods and times "
            "(--node-share makes the cluster smaller instead)",
            param_hint="--tune",
        )
    try:
        kept = parse_phases(phases)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--phases") from None
    names = list(POLICIES) if policy.strip() == "all" else policy_list(policy)
    try:
        for name in names:
            load_profile(name)  # fail on a bad name before any replay
        nodes = read_nodes(nodes_csv)
        trace = read_timed_pods(pods_csv)
    except (ProfileError, TraceError) as exc:
        raise click.ClickException(str(exc)) from exc
    runs = []
    with progress_bar() as bar:
        for name in names:
            advance, start = bar_task(bar, f"{name} seed {seed}")
            runs.append(
                run_churn(nodes, trace, name, seed, node_share, kept, advance, start, defrag)
            )
    for run in runs:
        s = run.summary()
        console.print(
            f"policy={s['policy']} seed={seed} churn node_share={node_share:g} "
            f"nodes={s['nodes']} total_gpus={s['total_gpus']} pods={s['pods']} "
            f"left_out={s['left_out_pods']} placed_late={s['placed_after_waiting']} "
            f"withdrawn={s['withdrawn_while_waiting']} waiting_at_end={s['waiting_at_end']} "
            f"time_avg_gpu_alloc={s['time_avg_gpu_alloc_pct']:.2f}% "
            f"asked={s['time_avg_gpu_asked_pct']:.2f}% "
            f"frag={s['time_avg_frag_gpu_pct']:.2f}% "
            f"pending_p50={s['pending_p50_s']:g}s pending_p99={s['pending_p99_s']:g}s "
            + (
                f"moves={s['defrag_moves']} moved_pods={s['defrag_moved_pods']} "
                f"placed_by_moves={s['defrag_placed']} "
                f"move_cost={s['defrag_move_cost_gpu_h']:g}GPUh "
                if "defrag_moves" in s
                else ""
            )
            + f"elapsed={s['elapsed_s']:.2f}s",
            soft_wrap=True,
        )
    if json_out is not None:
        data = {
            "churn": True,
            "seed": seed,
            "node_share": node_share,
            "phases": sorted(kept),
            "runs": [run.to_json() for run in runs],
        }
        json_out.write_text(json.dumps(data, indent=1))
        console.print(f"wrote {json_out}")
    if plot_dir is not None:
        title = f"{pods_csv.name}, {runs[0].nodes} nodes, seed {seed}"
        console.print(f"wrote {plot_churn(runs, plot_dir / 'churn.png', title=title)}")


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
@click.option(
    "--explain",
    "explain_pod",
    metavar="POD",
    help="after placing, explain POD (name or namespace/name) as `kgpu explain` does",
)
def simulate_manifests(
    directory: Path, policy: str, json_out: Path | None, explain_pod: str | None
) -> None:
    """Place the Nodes and Pods of DIR's *.yaml files; print each pod's node and GPUs, or
    why it is pending. With kgpu Queues or PodGroups among them, one session places the
    pods as `kgpu run` would (quotas, gangs, preemption and reclaim: pods are also
    Nominated or Evicted). Pending pods are an outcome, not an error: the exit code is 0."""
    from rich.table import Table
    from rich.text import Text

    from kgpu.kube.api.printable import printable
    from kgpu.sim.manifest_results import PodStatus
    from kgpu.sim.manifests import ManifestError
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
        style = {PodStatus.PENDING: "yellow", PodStatus.EVICTED: "red"}.get(r.status)
        # Text, not str: a message such as "requests[nvidia.com/gpu]" is not rich markup;
        # names and messages are the objects' text, escaped (kgpu.kube.api.printable).
        cells = (r.pod, str(r.status), r.node, gpus, r.message)
        table.add_row(*(Text(printable(c)) for c in cells), style=style)
    console.print(table)
    for r in run.results:
        if r.device_allocated:  # what koordlet would read on the pod
            line = f"{r.pod}: scheduling.koordinator.sh/device-allocated {r.device_allocated}"
            console.print(printable(line), markup=False, highlight=False)
        for line in r.resource_claims:  # DRA: what the claim's status.allocation would say
            console.print(printable(f"{r.pod}: claim {line}"), markup=False, highlight=False)
    count = Counter(r.status for r in run.results)
    placed = count[PodStatus.RUNNING] + count[PodStatus.SCHEDULED]
    moved = (
        f" nominated={count[PodStatus.NOMINATED]} evicted={count[PodStatus.EVICTED]}"
        if count[PodStatus.NOMINATED] or count[PodStatus.EVICTED]
        else ""
    )
    console.print(
        f"policy={policy} nodes={len(run.state)} pods={len(run.results)} "
        f"placed={placed} pending={count[PodStatus.PENDING]}{moved}"
    )
    for note in run.notes:
        console.print(f"note: {printable(note)}", style="dim", markup=False, highlight=False)
    if json_out is not None:
        json_out.write_text(json.dumps(run.to_json(), indent=1))
        console.print(f"wrote {json_out}")
    if explain_pod is not None:
        for line in _explain_simulated(directory, policy, run, explain_pod):
            click.echo(line)


def _explain_simulated(directory: Path, policy: str, run: ManifestRun, pod: str) -> list[str]:
    """``--explain``: the pod's answer against the cluster as the simulation left it."""
    from kgpu.config import load_profile
    from kgpu.kube.explain.explanation import explain_bound, explain_object, explain_unreadable
    from kgpu.kube.objects.node_pod import object_ref
    from kgpu.plugins.registry import PluginContext
    from kgpu.sim.manifest_dra import dra_scheduler
    from kgpu.sim.manifest_results import PodStatus
    from kgpu.sim.manifests import read_documents

    key = pod if "/" in pod else f"default/{pod}"
    result = next((r for r in run.results if r.pod == key), None)
    if result is None:
        raise click.ClickException(f"no Pod {key} in {directory}")
    if result.status == PodStatus.EVICTED:
        return [f"Pod {key} is evicted: {result.message}."]
    if result.status == PodStatus.NOMINATED:
        where = explain_bound(key, result.node, result.gpus, result.gpu_milli).lines()[0]
        return [f"{where.removesuffix('.')}, once the pods evicted for its job are gone."]
    if result.status != PodStatus.PENDING:
        return explain_bound(key, result.node, result.gpus, result.gpu_milli).lines()
    # A pod the simulation could not read (a malformed request, an unknown PriorityClass,
    # a duplicate) carries that message, which starts with the pod's name.
    if result.message.startswith(f"Pod {key}"):
        return explain_unreadable(key, result.message).lines()
    doc = next(
        d
        for d in read_documents(directory)
        if d.kind == "Pod" and object_ref("Pod", d.obj) == f"Pod {key}"
    )
    scheduler = dra_scheduler(load_profile(policy), PluginContext(dra=run.dra))
    lines = explain_object(run.state, doc.obj, scheduler, None).lines()
    # A session's reason may be the queue's or the gang's, which the nodes do not show.
    return [f"Pod {key} waits: {result.message}", *lines] if run.session else lines


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
    from kgpu.kube.workspaces.placement_check import GroupProfileError
    from kgpu.sim.manifests import ManifestError
    from kgpu.sim.workspaces import WorkspaceOutcome
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
        if r.outcome == WorkspaceOutcome.DENIED:
            out.print(f"{r.workspace}: {r.outcome}", style="yellow", markup=False)
            lines = (DENIAL, *r.reasons) if r.reasons else (r.message,)
        else:
            taken = f" on {','.join(r.nodes)}" if r.nodes else ""
            out.print(f"{r.workspace}: {r.outcome}{taken}", markup=False)
            lines = (r.message,)
        for line in lines:
            out.print(f"    {line}", markup=False)
    placed = sum(r.outcome != WorkspaceOutcome.DENIED for r in run.results)
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


@simulate.command("autoscale")
@click.option(
    "--nodepool",
    "nodepool_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Karpenter NodePool YAML (and kgpu InstanceType documents) to launch nodes from; "
    "default: one pool of p4de.24xlarge (8 x A100 80GB)",
)
@click.option("--policy", default="kgpu", show_default=True, help=f"one of {', '.join(POLICIES)}")
@click.option(
    "--launch-delay",
    default=105.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="seconds from a NodeClaim's creation to its node being Ready",
)
@click.option(
    "--fail-launches",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="make the first N NodeClaims fail to launch (insufficient capacity)",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="write each pod's wait, the new nodes and the triggers as JSON to this file",
)
@click.option(
    "--dra",
    is_flag=True,
    help="GPUs published through DRA (ResourceSlices) and pods that claim them in "
    "ResourceClaims: 10 pods of 4 GPUs of the pool's model and 8 of one GPU arrive",
)
def simulate_autoscale(
    nodepool_file: Path | None,
    policy: str,
    launch_delay: float,
    fail_launches: int,
    json_out: Path | None,
    dra: bool,
) -> None:
    """40 pods of 0.5 GPU and 10 pods of 4 GPUs arrive at a full cluster: kgpu plans trigger
    pods, a Karpenter model launches nodes from the NodePool, and the table shows how long
    each pod waited and where it runs. With --dra the pods ask for GPUs through
    ResourceClaims, which Karpenter cannot see: kgpu's triggers stand for them."""
    from rich.table import Table

    from kgpu.autoscale.demand import UnplacedPod
    from kgpu.kube.anchors.karpenter import NodePoolError
    from kgpu.sim.autoscale_dra import dra_cluster_scenario
    from kgpu.sim.autoscale_run import (
        Arrival,
        default_pools,
        full_cluster_scenario,
        load_nodepools,
    )
    from kgpu.sim.autoscale_run import simulate_autoscale as run_autoscale
    from kgpu.sim.provisioner import LaunchTimes

    try:
        pools = load_nodepools(nodepool_file) if nodepool_file else default_pools()
        inventory = None
        if dra:
            nodes, running, claiming, inventory = dra_cluster_scenario(pools)
            arrivals = [Arrival(0.0, UnplacedPod(p)) for p in claiming]
        else:
            nodes, running, arrivals = full_cluster_scenario(pools)
        run = run_autoscale(
            nodes,
            running,
            arrivals,
            pools,
            policy=policy,
            launch=LaunchTimes.until_ready(launch_delay),
            fail_first=fail_launches,
            dra=inventory,
        )
    except (ProfileError, NodePoolError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    table = Table("pod", "GPUs", "node", "waited s")
    for p in run.pods:
        waited = "pending" if p.waited is None else f"{p.waited:.1f}"
        table.add_row(p.pod, p.gpus, p.node, waited)
    console.print(table)
    for name, ok, seconds, detail in run.outcomes:
        verdict = "ready" if ok else "failed"
        line = f"trigger {name}: {verdict} after {seconds:.1f}s ({detail})"
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"existing_nodes={len(nodes)} " + run.summary(), markup=False, soft_wrap=True)
    if json_out is not None:
        json_out.write_text(json.dumps(run.to_json(), indent=1))
        console.print(f"wrote {json_out}")


@simulate.command("tenants")
@click.option(
    "--nodes",
    "node_count",
    default=8,
    show_default=True,
    type=click.IntRange(1),
    help="8-GPU nodes in the cluster",
)
@click.option(
    "--deserved",
    default="60,40",
    show_default=True,
    help="deserved % of the cluster's GPUs for queues a and b",
)
@click.option(
    "--b-from",
    "b_from",
    default=10,
    show_default=True,
    type=click.IntRange(0),
    help="the cycle at which queue b starts submitting (a borrows until then)",
)
@click.option("--cycles", default=30, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=5, show_default=True, type=int)
@click.option(
    "--out",
    "out_png",
    default=Path("out/tenants.png"),
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
)
def simulate_tenants_cmd(
    node_count: int, deserved: str, b_from: int, cycles: int, seed: int, out_png: Path
) -> None:
    """Two teams share a saturated cluster through queues: see each queue's GPU share per
    cycle converge to its fair share, and an idle queue win its share back by reclaim."""
    from kgpu.config import load_profile
    from kgpu.model.queue import QueueSpec
    from kgpu.plugins.registry import build_scheduler
    from kgpu.sim.tenants import Tenant, gpu_cluster, plot_tenants, simulate_tenants

    try:
        pct_a, pct_b = (int(v) for v in deserved.split(","))
    except ValueError:
        raise click.BadParameter(
            f"is {deserved!r}, expected two whole percentages like 60,40", param_hint="--deserved"
        ) from None
    if pct_a < 0 or pct_b < 0 or pct_a + pct_b > 100:
        raise click.BadParameter(
            f"is {deserved!r}, expected two percentages that add up to at most 100",
            param_hint="--deserved",
        )
    total = node_count * 8 * 1000
    tenants = [
        Tenant(
            QueueSpec("a", deserved={"gpu": total * pct_a // 100}),
            pods=2,
            min_member=2,
            durations=(20, 30),
        ),
        Tenant(
            QueueSpec("b", deserved={"gpu": total * pct_b // 100}),
            gpu_milli=500,
            cpu_milli=2000,
            active=(b_from, 1 << 30),
            durations=(20, 30),
        ),
    ]
    result = simulate_tenants(
        gpu_cluster(node_count),
        tenants,
        cycles,
        build_scheduler(load_profile("bestfit")),
        seed=seed,
    )
    for cycle in range(cycles):
        console.print(
            f"cycle {cycle:3d}: a holds {100 * result.share['a'][cycle]:5.1f}% "
            f"(fair {100 * result.fair['a'][cycle]:5.1f}%), "
            f"b holds {100 * result.share['b'][cycle]:5.1f}% "
            f"(fair {100 * result.fair['b'][cycle]:5.1f}%), "
            f"evictions {result.evictions[cycle]}"
        )
    out_png.parent.mkdir(parents=True, exist_ok=True)
    plot_tenants(result, out_png)
    console.print(f"wrote {out_png}")
