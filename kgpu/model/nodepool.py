"""What a node autoscaler can launch: instance types and node pools, as plain data.

A :class:`NodePool` is Karpenter's ``karpenter.sh/v1`` NodePool as the autoscale planner
needs it: its name, the instance types its requirements allow (with their GPUs, CPU and
memory, which the NodePool object itself does not carry: they come from the cloud
provider, here from :data:`CATALOGUE` or from the user's file), the labels and
requirements its nodes get, its taints, its weight and its GPU limit. The edge
(:mod:`kgpu.kube.anchors.karpenter`) parses NodePool objects into this form; the core
never sees the object.

Node requirements (:class:`NodeRequirement`) are ``NodeSelectorRequirement``s, as both a
pod's required node affinity and a NodePool's ``spec.template.spec.requirements`` write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kgpu.model.node import DEFAULT_MAX_PODS, NodeInfo, NodeName
from kgpu.model.taints import Taint

INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"

OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True, slots=True)
class NodeRequirement:
    """``key operator values``: one ``NodeSelectorRequirement``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise ValueError(f"operator {self.operator!r} is not one of {', '.join(OPERATORS)}")

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value in self.values
        if self.operator == "NotIn":
            return value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        # Gt and Lt compare integers; a label that is not one never matches, as in Kubernetes.
        if value is None or not value.lstrip("-").isdigit() or len(self.values) != 1:
            return False
        if not self.values[0].lstrip("-").isdigit():
            return False
        bound = int(self.values[0])
        return int(value) > bound if self.operator == "Gt" else int(value) < bound

    def allows(self, value: str) -> bool:
        """Whether a node labelled ``key=value`` can satisfy this requirement."""
        return self.matches({self.key: value})


NodeTerm = tuple[NodeRequirement, ...]  # requirements that must all hold (one affinity term)


@dataclass(frozen=True, slots=True)
class InstanceType:
    """One machine type: its GPUs and what it offers to pods.

    ``cpu_milli`` and ``memory_mib`` are what the kubelet leaves allocatable (see
    :func:`instance_type`), since that is what pods are packed against.
    """

    name: str
    gpu_count: int
    gpu_model: str  # as GPU Feature Discovery labels it (nvidia.com/gpu.product)
    gpu_memory_mib: int  # per GPU
    cpu_milli: int
    memory_mib: int
    max_pods: int = DEFAULT_MAX_PODS


def instance_type(
    name: str,
    vcpus: int,
    memory_gib: int,
    gpus: int,
    model: str,
    gpu_memory_mib: int,
    max_pods: int = DEFAULT_MAX_PODS,
) -> InstanceType:
    """An instance type from its advertised capacity, less what the kubelet reserves.

    The reserve is Karpenter's default (the EKS AMI's): CPU 6% of the first core, 1% of
    the second, 0.5% of the next two and 0.25% of the rest; memory 11 MiB per pod plus
    255 MiB, and the 100 MiB eviction threshold. Packing against the advertised capacity
    instead would plan one pod too many on a full node and leave it pending again.
    """
    reserved_cpu = 60 + (10 if vcpus > 1 else 0) + 5 * min(max(vcpus - 2, 0), 2)
    reserved_cpu += (25 * max(vcpus - 4, 0) + 9) // 10  # 0.25% of a core is 2.5 milli: round up
    reserved_mib = 11 * max_pods + 255 + 100
    return InstanceType(
        name=name,
        gpu_count=gpus,
        gpu_model=model,
        gpu_memory_mib=gpu_memory_mib,
        cpu_milli=vcpus * 1000 - reserved_cpu,
        memory_mib=memory_gib * 1024 - reserved_mib,
        max_pods=max_pods,
    )


