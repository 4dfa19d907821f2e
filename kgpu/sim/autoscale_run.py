"""``kgpu simulate autoscale``: pods arrive at a cluster, the ones that do not fit get
trigger pods, a provisioner model launches nodes, and the report says how long each waited.

The loop is event driven (arrivals, NodeClaim stages, the controller's own wake-ups) and
runs the same pieces the live scheduler runs: the allocate action places pods, the
trigger controller (:mod:`kgpu.autoscale.trigger_controller`) plans and tracks triggers, and
:class:`~kgpu.sim.provisioner.Provisioner` plays Karpenter. At each event time:

1. arrivals join the pending pods; the provisioner advances (new nodes join);
2. pending pods are scheduled, in arrival order (priority first);
3. the controller looks at what is still pending and at triggers, NodeClaims and nodes;
   its triggers are created and deleted, and the pods it names are scheduled at once.

Live, a trigger holds its node's GPUs until the controller deletes it in the step that
sees the node Ready; here a node's capacity is free when it joins. The pods are placed in
the same step either way.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kgpu.actions.allocate import allocate
from kgpu.autoscale.demand import UnplacedPod, with_dra_demand
from kgpu.autoscale.observed import Observed, ObservedNode, ObservedTrigger
from kgpu.autoscale.planner import PlannerConfig
from kgpu.autoscale.trigger_controller import ControllerConfig, TriggerController
from kgpu.config import load_profile
from kgpu.dra.gpu_count import DraGpus
from kgpu.dra.inventory import DraInventory
from kgpu.framework.scheduler import Scheduler
from kgpu.kube.anchors.karpenter import NodePoolError, nodepools_from_documents
from kgpu.model.gpu import gpu_share, whole_gpus
from kgpu.model.node import NodeInfo
from kgpu.model.nodepool import CATALOGUE, NodePool
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.taints import Effect, Taint, Toleration
from kgpu.plugins.registry import PluginContext
from kgpu.sim.autoscale_dra import publish
from kgpu.sim.manifest_dra import dra_scheduler
from kgpu.sim.provisioner import LaunchTimes, Provisioner, SimTrigger
from kgpu.sim.yaml_documents import load_documents
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import typical_pods


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    pod: UnplacedPod


@dataclass(slots=True)
class PodWait:
    pod: PodKey
    gpus: str  # "0.5" or "4"
    arrived: float
    placed: float | None = None
    node: str = ""

    @property
    def waited(self) -> float | None:
        return None if self.placed is None else self.placed - self.arrived


@dataclass(frozen=True, slots=True)
class NewNode:
    name: str
    pool: str
    instance_type: str
    gpus: int
    ready_at: float


@dataclass(slots=True)
class AutoscaleRun:
    pods: list[PodWait] = field(default_factory=list)
    nodes: list[NewNode] = field(default_factory=list)
    triggers_created: int = 0
    outcomes: list[tuple[str, bool, float, str]] = field(default_factory=list)  # name, ok, s, why
    claims_launched: int = 0
    new_gpu_milli_used: int = 0  # by all pods on the new nodes
    end: float = 0.0

    @property
    def new_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def placed(self) -> int:
        return sum(p.placed is not None for p in self.pods)

    def waits(self) -> list[float]:
        return [w for p in self.pods if (w := p.waited) is not None]

    def summary(self) -> str:
        waits = self.waits() or [0.0]
        types = sorted({n.instance_type for n in self.nodes})
        return (
            f"pods={len(self.pods)} placed={self.placed} new_nodes={len(self.nodes)} "
            f"({', '.join(types) or 'none'}) new_gpus={self.new_gpus} "
            f"used_on_new={self.new_gpu_milli_used / 1000:g} "
            f"triggers={self.triggers_created} nodeclaims={self.claims_launched} "
            f"wait_s min={min(waits):.1f} median={statistics.median(waits):.1f} "
            f"max={max(waits):.1f}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "pods": [
                {
                    "pod": p.pod,
                    "gpus": p.gpus,
                    "arrived": p.arrived,
                    "placed": p.placed,
                    "waited": p.waited,
                    "node": p.node or None,
                }
                for p in self.pods
            ],
            "new_nodes": [
                {
                    "name": n.name,
                    "pool": n.pool,
                    "instance_type": n.instance_type,
                    "gpus": n.gpus,
                    "ready_at": n.ready_at,
                }
                for n in self.nodes
            ],
            "triggers": [
                {"name": name, "succeeded": ok, "duration_s": s, "detail": why}
                for name, ok, s, why in self.outcomes
            ],
            "new_gpus": self.new_gpus,
            "new_gpus_used": self.new_gpu_milli_used / 1000,
            "nodeclaims": self.claims_launched,
            "end": self.end,
        }


class _Cluster:
    """The ClusterState and a scheduler for it, rebuilt when nodes join."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        policy: str,
        typical: list[PodSpec],
        dra: DraInventory | None = None,
    ) -> None:
        self.policy = policy
        self.dra = dra
        self.context = PluginContext(typical_pods=typical_pods(typical), dra=dra)
        self.specs: dict[PodKey, PodSpec] = {}
        self.state = ClusterState(nodes)
        self.scheduler = self._scheduler()

    def _scheduler(self) -> Scheduler:
        # A new scheduler per state: plugins keep per-state models keyed by the state.
        return dra_scheduler(load_profile(self.policy), self.context)

    def join(self, nodes: Sequence[NodeInfo]) -> None:
        if self.dra is not None:  # their GPUs are published as ResourceSlices
            nodes = publish(self.dra, list(nodes))
        old = self.state
        self.state = ClusterState([*old.nodes, *nodes])
        for alloc in old.allocations.values():  # node indexes stay: new nodes come last
            self.state.allocate(self.specs[alloc.pod], alloc.node, alloc.gpus)
        self.scheduler = self._scheduler()

    def place(self, pods: Sequence[PodSpec]) -> dict[PodKey, str]:
        result = allocate(self.state, self.scheduler, pods, self.dra)
        by_key = {p.key: p for p in pods}
        for bind in result.binds:
            self.specs[bind.pod] = by_key[bind.pod]  # to place it again when nodes join
        return {b.pod: b.node for b in result.binds}


