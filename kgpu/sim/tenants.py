"""Teams sharing a cluster over time: sessions in a loop, with arrivals, completions, evictions.

Each cycle of ``simulate_tenants``:

1. pods whose run time is over finish and give their resources back;
2. every active tenant tops up its backlog of pending jobs, so that it always asks for
   more than the cluster has (a saturated cluster) while it is active;
3. one session runs over the snapshot (the same core as the live scheduler): its binds
   start pods, its evictions stop them and put their jobs back in the backlog (a batch job
   restarts from the beginning), its nominations wait for the next cycle;
4. the share of the cluster's GPUs each queue holds is recorded, beside the fair share the
   session computed as it opened.

The result says, per queue and cycle, the share held and the fair share, from which the
tests check that two queues with deserved 60/40 converge within 5% of their fair shares,
and that a queue coming back from idle gets its share back within a bounded number of
cycles, through reclaim. ``plot_tenants`` draws the curves.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from kgpu.actions.session_runner import SessionConfig, run_session
from kgpu.framework.scheduler import Scheduler
from kgpu.framework.session_result import SessionResult
from kgpu.framework.session_snapshot import Snapshot
from kgpu.model.gpu import gpu_share, whole_gpus
from kgpu.model.job import JobKey, JobSpec, Task
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.queue import QueueSpec
from kgpu.state.cluster import ClusterState


@dataclass(frozen=True, slots=True)
class Tenant:
    """A team: its queue, when it is active, and the jobs it submits.

    Jobs have ``pods`` pods (``min_member`` of them a gang) of ``gpu_milli`` each (1000: one
    whole GPU, less: a share of one) and run ``duration`` cycles, drawn from
    ``durations`` uniformly. ``active`` is a half-open range of cycles.
    """

    queue: QueueSpec
    active: tuple[int, int] = (0, 1 << 30)
    pods: int = 1
    min_member: int = 1
    gpu_milli: int = 1000
    cpu_milli: int = 4000
    memory_mib: int = 16_384
    durations: tuple[int, int] = (5, 15)


@dataclass(slots=True)
class TenantsResult:
    cycles: int
    total_gpu_milli: int
    share: dict[str, list[float]] = field(default_factory=dict)  # of the cluster's GPUs
    fair: dict[str, list[float]] = field(default_factory=dict)
    evictions: list[int] = field(default_factory=list)
    session_s: list[float] = field(default_factory=list)

    def mean_share(self, queue: str, last: int) -> float:
        return float(np.mean(self.share[queue][-last:]))


@dataclass(slots=True)
class _Pod:
    task: Task
    duration: int
    ends: int = -1  # cycle it finishes; -1 while pending


def gpu_cluster(nodes: int, gpus: int = 8, model: str = "A100") -> list[NodeInfo]:
    return [
        NodeInfo(
            name=NodeName(f"node-{i:03d}"),
            cpu_milli=gpus * 16_000,
            memory_mib=gpus * 131_072,
            gpu_count=gpus,
            gpu_model=model,
            gpu_memory_mib=81_920,
            labels={"nvidia.com/gpu.product": model},
        )
        for i in range(nodes)
    ]


class _Simulation:
    def __init__(self, nodes: Sequence[NodeInfo], tenants: Sequence[Tenant], seed: int) -> None:
        self.state = ClusterState(nodes)
        self.tenants = list(tenants)
        self.rng = np.random.default_rng(seed)
        self.pods: dict[str, _Pod] = {}
        self.jobs: dict[JobKey, JobSpec] = {}
        self.serial = 0

    def submit(self, cycle: int, tenant: Tenant) -> None:
        """Top up the tenant's backlog to one cluster's worth of GPUs, while it is active."""
        name = tenant.queue.name
        start, stop = tenant.active
        if not start <= cycle < stop:
            return
        waiting = sum(
            p.task.pod.gpu.total_milli
            for p in self.pods.values()
            if p.ends < 0 and p.task.pod.queue == name
        )
        while waiting < self.state.total_gpu_milli:
            self.serial += 1
            key = JobKey(f"{name}/job-{self.serial}")
            self.jobs[key] = JobSpec(key, name, min_member=tenant.min_member, created=cycle)
            low, high = tenant.durations
            duration = int(self.rng.integers(low, high + 1))
            gpu = whole_gpus(1) if tenant.gpu_milli >= 1000 else gpu_share(tenant.gpu_milli)
            for i in range(tenant.pods):
                pod = PodSpec(
                    key=PodKey(f"{name}/job-{self.serial}-{i}"),
                    cpu_milli=tenant.cpu_milli,
                    memory_mib=tenant.memory_mib,
                    gpu=gpu,
                    queue=name,
                )
                self.pods[pod.key] = _Pod(Task(pod, key), duration)
                waiting += gpu.total_milli

    def finish(self, cycle: int) -> None:
        for key, pod in list(self.pods.items()):
            if 0 <= pod.ends <= cycle:
                self.state.release(PodKey(key))
                del self.pods[key]

    def step(
        self, cycle: int, scheduler: Scheduler, config: SessionConfig
    ) -> tuple[SessionResult, float]:
        tasks = [p.task for p in self.pods.values()]
        live = {t.job for t in tasks}
        jobs = [spec for key, spec in self.jobs.items() if key in live]
        snapshot = Snapshot(self.state, [t.queue for t in self.tenants], jobs, tasks, float(cycle))
        start = time.perf_counter()
        result = run_session(snapshot, scheduler, config)
        elapsed = time.perf_counter() - start
        for bind in result.binds:
            pod = self.pods[bind.pod]
            pod.task = replace(pod.task, started=float(cycle))
            pod.ends = cycle + pod.duration
        for evict in result.evictions:
            self.state.release(evict.pod)
            self.pods[evict.pod].ends = -1  # back to the backlog; it restarts from scratch
        return result, elapsed


def simulate_tenants(
    nodes: Sequence[NodeInfo],
    tenants: Sequence[Tenant],
    cycles: int,
    scheduler: Scheduler,
    config: SessionConfig | None = None,
    seed: int = 0,
) -> TenantsResult:
    sim = _Simulation(nodes, tenants, seed)
    config = config or SessionConfig()
    total = sim.state.total_gpu_milli
    result = TenantsResult(cycles, total)
    names = [t.queue.name for t in tenants]
    for name in names:
        result.share[name] = []
        result.fair[name] = []
    for cycle in range(cycles):
        sim.finish(cycle)
        for tenant in tenants:
            sim.submit(cycle, tenant)
        decided, elapsed = sim.step(cycle, scheduler, config)
        held = dict.fromkeys(names, 0)
        for pod in sim.pods.values():
            if pod.ends >= 0:
                held[pod.task.pod.queue] += pod.task.pod.gpu.total_milli
        for name in names:
            result.share[name].append(held[name] / total)
            result.fair[name].append(decided.fair.get(name, {}).get("gpu", 0) / total)
        result.evictions.append(len(decided.evictions))
        result.session_s.append(elapsed)
    return result


def plot_tenants(result: TenantsResult, path: Path) -> None:
    """Share of the cluster's GPUs held per queue over cycles, fair shares dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for name, shares in result.share.items():
        (line,) = ax.plot([100 * s for s in shares], label=f"{name} held")
        ax.plot(
            [100 * s for s in result.fair[name]],
            linestyle="--",
            color=line.get_color(),
            label=f"{name} fair share",
        )
    ax.set_xlabel("cycle")
    ax.set_ylabel("% of cluster GPUs")
    ax.set_ylim(0, 105)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
