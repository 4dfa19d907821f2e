"""Plan the capacity that pending GPU pods are missing, as trigger pods to create.

For each pod kgpu failed to place the planner finds where new nodes for it would come from
(a configured NodePool and GPU model, or with no NodePool configured, any autoscaler asked
for GPUs of the pod's model), converts its request into GPUs and groups pods that can share
new nodes. Each group's demand becomes whole GPUs and then triggers:

- a multi-GPU (or whole-GPU) pod is a unit of its GPUs, which must land on one node;
- shares of a GPU are packed first-fit-decreasing into whole GPUs;
- a memory-only pod is the share its memory is of the target GPU's memory, rounded up, or
  ``gpu_memory_to_fraction_ratio`` of a GPU (default 0.1) when the model is unknown;
- units are packed first-fit-decreasing into nodes of the target's largest instance type,
  one trigger per node: a node type that fits only part of the demand gets a second trigger.

A gang (a pod group placed all or nothing) counts as a whole: if any member cannot be
planned, none is, since capacity for part of a gang places nothing.

Pods already covered by an active trigger (named in its original-request annotation) are
left out, so demand that is already being provisioned never gets a second trigger; and
room that an active trigger's pods left when they were placed elsewhere is filled first
by pending pods of its group. The
plan is a pure function of its inputs: the same pods and triggers give the same triggers,
names included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from kgpu.autoscale.demand import (
    ActiveTrigger,
    DemandGroup,
    NodeUnit,
    PodDemand,
    Target,
    TriggerSpec,
    UnplacedPod,
    pack_nodes,
    pack_shares,
    trigger_for,
)
from kgpu.model.nodepool import (
    GPU_PRODUCT_LABEL,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    InstanceType,
    NodePool,
    NodeTerm,
    model_memory,
)
from kgpu.model.pod import PodKey
from kgpu.model.taints import untolerated
from kgpu.model.units import MILLI_PER_GPU

# Labels every Karpenter node can be given whatever its NodePool says; a pod's selector on
# another key that the pool neither labels nor requires cannot be met by the pool.
WELL_KNOWN_LABELS: Final = frozenset(
    {
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        INSTANCE_TYPE_LABEL,
        NODEPOOL_LABEL,
    }
)
_TARGET_KEYS: Final = (GPU_PRODUCT_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL)


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """``pools``: the NodePools kgpu may ask for nodes, in order of preference (a higher
    ``weight`` goes first). With none, triggers ask any autoscaler for GPUs."""

    pools: tuple[NodePool, ...] = ()
    gpu_memory_to_fraction_ratio: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_to_fraction_ratio <= 1:
            raise ValueError(
                f"gpu_memory_to_fraction_ratio is {self.gpu_memory_to_fraction_ratio}, "
                "expected 0 < ratio <= 1"
            )


@dataclass(frozen=True, slots=True)
class Unplannable:
    pod: PodKey
    reason: str


@dataclass(slots=True)
class Plan:
    triggers: list[TriggerSpec] = field(default_factory=list)
    covered: dict[PodKey, str] = field(default_factory=dict)  # pod: the trigger covering it
    unplannable: list[Unplannable] = field(default_factory=list)


def plan(
    pending: Sequence[UnplacedPod],
    config: PlannerConfig,
    active: Sequence[ActiveTrigger] = (),
) -> Plan:
    result = Plan()
    covering = {pod: t.name for t in active for pod in t.pods}
    memory = model_memory(config.pools)
    resolved: dict[PodKey, tuple[DemandGroup, PodDemand] | str] = {}
    for p in pending:
        if p.wants_gpu:
            resolved[p.key] = _resolve(p, config, memory)
    _fail_whole_gangs(pending, resolved)
    groups: dict[DemandGroup, list[tuple[UnplacedPod, PodDemand]]] = {}
    for p in pending:
        outcome = resolved.get(p.key)
        if outcome is None:
            continue  # no GPU asked: autoscalers see CPU and memory requests themselves
        if isinstance(outcome, str):
            result.unplannable.append(Unplannable(p.key, outcome))
        elif p.key in covering:
            result.covered[p.key] = covering[p.key]
        else:
            groups.setdefault(outcome[0], []).append((p, outcome[1]))
    spare = _spare(active, resolved)
    for group, members in groups.items():
        members = _adopt(members, [r for r in spare if r.trigger.group == group.id], result)
        units = [
            NodeUnit(d.gpus, p.pod.cpu_milli, p.pod.memory_mib, (d,))
            for p, d in members
            if d.milli == MILLI_PER_GPU
        ]
        units += pack_shares([(d.milli, p, d) for p, d in members if d.milli < MILLI_PER_GPU])
        for node in pack_nodes(units, group.target):
            result.triggers.append(trigger_for(group, node))
    return result


@dataclass(slots=True)
class _Room:
    """What an active trigger holds beyond the pods it stands for that are still pending
    (the others were placed elsewhere or went away): whole GPUs, the free share of its last
    shared GPU, CPU and memory. Pending pods of its group fit there before any new trigger
    is made, or a node would be launched for demand that one in flight already covers."""

    trigger: ActiveTrigger
    gpus: int
    share: int
    cpu_milli: int
    memory_mib: int

    def take(self, d: PodDemand) -> bool:
        cpu, memory = d.cpu_milli, d.memory_mib
        if cpu > self.cpu_milli or memory > self.memory_mib:
            return False
        if d.milli == MILLI_PER_GPU:
            if d.gpus > self.gpus:
                return False
            self.gpus -= d.gpus
        elif d.milli <= self.share:
            self.share -= d.milli
        elif self.gpus > 0:
            self.gpus, self.share = self.gpus - 1, MILLI_PER_GPU - d.milli
        else:
            return False
        self.cpu_milli, self.memory_mib = self.cpu_milli - cpu, self.memory_mib - memory
        return True


def _spare(
    active: Sequence[ActiveTrigger],
    resolved: Mapping[PodKey, tuple[DemandGroup, PodDemand] | str],
) -> list[_Room]:
    rooms = []
    for t in active:
        if t.cpu_milli is None or t.memory_mib is None:
            continue
        whole = milli = cpu = memory = 0
        for key in t.pods:
            outcome = resolved.get(key)
            if outcome is None or isinstance(outcome, str):
                continue  # placed, gone, or no longer plannable: its room is free
            d = outcome[1]
            if d.milli == MILLI_PER_GPU:
                whole += d.gpus
            else:
                milli += d.milli
            cpu += d.cpu_milli
            memory += d.memory_mib
        shared = math.ceil(milli / MILLI_PER_GPU)
        gpus = max(t.gpus - whole - shared, 0)
        if gpus > 0 or shared * MILLI_PER_GPU > milli:
            rooms.append(
                _Room(
                    t,
                    gpus,
                    shared * MILLI_PER_GPU - milli,
                    t.cpu_milli - cpu,
                    t.memory_mib - memory,
                )
            )
    return rooms


def _adopt(
    members: list[tuple[UnplacedPod, PodDemand]], rooms: list[_Room], result: Plan
) -> list[tuple[UnplacedPod, PodDemand]]:
    """The members left after the largest have taken the rooms of active triggers."""
    if not rooms:
        return members
    left = []
    for p, d in sorted(members, key=lambda m: (-m[1].gpus * m[1].milli, m[0].key)):
        room = next((r for r in rooms if r.take(d)), None)
        if room is None:
            left.append((p, d))
        else:
            result.covered[p.key] = room.trigger.name
    return left


def _fail_whole_gangs(
    pending: Sequence[UnplacedPod], resolved: dict[PodKey, tuple[DemandGroup, PodDemand] | str]
) -> None:
    failed: dict[str, str] = {}
    for p in pending:
        outcome = resolved.get(p.key)
        if p.gang and isinstance(outcome, str):
            failed.setdefault(p.gang, f"gang {p.gang}: member {p.key} cannot be planned: {outcome}")
    for p in pending:
        if p.gang in failed and p.key in resolved:
            reason = resolved[p.key]
            resolved[p.key] = reason if isinstance(reason, str) else failed[p.gang]


# ------------------------------------------------------------------------ targets


def _resolve(
    p: UnplacedPod, config: PlannerConfig, memory: Mapping[str, int]
) -> tuple[DemandGroup, PodDemand] | str:
    """The pod's group and its demand, or why no node can be planned for it."""
    selector = dict(p.pod.node_selector)
    models = _models(p)
    if models is None:
        return (
            f"its {GPU_PRODUCT_LABEL} node selector or affinity allows none of its card names "
            + "|".join(p.pod.gpu.models)
        )
    if not config.pools:
        target = Target(
            models=models, gpu_memory_mib=memory.get(models[0], 0) if len(models) == 1 else 0
        )
        return _grouped(p, target, selector, config)
    why: list[str] = []
    pools = sorted(config.pools, key=lambda pool: -pool.weight)  # stable: config order next
    for model in models or ("",):
        for pool in pools:
            found = _pool_target(p, pool, model, selector)
            if isinstance(found, Target):
                return _grouped(p, found, selector, config)
            why.append(f"{pool.name}: {found}")
    return "no NodePool can launch a node for it (" + "; ".join(dict.fromkeys(why)) + ")"