def simulate_autoscale(
    nodes: Sequence[NodeInfo],
    running: Sequence[tuple[PodSpec, int, tuple[int, ...]]],
    arrivals: Sequence[Arrival],
    pools: tuple[NodePool, ...],
    policy: str = "kgpu",
    launch: LaunchTimes | None = None,
    controller: ControllerConfig | None = None,
    fail_first: int = 0,
    horizon_s: float = 7200.0,
    dra: DraInventory | None = None,
) -> AutoscaleRun:
    """Replay ``arrivals`` on ``nodes`` (with ``running`` pods on (node, GPUs) already).
    ``dra``: the DRA objects and the pods' claims (:mod:`kgpu.sim.autoscale_dra`); running
    pods' claims are allocated on their nodes first, joining nodes publish their GPUs, and
    the planner sees pending pods' GPU claims as GPU demand."""
    config = controller or ControllerConfig(planner=PlannerConfig(pools=pools))
    ctl = TriggerController(config)
    prov = Provisioner(pools, launch, fail_first=fail_first)
    typical = [a.pod.pod for a in arrivals] + [p for p, _, _ in running]
    cluster = _Cluster(nodes, policy, typical, dra)
    counter = DraGpus(dra) if dra is not None else None
    for pod, node, gpus in running:
        if dra is not None and pod.key in dra.pod_claims:
            info = cluster.state.nodes[node]
            dra.record(pod.key, str(info.name), info.labels)
        cluster.state.allocate(pod, node, gpus)
        cluster.specs[pod.key] = pod
    first_new = len(nodes)
    queue = sorted(arrivals, key=lambda a: a.at)
    run = AutoscaleRun()
    waits: dict[PodKey, PodWait] = {}
    pending: dict[PodKey, UnplacedPod] = {}
    triggers: dict[str, SimTrigger] = {}
    now = queue[0].at if queue else 0.0

    def place() -> None:
        for key, node in cluster.place([p.pod for p in pending.values()]).items():
            waits[key].placed, waits[key].node = now, node
            del pending[key]

    while True:
        while queue and queue[0].at <= now:
            a = queue.pop(0)
            pending[a.pod.key] = a.pod
            shown = with_dra_demand(a.pod, counter) if counter is not None else a.pod
            waits[a.pod.key] = PodWait(a.pod.key, _gpus(shown), a.at)
        joined = prov.step(now, triggers)
        if joined:
            cluster.join(joined)
            run.nodes += [
                NewNode(
                    n.name,
                    n.labels.get("karpenter.sh/nodepool", ""),
                    n.labels.get("node.kubernetes.io/instance-type", ""),
                    n.gpu_count,
                    now,
                )
                for n in joined
            ]
        demand = list(pending.values())
        if counter is not None:  # what the planner reads of DRA claims
            demand = [with_dra_demand(p, counter) for p in demand]
        place()
        acts = ctl.step(
            Observed(
                now,
                demand,
                [_observed(name, t) for name, t in triggers.items()],
                prov.observed(now),
                [ObservedNode(n.name, True) for n in cluster.state.nodes],
            )
        )
        for name in acts.delete:
            triggers.pop(name, None)
        for spec in acts.create:
            triggers[spec.name] = SimTrigger(spec, now)
        run.triggers_created += len(acts.create)
        run.outcomes += [
            (o.trigger, o.succeeded, o.duration_s, o.node or o.reason) for o in acts.outcomes
        ]
        if acts.retry:
            place()
        times = [t for t in (acts.wake_at, prov.next_event(now, triggers)) if t is not None]
        if queue:
            times.append(queue[0].at)
        if not times or min(times) > horizon_s:
            break
        # Every source of times answers a time after ``now``; the guard keeps a slip of
        # float rounding from spinning in place.
        now = max(min(times), now + 1e-6)
    run.pods = list(waits.values())
    run.claims_launched = prov.launched
    run.end = now
    state = cluster.state
    run.new_gpu_milli_used = (
        int((state.gpu_cap[first_new:] - state.gpu_free[first_new:]).sum())
        if len(state) > first_new
        else 0
    )
    if dra is not None and counter is not None:
        new = {str(n.name) for n in state.nodes[first_new:]}
        run.new_gpu_milli_used += sum(
            milli
            for key in dra.claims
            if (claim := dra.claims[key]).allocation is not None
            and claim.allocation.node_name in new
            and (milli := counter.claim_milli(claim))
        )
    return run


