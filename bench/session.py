"""One scheduling session at scale: 5,000 nodes, 200 queues, 50,000 running and 20,000 pending.

    .venv/bin/python bench/session.py [--nodes 5000] [--running 50000] [--pending 20000]
                                      [--mix steady|burst] [--policy bestfit] [--seed 1]
                                      [--cycles 4] [--churn 0.01]

Builds a snapshot and times sessions over it: open (group pods into jobs, account every
queue, compute the fair shares of the tree), the default actions (enqueue, allocate,
backfill, reclaim, preempt) and close (pending reasons, events). The first session meets
the snapshot cold; then, cycle after cycle, its decisions are carried out (binds start
pods, evictions stop them), 1% of the running jobs end and as many new pods arrive, and
the next session runs: the later cycles are the steady state. Building the snapshot is
not timed. Prints each session's time, step by step, and what it decided, and the
process's peak resident memory while it ran (:mod:`peak_memory`, Linux: the snapshot
included, since the session holds it).

Target: at most 1 s a session (KAI publishes a 2.35 s cycle at 4,000 nodes and 140,000
pods).

Cluster: 8-GPU nodes, a third each A100, V100 and T4 (with GFD product labels), 64 to 128
cores. Queues: 4 organisations × 4 departments × 180 teams spread over them (200 queues,
3 levels), deserved GPUs drawn in proportion to random weights and summing to the
cluster, some limits, over-quota weights 1 to 3, half the teams with a 10-minute
min-runtime. Running pods (jobs of 1 to 8 pods, a third of them gangs) go first fit onto
the nodes, spread over the teams as ``build_snapshot`` says; pending jobs are drawn the
same way from every team alike, a tenth of them at a higher priority, so that allocate,
reclaim and preempt all have work. See ``MIXES`` for the two pod mixes.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from kgpu import core_build
from kgpu.actions.session_runner import SessionConfig, run_session
from kgpu.config import load_profile
from kgpu.framework.session_result import SessionResult
from kgpu.framework.session_snapshot import Snapshot
from kgpu.model.fair_share import fair_shares
from kgpu.model.gpu import NO_GPU, GpuRequest, gpu_share, whole_gpus
from kgpu.model.job import JobKey, JobSpec, Task
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.queue import QueueSpec, QueueTree
from kgpu.model.resources import add
from kgpu.plugins.node.gpu_slots import lowest_idle_gpus, tightest_gpu
from kgpu.plugins.registry import build_scheduler
from kgpu.state.cluster import ClusterState

MODELS = ("NVIDIA-A100-80GB", "Tesla-V100-32GB", "Tesla-T4")
# (share of the pods, GPU request, CPU milli). "steady": about 0.79 GPU a pod, so 50,000
# running pods fill the cluster's 40,000 GPUs as far as first fit goes (~97%), and the
# session binds only what fits in the crumbs left. "burst": about 0.65 GPU a pod, so the
# cluster starts at ~82% and the session binds some 12,000 pods.
MIXES: dict[str, tuple[tuple[float, GpuRequest, int], ...]] = {
    "steady": (
        (0.20, NO_GPU, 4000),
        (0.25, gpu_share(500), 4000),
        (0.10, gpu_share(250), 2000),
        (0.32, whole_gpus(1), 8000),
        (0.10, whole_gpus(2), 16000),
        (0.03, whole_gpus(4), 32000),
    ),
    "burst": (
        (0.25, NO_GPU, 4000),
        (0.25, gpu_share(500), 4000),
        (0.15, gpu_share(250), 2000),
        (0.25, whole_gpus(1), 8000),
        (0.08, whole_gpus(2), 16000),
        (0.02, whole_gpus(4), 32000),
    ),
}


def build_nodes(count: int, rng: np.random.Generator) -> list[NodeInfo]:
    nodes = []
    for i in range(count):
        model = MODELS[i % 3]
        nodes.append(
            NodeInfo(
                name=NodeName(f"node-{i:05d}"),
                cpu_milli=int(rng.choice([64, 96, 128])) * 1000,
                memory_mib=1024 * 1024,
                gpu_count=8,
                gpu_model=model,
                gpu_memory_mib=81920,
                labels={"nvidia.com/gpu.product": model},
            )
        )
    return nodes


def build_queues(capacity_gpu_milli: int, rng: np.random.Generator) -> list[QueueSpec]:
    queues = []
    teams: list[tuple[str, str]] = []
    for o in range(4):
        queues.append(QueueSpec(f"org-{o}", over_quota_weight={"gpu": float(o % 3 + 1)}))
        for d in range(4):
            queues.append(QueueSpec(f"org-{o}-dept-{d}", parent=f"org-{o}"))
    depts = [q.name for q in queues if q.parent]
    for t in range(180):
        teams.append((f"team-{t:03d}", depts[t % len(depts)]))
    weights = rng.uniform(0.2, 1.0, len(teams))
    weights /= weights.sum()
    for (name, parent), w in zip(teams, weights, strict=True):
        deserved = int(capacity_gpu_milli * w)
        limit = {"gpu": deserved * 3} if rng.random() < 0.3 else {}
        queues.append(
            QueueSpec(
                name,
                parent=parent,
                deserved={"gpu": deserved},
                limit=limit,
                over_quota_weight={"gpu": float(rng.integers(1, 4))},
                min_runtime_s=float(rng.choice([0, 600])),
            )
        )
    # Parents deserve what their children do, so the quotas hold at every level.
    by_name = {q.name: q for q in queues}
    sums: dict[str, int] = {}
    for q in queues:
        if q.name.startswith("team-"):
            parent = q.parent
            while parent:
                sums[parent] = sums.get(parent, 0) + q.deserved["gpu"]
                parent = by_name[parent].parent
    return [
        QueueSpec(q.name, q.parent, {"gpu": sums[q.name]}, q.limit, q.over_quota_weight)
        if q.name in sums
        else q
        for q in queues
    ]


def draw_jobs(
    count_pods: int,
    teams: Sequence[str],
    weights: Sequence[float] | npt.NDArray[np.float64],
    mix: str,
    rng: np.random.Generator,
    prefix: str,
    high_share: float,
) -> tuple[list[JobSpec], list[PodSpec], list[JobKey]]:
    shapes = MIXES[mix]
    shares = np.array([s[0] for s in shapes])
    p_team = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
    jobs: list[JobSpec] = []
    pods: list[PodSpec] = []
    owners: list[JobKey] = []
    n = 0
    while len(pods) < count_pods:
        shape = shapes[int(rng.choice(len(shapes), p=shares / shares.sum()))]
        size = int(rng.choice([1, 1, 1, 2, 4, 8]))
        gang = rng.random() < 0.33
        team = teams[int(rng.choice(len(teams), p=p_team))]
        key = JobKey(f"{team}/{prefix}-{n}")
        priority = 100 if rng.random() < high_share else 0
        jobs.append(JobSpec(key, team, size if gang else 1, 0, priority, float(n)))
        for i in range(size):
            pods.append(
                PodSpec(
                    key=PodKey(f"{key}-{i}"),
                    cpu_milli=shape[2],
                    memory_mib=shape[2] * 4,
                    gpu=shape[1],
                    priority=priority,
                    queue=team,
                )
            )
            owners.append(key)
        n += 1
    return jobs, pods, owners


def first_fit(state: ClusterState, pod: PodSpec, start: int) -> int:
    """The first node from ``start`` on (wrapping) where ``pod`` fits, or -1."""
    ok = (state.cpu_free >= pod.cpu_milli) & (state.pods < state.max_pods)
    if pod.gpu.is_shared:
        ok &= state.gpu_max_free >= pod.gpu.milli
    elif pod.gpu.count:
        ok &= state.gpu_idle_count >= pod.gpu.count
    found = np.flatnonzero(np.roll(ok, -start))
    return -1 if len(found) == 0 else (int(found[0]) + start) % len(state)


def steady_weights(
    state: ClusterState, queues: list[QueueSpec], pending: Sequence[PodSpec]
) -> npt.NDArray[np.float64]:
    """Each team's GPU fair share when the cluster is full and ``pending`` waits."""
    tree = QueueTree(queues)
    demand: list[dict[str, int]] = [{} for _ in range(len(tree))]
    deserved_total = sum(q.deserved["gpu"] for q in queues if q.name.startswith("team-"))
    for i, spec in enumerate(tree.specs):
        if spec.name.startswith("team-"):
            # As if each team ran its quota's share of a full cluster, plus what it waits for.
            held = state.total_gpu_milli * spec.deserved["gpu"] // deserved_total
            demand[i] = {"gpu": held}
    for pod in pending:
        add(demand[tree.index[pod.queue]], {"gpu": pod.gpu.total_milli})
    fair = fair_shares(tree, {"gpu": state.total_gpu_milli}, demand)
    names = [q.name for q in queues if q.name.startswith("team-")]
    return np.array([max(fair[tree.index[n]].get("gpu", 0), 1) for n in names], dtype=np.float64)


