"""Node groups, and the extension points that filter and score them for a workspace.

An inference workspace is not placed pod by pod: all its replicas go to one homogeneous
group of nodes, identified by GPU product, GPUs per node and memory per GPU (KAITO's
``NodeGroupIdentifier``, read from GPU Feature Discovery labels). The unit a filter judges
is therefore a node group, and these are the pod framework's extension points over that
unit, with the same conventions:

- one ``Protocol`` per extension point, runtime-checkable, a plugin implements only those
  it needs, and its name comes from :mod:`kgpu.plugins.names`;
- filters answer with :class:`~kgpu.framework.interfaces.Verdicts` (a pass mask and a
  :class:`~kgpu.framework.status.Reason` per rejected mask) over index arrays;
- per-cycle data sits in a :class:`GroupCycle` under keys namespaced by plugin;
- the plugins come from the one registry (``default_registry()``) and a profile in YAML.

There are two kinds of filter, because the design's filters narrow two things: some reject
single nodes (a node without ``nvidia.com/gpu``, a node the selector does not match) and a
group is left with fewer eligible nodes; the others judge a group as a whole (enough nodes
for the replicas, enough GPU memory). The pod Protocols could not serve here unchanged: they
take a ``PodSpec`` and index into a ``ClusterState``, and a workspace is neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kgpu.framework.interfaces import BoolArray, FloatArray, IntArray, Plugin, Verdicts
from kgpu.framework.profile import WeightedPlugin
from kgpu.framework.status import Reason
from kgpu.model.node import NodeName
from kgpu.model.workspace import WorkspaceSpec

# ---------------------------------------------------------------------------- groups


@dataclass(frozen=True, slots=True, order=True)
class NodeGroupKey:
    """What makes nodes interchangeable for a replica: (GPU product, GPUs, MiB per GPU).

    Ordered by its fields, which is the last tie-break between equally good groups.
    """

    product: str
    gpu_count: int
    gpu_memory_mib: int

    @property
    def node_gpu_memory_mib(self) -> int:
        return self.gpu_count * self.gpu_memory_mib

    def __str__(self) -> str:
        # The KAITO design's notation: {A100, 4, 40960}.
        return f"{{{self.product}, {self.gpu_count}, {self.gpu_memory_mib}}}"

    def encode(self) -> str:
        """ "A100:4:40960": the form stored in a Workspace's status and its workload."""
        return f"{self.product}:{self.gpu_count}:{self.gpu_memory_mib}"

    @staticmethod
    def decode(text: str) -> NodeGroupKey:
        """The inverse of :meth:`encode`; ``ValueError`` for anything else."""
        product, count, memory = text.rsplit(":", 2)
        if not product or not count.isdigit() or not memory.isdigit():
            raise ValueError(f"{text!r} is not PRODUCT:GPUS:MIB")
        return NodeGroupKey(product, int(count), int(memory))


@dataclass(frozen=True, slots=True)
class GroupNode:
    """A node as the group scheduler sees it.

    ``gpu_allocatable`` is the ``nvidia.com/gpu`` the device plugin advertises (not GFD's
    count of the hardware: a GPU the plugin does not offer cannot be requested);
    ``gpu_in_use`` what pods already hold of it.
    """

    name: NodeName
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    gpu_allocatable: int = 0
    gpu_in_use: int = 0
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class NodeGroup:
    key: NodeGroupKey
    nodes: tuple[GroupNode, ...]


# ---------------------------------------------------------------------------- verdicts


@dataclass(slots=True)
class GroupVerdicts(Verdicts):
    """Verdicts over groups, with what a person needs to act on each rejection.

    ``details`` maps a position in the given groups to the figures behind its rejection
    ("3 replicas x 1 node each = 3 nodes needed, 2 eligible").
    """

    details: dict[int, str] = field(default_factory=dict)

    @staticmethod
    def passing(count: int) -> GroupVerdicts:
        return GroupVerdicts(np.ones(count, dtype=np.bool_))

    def reject_each(self, reason: Reason, mask: BoolArray, details: Sequence[str]) -> None:
        """Reject ``mask`` for ``reason``; ``details[i]`` explains position ``i``."""
        new = mask & self.ok
        for pos in np.flatnonzero(new).tolist():
            self.details[pos] = details[pos]
        self.reject(reason, new)


# ---------------------------------------------------------------------------- cycle


