"""Demand for new nodes: the pods kgpu could not place, as whole-GPU units in groups.

An autoscaler (Karpenter, the cluster autoscaler) sizes nodes from the resource requests
of pending pods. A pod that asks for half a GPU in an annotation, or for 10 GiB of GPU
memory, shows it no GPU demand at all, and a pod whose GPU model is a Volcano card name
shows it no model. So the planner turns what kgpu failed to place into whole GPUs, grouped
by where new nodes for them must come from (:class:`DemandGroup`), and each group into
trigger pods (:class:`TriggerSpec`) that an autoscaler reads correctly.

Shares of a GPU are packed first-fit-decreasing into as few whole GPUs as possible: two
pods of 0.5 make one GPU, 0.7 and 0.5 make two (a GPU share never spans two GPUs, so
neither does its demand).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from kgpu.dra.gpu_count import DraGpus
from kgpu.model.nodepool import NodeTerm
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.taints import Toleration
from kgpu.model.units import MILLI_PER_GPU

TRIGGER_PREFIX: Final = "kgpu-trigger"


@dataclass(frozen=True, slots=True)
class UnplacedPod:
    """A pod kgpu failed to place, with what the planner needs beyond its PodSpec.

    ``gpu_memory_mib``: a request for that much memory of one shared GPU (the ``gpu-memory``
    annotation); the pod's ``gpu`` is then empty. ``gang``: the pod group it belongs to
    ("": none); a gang is planned as a whole. ``affinity``: the terms of its required node
    affinity (ORed; the requirements of one term are ANDed), copied onto its trigger.
    """

    pod: PodSpec
    gpu_memory_mib: int = 0
    gang: str = ""
    affinity: tuple[NodeTerm, ...] = ()

    @property
    def key(self) -> PodKey:
        return self.pod.key

    @property
    def wants_gpu(self) -> bool:
        return self.pod.gpu.count > 0 or self.gpu_memory_mib > 0


def with_dra_demand(pending: UnplacedPod, gpus: DraGpus) -> UnplacedPod:
    """``pending`` as the planner should see it when its GPUs are asked through DRA claims:
    its unallocated GPU claims as the whole GPUs (or share of one) a trigger pod asks for,
    of the products their selectors pin (:func:`kgpu.dra.gpu_count.DraGpus.demand_request`).
    A pod that also asks in another dialect, or has no GPU claim, is left as it is: an
    autoscaler cannot see DRA demand (kubernetes-sigs/karpenter#1231), so without this the
    pod would wait for a node that never comes."""
    if pending.wants_gpu:
        return pending
    request = gpus.demand_request(str(pending.key))
    if request is None:
        return pending
    return replace(pending, pod=replace(pending.pod, gpu=request))


@dataclass(frozen=True, slots=True)
class Target:
    """Where new nodes for a group come from.

    ``pool`` is a configured NodePool ("" when none is configured: the trigger then asks any
    autoscaler for GPUs of ``models``, or of any model when that is empty). With a pool,
    ``models`` holds the one model chosen and ``instance_types`` the pool's types of that
    model, largest first; ``node_*`` describe the largest, which the demand is packed into.
    ``node_gpus == 0`` means the node size is unknown and each unit gets its own trigger.
    ``gpu_memory_mib`` (per GPU; 0 if unknown) converts memory-only requests into shares.
    """

    pool: str = ""
    models: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    node_gpus: int = 0
    node_cpu_milli: int = 0
    node_memory_mib: int = 0
    node_max_pods: int = 0
    gpu_memory_mib: int = 0

    @property
    def model(self) -> str:
        return self.models[0] if len(self.models) == 1 else ""


@dataclass(frozen=True, slots=True)
class DemandGroup:
    """Pods whose new nodes can be the same: one target, selector, tolerations, affinity.

    ``node_selector`` is the pods' selector less the keys the target decides (GPU product,
    instance type and pool, which a pool target turns into node affinity).
    """

    target: Target
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[NodeTerm, ...] = ()

    @property
    def id(self) -> str:
        """A short stable digest: a label value that finds a group's triggers again."""
        return digest(repr(self))