def build_snapshot(nodes: int, running: int, pending: int, seed: int, mix: str) -> Snapshot:
    rng = np.random.default_rng(seed)
    state = ClusterState(build_nodes(nodes, rng))
    queues = build_queues(state.total_gpu_milli, rng)
    teams = [q for q in queues if q.name.startswith("team-")]
    names = [q.name for q in teams]
    # Pending pods come from every team alike. Running pods are spread over the teams by
    # the GPU fair shares the tree gives with that demand ("steady": what a converged
    # scheduler holds, give or take 15%), or by deserved quota with 50% noise ("burst":
    # much to put right, so reclaim works hard).
    pend_jobs, pend_pods, pend_owner = draw_jobs(
        pending, names, np.ones(len(names)), mix, rng, "wait", 0.1
    )
    if mix == "steady":
        weights = steady_weights(state, queues, pend_pods)
        noisy = weights * rng.lognormal(0.0, 0.15, len(teams))
    else:
        deserved = np.array([q.deserved["gpu"] for q in teams], dtype=np.float64)
        noisy = deserved * rng.lognormal(0.0, 0.5, len(teams))
    run_jobs, run_pods, run_owner = draw_jobs(running * 2, names, noisy, mix, rng, "run", 0.0)
    tasks: list[Task] = []
    node = 0
    for pod, owner in zip(run_pods, run_owner, strict=True):
        if len(tasks) == running:
            break
        node = first_fit(state, pod, node)
        if node < 0:
            node = 0
            continue
        if pod.gpu.is_shared:
            gpus: tuple[int, ...] = (tightest_gpu(state, node, pod.gpu.milli),)
        else:
            gpus = lowest_idle_gpus(state, node, pod.gpu.count)
        state.allocate(pod, node, gpus)
        tasks.append(Task(pod, owner, started=float(rng.integers(0, 3600))))
        node = (node + 1) % nodes
    live = {t.job for t in tasks}
    run_jobs = [j for j in run_jobs if j.key in live]
    tasks.extend(Task(p, o) for p, o in zip(pend_pods, pend_owner, strict=True))
    return Snapshot(state, queues, run_jobs + pend_jobs, tasks, now=3600.0)