class GroupCycle:
    """One workspace's pass over the node groups.

    The groups' nodes are laid out in one flat array (group by group), so node filters work
    on index arrays as the pod filters do; ``eligible`` is the mask of nodes that every node
    filter so far has passed. Plugins keep their own data under their name.
    """

    __slots__ = (
        "_data",
        "eligible",
        "gpu_allocatable",
        "gpu_count",
        "gpu_in_use",
        "gpu_memory_mib",
        "groups",
        "node_group",
        "node_memory_mib",
        "nodes",
        "unschedulable",
        "workspace",
    )

    def __init__(self, groups: Sequence[NodeGroup], workspace: WorkspaceSpec) -> None:
        self.groups = tuple(groups)
        self.workspace = workspace
        self.nodes = tuple(node for group in self.groups for node in group.nodes)
        sizes = [len(group.nodes) for group in self.groups]
        self.node_group: IntArray = np.repeat(np.arange(len(self.groups), dtype=np.int64), sizes)
        self.eligible = np.ones(len(self.nodes), dtype=np.bool_)
        self.gpu_allocatable = np.array([n.gpu_allocatable for n in self.nodes], dtype=np.int64)
        self.gpu_in_use = np.array([n.gpu_in_use for n in self.nodes], dtype=np.int64)
        self.unschedulable = np.array([n.unschedulable for n in self.nodes], dtype=np.bool_)
        keys = [group.key for group in self.groups]
        self.gpu_count = np.array([k.gpu_count for k in keys], dtype=np.int64)
        self.gpu_memory_mib = np.array([k.gpu_memory_mib for k in keys], dtype=np.int64)
        self.node_memory_mib = self.gpu_count * self.gpu_memory_mib
        self._data: dict[str, Any] = {}

    def eligible_count(self, groups: IntArray) -> IntArray:
        """Eligible nodes of each of ``groups``."""
        counts = np.bincount(self.node_group[self.eligible], minlength=len(self.groups))
        return counts[groups].astype(np.int64)

    def nodes_per_replica(self, groups: IntArray) -> IntArray:
        """Nodes of each group one replica spans: ceil(requirement / node GPU memory).

        Grouping keeps out nodes whose labels give no GPU memory, so the division is safe.
        """
        return -(-self.workspace.gpu_memory_mib // self.node_memory_mib[groups])

    def write(self, plugin: str, value: Any) -> None:
        self._data[plugin] = value

    def read(self, plugin: str) -> Any:
        return self._data[plugin]

    def get(self, plugin: str, default: Any = None) -> Any:
        return self._data.get(plugin, default)


# ---------------------------------------------------------------------------- extension points


@runtime_checkable
class GroupNodeFilterPlugin(Plugin, Protocol):
    def filter_nodes(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, nodes: IntArray
    ) -> Verdicts:
        """Say which of ``nodes`` (flat indices into ``cycle.nodes``) the workspace may use."""
        ...


@runtime_checkable
class GroupFilterPlugin(Plugin, Protocol):
    def filter_groups(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, groups: IntArray
    ) -> GroupVerdicts:
        """Say which of ``groups`` (indices into ``cycle.groups``) can hold every replica."""
        ...


@runtime_checkable
class GroupScorePlugin(Plugin, Protocol):
    def score_groups(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, groups: IntArray
    ) -> FloatArray:
        """Scores of the feasible ``groups`` on 0..100; higher is better."""
        ...


# ---------------------------------------------------------------------------- profile


class GroupProfile(BaseModel):
    """The plugins of a node-group cycle, as a pod :class:`~kgpu.framework.profile.Profile`
    names them: filters in order, weighted scores, per-plugin arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str
    description: str = ""
    filters: tuple[str, ...] = ()
    scores: tuple[WeightedPlugin, ...] = ()
    plugin_args: dict[str, dict[str, Any]] = Field(default_factory=dict, alias="pluginArgs")


# ---------------------------------------------------------------------------- reasons
# Beside the group extension points rather than in :mod:`kgpu.framework.reasons`, which
# holds the pod filters' reasons; the same Reason type, so reports and events read alike.

NO_GPU_RESOURCE = Reason("NoGPUResource", "node(s) had no nvidia.com/gpu capacity")
GPUS_NOT_ALLOCATABLE = Reason(
    "GPUsNotAllocatable", "node(s) offered fewer nvidia.com/gpu than their gpu.count label"
)
GPUS_IN_USE = Reason("GPUsInUse", "node(s) had GPUs held by other pods")
LABEL_SELECTOR_MISMATCH = Reason(
    "LabelSelectorMismatch", "node(s) didn't match the workspace's label selector"
)
INSTANCE_TYPE_MISMATCH = Reason(
    "InstanceTypeMismatch", "node(s) were not of the workspace's instance type"
)
INSUFFICIENT_GROUP_MEMORY = Reason(
    "InsufficientGPUMemory", "node group had too little GPU memory for the replicas"
)
TOO_FEW_NODES = Reason("TooFewNodes", "node group had too few nodes for the replicas")