@dataclass(frozen=True, slots=True)
class PodDemand:
    """One pod's part of a trigger: ``gpus`` GPUs giving ``milli`` each (1000: whole)."""

    pod: PodKey
    gpus: int
    milli: int
    gpu_memory_mib: int = 0
    gang: str = ""
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class NodeUnit:
    """GPUs that must be on one node: a multi-GPU pod, or one GPU of packed shares."""

    gpus: int
    cpu_milli: int
    memory_mib: int
    pods: tuple[PodDemand, ...]


@dataclass(frozen=True, slots=True)
class TriggerSpec:
    """One trigger pod to create: the requests it makes and the pods it stands for."""

    name: str
    group: DemandGroup
    gpus: int
    cpu_milli: int
    memory_mib: int
    pods: tuple[PodDemand, ...]

    @property
    def pod_keys(self) -> tuple[PodKey, ...]:
        return tuple(p.pod for p in self.pods)


@dataclass(frozen=True, slots=True)
class ActiveTrigger:
    """A trigger pod that exists: its name, group, the pods it stands for and its requests
    (None: not known, which lends its room to no other pod)."""

    name: str
    group: str
    pods: tuple[PodKey, ...]
    gpus: int = 0
    cpu_milli: int | None = None
    memory_mib: int | None = None


def digest(text: str, size: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:24].strip("-")


def trigger_name(group: DemandGroup, pods: Iterable[PodKey]) -> str:
    """``kgpu-trigger-<model>-<digest>``: the same demand always gets the same name, so a
    create that is repeated (a restart, a lost answer) finds the first one instead of
    making a second."""
    what = _slug(group.target.model or group.target.pool) or "gpu"
    return f"{TRIGGER_PREFIX}-{what}-{digest(group.id + '|' + ','.join(sorted(pods)))}"


def pack_shares(shares: Sequence[tuple[int, UnplacedPod, PodDemand]]) -> list[NodeUnit]:
    """Shares of one GPU (milli < 1000 each) packed first-fit-decreasing into whole GPUs."""
    order = sorted(shares, key=lambda s: (-s[0], s[1].key))
    room: list[int] = []
    bins: list[list[tuple[UnplacedPod, PodDemand]]] = []
    for milli, pending, demand in order:
        for i, free in enumerate(room):
            if free >= milli:
                room[i] -= milli
                bins[i].append((pending, demand))
                break
        else:
            room.append(MILLI_PER_GPU - milli)
            bins.append([(pending, demand)])
    return [
        NodeUnit(
            gpus=1,
            cpu_milli=sum(p.pod.cpu_milli for p, _ in content),
            memory_mib=sum(p.pod.memory_mib for p, _ in content),
            pods=tuple(d for _, d in content),
        )
        for content in bins
    ]


def pack_nodes(units: Sequence[NodeUnit], target: Target) -> list[list[NodeUnit]]:
    """Units packed first-fit-decreasing into nodes of the target's largest instance type.

    A node holds what fits in its GPUs, CPU, memory and pod slots. With no known node size
    every unit is a node of its own: the autoscaler then packs the triggers itself.
    """
    if target.node_gpus <= 0:
        return [[u] for u in units]
    order = sorted(units, key=lambda u: (-u.gpus, -u.cpu_milli, -u.memory_mib, u.pods[0].pod))
    nodes: list[list[NodeUnit]] = []
    free: list[list[int]] = []  # gpus, cpu, memory, pod slots left on each node
    for unit in order:
        need = (unit.gpus, unit.cpu_milli, unit.memory_mib, len(unit.pods))
        for i, room in enumerate(free):
            if all(n <= r for n, r in zip(need, room, strict=True)):
                free[i] = [r - n for n, r in zip(need, room, strict=True)]
                nodes[i].append(unit)
                break
        else:
            capacity = (
                target.node_gpus,
                target.node_cpu_milli,
                target.node_memory_mib,
                target.node_max_pods,
            )
            free.append([r - n for n, r in zip(need, capacity, strict=True)])
            nodes.append([unit])
    return nodes


def trigger_for(group: DemandGroup, units: Sequence[NodeUnit]) -> TriggerSpec:
    pods = tuple(d for u in units for d in u.pods)
    return TriggerSpec(
        name=trigger_name(group, (d.pod for d in pods)),
        group=group,
        gpus=sum(u.gpus for u in units),
        cpu_milli=sum(u.cpu_milli for u in units),
        memory_mib=sum(u.memory_mib for u in units),
        pods=pods,
    )