def run_once(snapshot: Snapshot, policy: str) -> tuple[dict[str, float], SessionResult]:
    """One session over ``snapshot``, timed step by step (by the runner)."""
    scheduler = build_scheduler(load_profile(policy))
    result = run_session(snapshot, scheduler, SessionConfig())
    return result.seconds, result


def next_cycle(
    snapshot: Snapshot, result: SessionResult, rng: np.random.Generator, churn: float, mix: str
) -> Snapshot:
    """Carry out a session's decisions, let ``churn`` of the running pods' jobs finish and as
    many new pods arrive, one minute later: the next cycle's snapshot."""
    state, now = snapshot.state, snapshot.now + 60.0
    evicted = {e.pod for e in result.evictions}
    bound = {b.pod for b in result.binds}
    for key in evicted:
        state.release(key)
    running_jobs = sorted({t.job for t in snapshot.tasks if t.pod.key in state.allocations})
    done = {
        running_jobs[i]
        for i in rng.permutation(len(running_jobs))[: int(churn * len(running_jobs))]
    }
    tasks: list[Task] = []
    finished = 0
    for t in snapshot.tasks:
        if t.job in done:
            if t.pod.key in state.allocations:
                state.release(t.pod.key)
            finished += 1
            continue
        started = now if t.pod.key in bound else (0.0 if t.pod.key in evicted else t.started)
        tasks.append(replace(t, started=started))
    teams = [q.name for q in snapshot.queues if q.name.startswith("team-")]
    jobs, pods, owners = draw_jobs(
        finished, teams, np.ones(len(teams)), mix, rng, f"new{int(now)}", 0.1
    )
    tasks.extend(Task(p, o) for p, o in zip(pods, owners, strict=True))
    live = {t.job for t in tasks}
    specs = [j for j in [*snapshot.jobs, *jobs] if j.key in live]
    return Snapshot(state, snapshot.queues, specs, tasks, now)


def describe(times: dict[str, float], result: SessionResult) -> str:
    steps = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in times.items() if k != "session")
    return (
        f"{times['session']:.3f} s ({steps}); {len(result.binds)} binds, "
        f"{len(result.evictions)} evictions, {len(result.nominations)} nominations, "
        f"{len(result.pending)} pending"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--running", type=int, default=50_000)
    parser.add_argument("--pending", type=int, default=20_000)
    parser.add_argument("--mix", choices=sorted(MIXES), default="steady")
    parser.add_argument("--policy", default="bestfit")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=4, help="cycles after the first")
    parser.add_argument("--churn", type=float, default=0.01, help="share of jobs ending a cycle")
    args = parser.parse_args()
    # Beside this script (on the path when run as bench/session.py); imported here because
    # tests/test_decision_digests.py loads this module by its file.
    import peak_memory

    print(f"kgpu scheduling core: {core_build()}")
    start = time.perf_counter()
    snapshot = build_snapshot(args.nodes, args.running, args.pending, args.seed, args.mix)
    built = time.perf_counter() - start
    running = len(snapshot.state.allocations)
    print(
        f"snapshot ({args.mix}): {args.nodes} nodes, {len(snapshot.queues)} queues, "
        f"{running} running and {len(snapshot.tasks) - running} pending pods in "
        f"{len(snapshot.jobs)} jobs; GPUs {snapshot.state.used_gpu_milli / snapshot.state.total_gpu_milli:.1%} "
        f"used (built in {built:.1f} s)"
    )
    rng = np.random.default_rng(args.seed + 1)
    for cycle in range(args.cycles + 1):
        peak_memory.reset()
        times, result = run_once(snapshot, args.policy)
        label = "first session" if cycle == 0 else f"cycle {cycle}"
        peak = peak_memory.shown(peak_memory.peak_mib())
        print(f"{label}: {describe(times, result)}; peak {peak} MiB")
        snapshot = next_cycle(snapshot, result, rng, args.churn, args.mix)


if __name__ == "__main__":
    main()