def _observed(name: str, t: SimTrigger) -> ObservedTrigger:
    spec = t.spec
    return ObservedTrigger(
        name,
        spec.group.id,
        spec.pod_keys,
        spec.gpus,
        t.created_at,
        spec.group.target.pool,
        t.node,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
    )


def _gpus(p: UnplacedPod) -> str:
    if p.gpu_memory_mib:
        return f"{p.gpu_memory_mib}MiB"
    gpu = p.pod.gpu
    return f"{gpu.milli / 1000:g}" if gpu.is_shared else str(gpu.count)


# ---------------------------------------------------------------------------- the scenario


def default_pools() -> tuple[NodePool, ...]:
    """One NodePool of 8-GPU A100 nodes tainted for GPU pods, as GPU pools usually are."""
    taint = Taint("nvidia.com/gpu", "true", Effect.NO_SCHEDULE)
    return (NodePool("gpu-a100", (CATALOGUE["p4de.24xlarge"],), taints=(taint,)),)


def load_nodepools(path: Path) -> tuple[NodePool, ...]:
    """The NodePools (and InstanceTypes) of a YAML file; :class:`NodePoolError` if unusable."""
    try:
        documents = [d for d in load_documents(path) if d]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise NodePoolError(f"{path}: {exc}") from exc
    if not all(isinstance(d, Mapping) for d in documents):
        raise NodePoolError(f"{path}: every document must be a mapping (a Kubernetes object)")
    try:
        return nodepools_from_documents(documents)
    except NodePoolError as exc:
        raise NodePoolError(f"{path}: {exc}") from exc


def full_cluster_scenario(
    pools: tuple[NodePool, ...], existing_nodes: int = 2
) -> tuple[list[NodeInfo], list[tuple[PodSpec, int, tuple[int, ...]]], list[Arrival]]:
    """40 pods of 0.5 GPU and 10 pods of 4 GPUs arrive at once at a full cluster.

    The cluster is ``existing_nodes`` nodes of the first pool's largest GPU instance type,
    each held whole by one running pod. The new pods tolerate the pools' taints, as pods
    written for that cluster would, and name no GPU model.
    """
    pool = pools[0]
    gpu_types = pool.offering("")
    if not gpu_types:
        raise NodePoolError(f"NodePool {pool.name}: no GPU instance type to build the cluster of")
    itype = max(gpu_types, key=lambda t: (t.gpu_count, t.cpu_milli))
    nodes = [pool.node(f"existing-{i}", itype) for i in range(existing_nodes)]
    tolerations = tuple(
        dict.fromkeys(
            Toleration(t.key, "Exists", "", str(t.effect)) for p in pools for t in p.taints
        )
    )
    running = [
        (
            PodSpec(
                PodKey(f"default/resident-{i}"),
                8000,
                65536,
                whole_gpus(itype.gpu_count),
                tolerations=tolerations,
            ),
            i,
            tuple(range(itype.gpu_count)),
        )
        for i in range(existing_nodes)
    ]
    halves = [(f"half-{i:02}", 4000, 16384, gpu_share(500)) for i in range(40)]
    quads = [(f"quad-{i:02}", 32000, 131072, whole_gpus(4)) for i in range(10)]
    arrivals = [
        Arrival(
            0.0,
            UnplacedPod(PodSpec(PodKey(f"default/{name}"), cpu, mem, gpu, tolerations=tolerations)),
        )
        for name, cpu, mem, gpu in halves + quads
    ]
    return nodes, running, arrivals