def _models(p: UnplacedPod) -> tuple[str, ...] | None:
    """The GPU models the pod accepts, in its order of preference (empty: any; None: its
    card names and its node selector or affinity on the GPU product contradict)."""
    models = p.pod.gpu.models
    chosen = dict(p.pod.node_selector).get(GPU_PRODUCT_LABEL)
    if chosen is not None:
        return (chosen,) if not models or chosen in models else None
    for req in _one_term(p):
        if req.key == GPU_PRODUCT_LABEL and req.operator == "In":
            allowed = tuple(m for m in req.values if not models or m in models)
            return allowed or None
    return models


def _one_term(p: UnplacedPod) -> NodeTerm:
    """The requirements of the pod's node affinity when it has one term. With several
    (ORed) terms none of them binds the pod, so none narrows the target."""
    return p.affinity[0] if len(p.affinity) == 1 else ()


def _pool_target(
    p: UnplacedPod, pool: NodePool, model: str, selector: Mapping[str, str]
) -> Target | str:
    """The target in ``pool`` for GPUs of ``model`` ("": any), or why there is none."""
    taint = untolerated(pool.taints, p.pod.tolerations)
    if taint is not None:
        return f"untolerated taint {taint.key}={taint.value}:{taint.effect}"
    if selector.get(NODEPOOL_LABEL, pool.name) != pool.name:
        return f"the pod selects NodePool {selector[NODEPOOL_LABEL]}"
    for key, value in selector.items():
        if key in _TARGET_KEYS:
            continue
        can = pool.can_label(key, value)
        if can is False or (can is None and key not in WELL_KNOWN_LABELS):
            return f"its nodes are not labelled {key}={value}"
    types = pool.offering(model)
    wanted = selector.get(INSTANCE_TYPE_LABEL)
    if wanted is not None:
        types = tuple(t for t in types if t.name == wanted)
    for req in _one_term(p):
        if req.key == INSTANCE_TYPE_LABEL:
            types = tuple(t for t in types if req.allows(t.name))
        elif req.key == NODEPOOL_LABEL and not req.allows(pool.name):
            return "the pod's node affinity excludes it"
    if not types:
        return f"no instance type with {model or 'any'} GPUs" + (
            f" named {wanted}" if wanted else ""
        )
    model = model or types[0].gpu_model  # any model: the pool's first GPU type decides
    types = tuple(sorted((t for t in types if t.gpu_model == model), key=_size, reverse=True))
    big = types[0]
    short = _short(p, big)
    if short:
        return f"its largest {model} instance type {big.name} has {short}"
    return Target(
        pool=pool.name,
        models=(model,),
        instance_types=tuple(t.name for t in types),
        node_gpus=big.gpu_count,
        node_cpu_milli=big.cpu_milli,
        node_memory_mib=big.memory_mib,
        node_max_pods=big.max_pods,
        gpu_memory_mib=big.gpu_memory_mib,
    )