# Common GPU instance types. GPU memory figures are nominal, as in kgpu.model.skus (an
# "80 GB" GPU is 81920 MiB); CPU and memory are the advertised sizes.
CATALOGUE: Final[dict[str, InstanceType]] = {
    t.name: t
    for t in (
        instance_type("p4d.24xlarge", 96, 1152, 8, "NVIDIA-A100-SXM4-40GB", 40960),
        instance_type("p4de.24xlarge", 96, 1152, 8, "NVIDIA-A100-SXM4-80GB", 81920),
        instance_type("p5.48xlarge", 192, 2048, 8, "NVIDIA-H100-80GB-HBM3", 81920),
        instance_type("g5.xlarge", 4, 16, 1, "NVIDIA-A10G", 24576),
        instance_type("g5.12xlarge", 48, 192, 4, "NVIDIA-A10G", 24576),
        instance_type("g5.48xlarge", 192, 768, 8, "NVIDIA-A10G", 24576),
        instance_type("g6.xlarge", 4, 16, 1, "NVIDIA-L4", 24576),
        instance_type("g6.12xlarge", 48, 192, 4, "NVIDIA-L4", 24576),
        instance_type("g6.48xlarge", 192, 768, 8, "NVIDIA-L4", 24576),
    )
}


@dataclass(frozen=True, slots=True)
class NodePool:
    """A pool of nodes an autoscaler may launch, and the constraints its nodes carry.

    ``instance_types`` are in the user's order of preference. ``labels`` are the template's
    labels; ``requirements`` the template's requirements other than the instance type
    (already resolved into ``instance_types``). ``weight``: Karpenter tries pools of higher
    weight first. ``gpu_limit``: ``spec.limits[nvidia.com/gpu]``, None when unlimited.
    """

    name: str
    instance_types: tuple[InstanceType, ...]
    labels: tuple[tuple[str, str], ...] = ()
    requirements: tuple[NodeRequirement, ...] = ()
    taints: tuple[Taint, ...] = ()
    weight: int = 0
    gpu_limit: int | None = None

    def offering(self, model: str) -> tuple[InstanceType, ...]:
        """The GPU instance types of the pool with GPUs of ``model`` ("": any model)."""
        return tuple(
            t for t in self.instance_types if t.gpu_count and (not model or t.gpu_model == model)
        )

    def can_label(self, key: str, value: str) -> bool | None:
        """Whether this pool's nodes can carry ``key=value``: True or False when the pool
        decides the label, None when it says nothing about the key."""
        labels = dict(self.labels)
        if key in labels:
            return labels[key] == value
        found = [r for r in self.requirements if r.key == key]
        if found:
            return all(r.allows(value) for r in found)
        return None

    def node_labels(self, itype: InstanceType) -> dict[str, str]:
        """The labels a node launched from this pool carries once GFD has run on it."""
        labels = dict(self.labels)
        for req in self.requirements:
            if req.operator == "In" and len(req.values) == 1:
                labels.setdefault(req.key, req.values[0])  # Karpenter sets one-value requirements
        labels[NODEPOOL_LABEL] = self.name
        labels[INSTANCE_TYPE_LABEL] = itype.name
        if itype.gpu_count:
            labels[GPU_PRODUCT_LABEL] = itype.gpu_model
            labels[GPU_COUNT_LABEL] = str(itype.gpu_count)
            labels[GPU_MEMORY_LABEL] = str(itype.gpu_memory_mib)
        return labels

    def node(self, name: str, itype: InstanceType) -> NodeInfo:
        """A node of this pool, as the scheduler sees it once it is Ready."""
        return NodeInfo(
            name=NodeName(name),
            cpu_milli=itype.cpu_milli,
            memory_mib=itype.memory_mib,
            gpu_count=itype.gpu_count,
            gpu_model=itype.gpu_model if itype.gpu_count else "",
            gpu_memory_mib=itype.gpu_memory_mib if itype.gpu_count else 0,
            max_pods=itype.max_pods,
            labels=self.node_labels(itype),
            taints=self.taints,
        )


def model_memory(pools: tuple[NodePool, ...] = ()) -> dict[str, int]:
    """GPU memory (MiB per GPU) of every model the pools or the catalogue know of.

    Pools come first: a user's instance type says more about their cluster than the
    catalogue does.
    """
    out: dict[str, int] = {}
    for pool in pools:
        for t in pool.instance_types:
            if t.gpu_count:
                out.setdefault(t.gpu_model, t.gpu_memory_mib)
    for t in CATALOGUE.values():
        out.setdefault(t.gpu_model, t.gpu_memory_mib)
    return out