def _size(t: InstanceType) -> tuple[int, int, int, str]:
    return (t.gpu_count, t.cpu_milli, t.memory_mib, t.name)


def _short(p: UnplacedPod, t: InstanceType) -> str:
    """What ``t`` lacks for the pod, or "" if one node of it holds the pod."""
    pod = p.pod
    if pod.gpu.count > t.gpu_count:
        return f"{t.gpu_count} GPUs, the pod asks {pod.gpu.count}"
    if p.gpu_memory_mib > t.gpu_memory_mib:
        return f"{t.gpu_memory_mib} MiB per GPU, the pod asks {p.gpu_memory_mib} MiB"
    if pod.cpu_milli > t.cpu_milli:
        return f"{t.cpu_milli}m allocatable CPU, the pod asks {pod.cpu_milli}m"
    if pod.memory_mib > t.memory_mib:
        return f"{t.memory_mib} MiB allocatable memory, the pod asks {pod.memory_mib} MiB"
    return ""


def _grouped(
    p: UnplacedPod, target: Target, selector: Mapping[str, str], config: PlannerConfig
) -> tuple[DemandGroup, PodDemand] | str:
    if target.pool:
        kept = tuple(sorted((k, v) for k, v in selector.items() if k not in _TARGET_KEYS))
    else:
        kept = tuple(sorted(selector.items()))
    group = DemandGroup(target, kept, p.pod.tolerations, p.affinity)
    gpu, cpu, memory = p.pod.gpu, p.pod.cpu_milli, p.pod.memory_mib
    if gpu.count:
        return group, PodDemand(p.key, gpu.count, gpu.milli, 0, p.gang, cpu, memory)
    # Memory only: the share of the target GPU's memory, rounded up so that the shares
    # planned onto one GPU never promise more memory than it has.
    if target.gpu_memory_mib:
        if p.gpu_memory_mib > target.gpu_memory_mib:
            return (
                f"gpu-memory {p.gpu_memory_mib} MiB is more than one "
                f"{target.model} GPU has ({target.gpu_memory_mib} MiB)"
            )
        milli = math.ceil(p.gpu_memory_mib * MILLI_PER_GPU / target.gpu_memory_mib)
    else:
        milli = max(1, round(config.gpu_memory_to_fraction_ratio * MILLI_PER_GPU))
    return group, PodDemand(p.key, 1, milli, p.gpu_memory_mib, p.gang, cpu, memory)
