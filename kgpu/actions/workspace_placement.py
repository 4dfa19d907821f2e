"""Nodes into node groups by their GPU Feature Discovery labels, and a workspace onto them.

Grouping reads the three GFD labels, ``nvidia.com/gpu.product``, ``nvidia.com/gpu.count`` and
``nvidia.com/gpu.memory`` (MiB per GPU); a node that lacks one, or has a count or memory that
is not a positive whole number, is in no group, and the denial says how many such nodes
there are, since "no group fits" would otherwise hide an unlabelled cluster.

:func:`place_workspace` is the one decision both the admission webhook and the Workspace
controller (and ``kgpu simulate workspaces``) make:

- bring your own nodes (no ``instanceType``): the group cycle picks a group; the workload
  then selects its nodes by ``nvidia.com/gpu.product``;
- node auto-provisioning (``instanceType`` set): existing nodes of that type are used when
  a group of them fits; otherwise the SKU table says how many nodes of the type the
  workspace needs, and the placement reports how many are still to be provisioned. An
  instance type missing from the table falls back to existing nodes of that type alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from kgpu.framework.group_scheduler import GroupChoice, GroupReport, GroupScheduler, NoGroup
from kgpu.framework.groups import GroupNode, NodeGroup, NodeGroupKey
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.skus import SKUS, plan_nodes
from kgpu.model.workspace import INSTANCE_TYPE_LABEL, WorkspaceSpec, nodes_per_replica

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"


@dataclass(frozen=True, slots=True)
class Grouping:
    """The groups, by key, each with its nodes by name; and the nodes in no group, with why."""

    groups: tuple[NodeGroup, ...]
    ungrouped: tuple[tuple[NodeName, str], ...] = ()

    def notes(self) -> tuple[str, ...]:
        if not self.ungrouped:
            return ()
        shown = ", ".join(f"{name} ({why})" for name, why in self.ungrouped[:3])
        more = f" and {len(self.ungrouped) - 3} more" if len(self.ungrouped) > 3 else ""
        return (f"{len(self.ungrouped)} node(s) in no group: {shown}{more}",)


def group_key(labels: Mapping[str, str]) -> NodeGroupKey | str:
    """The node's group from its GFD labels, or why it has none."""
    missing = [k for k in (GPU_PRODUCT_LABEL, GPU_COUNT_LABEL, GPU_MEMORY_LABEL) if k not in labels]
    if missing:
        return "no " + ", ".join(missing) + " label"
    numbers = []
    for label in (GPU_COUNT_LABEL, GPU_MEMORY_LABEL):
        text = labels[label]
        if not text.isdigit() or int(text) == 0:
            return f"label {label} is {text!r}, expected a positive whole number"
        numbers.append(int(text))
    return NodeGroupKey(labels[GPU_PRODUCT_LABEL], numbers[0], numbers[1])


def group_nodes(nodes: Iterable[GroupNode]) -> Grouping:
    buckets: dict[NodeGroupKey, list[GroupNode]] = {}
    ungrouped: list[tuple[NodeName, str]] = []
    for node in nodes:
        key = group_key(node.labels)
        if isinstance(key, str):
            ungrouped.append((node.name, key))
        else:
            buckets.setdefault(key, []).append(node)
    # Sorted, so that the same cluster listed in another order gives the same cycle.
    groups = tuple(
        NodeGroup(key, tuple(sorted(buckets[key], key=lambda n: n.name))) for key in sorted(buckets)
    )
    return Grouping(groups, tuple(sorted(ungrouped)))


def group_node(
    info: NodeInfo, gpu_allocatable: int | None = None, gpu_in_use: int = 0
) -> GroupNode:
    """A model node as the group scheduler sees it.

    ``NodeInfo.gpu_count`` is the device plugin's figure when the node advertises one and
    GFD's count otherwise; the edge, which sees the raw object, passes the advertised
    ``gpu_allocatable`` so that a node without a device plugin is not taken for one with.
    """
    allocatable = info.gpu_count if gpu_allocatable is None else gpu_allocatable
    return GroupNode(info.name, dict(info.labels), allocatable, gpu_in_use, info.unschedulable)


# ---------------------------------------------------------------------------- placement


@dataclass(frozen=True, slots=True)
class WorkspacePlacement:
    """Where a workspace's replicas go, in the terms its workload is rendered in.

    ``node_selector`` is added to the workspace's own selector (the GPU product, or the
    instance type under NAP). ``nodes`` are the existing eligible nodes of the group, by
    name; ``provision`` the nodes of ``instance_type`` still to be provisioned.
    """

    workspace: WorkspaceSpec
    key: NodeGroupKey
    nodes_per_replica: int
    node_selector: tuple[tuple[str, str], ...]
    nodes: tuple[NodeName, ...] = ()
    provision: int = 0
    instance_type: str = ""
    reports: tuple[GroupReport, ...] = ()

    @property
    def nodes_needed(self) -> int:
        return self.workspace.replicas * self.nodes_per_replica

    @property
    def summary(self) -> str:
        k = self.nodes_per_replica
        text = (
            f"node group {self.key}: {self.workspace.replicas} replica(s) x {k} "
            f"node{'' if k == 1 else 's'} each = {self.nodes_needed} node(s)"
        )
        if not self.instance_type:
            return text + f", {len(self.nodes)} eligible"
        existing = max(len(self.nodes), self.nodes_needed - self.provision)
        return (
            text + f" of {self.instance_type}, {existing} existing, {self.provision} to provision"
        )


Placement = WorkspacePlacement | NoGroup


def place_workspace(
    scheduler: GroupScheduler, workspace: WorkspaceSpec, grouping: Grouping
) -> Placement:
    outcome = scheduler.schedule(grouping.groups, workspace)
    notes = grouping.notes()
    it = workspace.instance_type
    if isinstance(outcome, GroupChoice):
        return WorkspacePlacement(
            workspace,
            outcome.key,
            outcome.nodes_per_replica,
            placement_selector(workspace, outcome.key),
            outcome.nodes,
            instance_type=it,
            reports=outcome.reports,
        )
    if not it:
        return replace(outcome, notes=outcome.notes + notes)
    sku = SKUS.get(it)
    if sku is None:
        why = f"instanceType {it} is not in kgpu's SKU table, so only existing nodes of that type count"
        return replace(outcome, notes=(*outcome.notes, why, *notes))
    # Not enough existing nodes of the type: the rest is provisioned, sized from the SKU.
    plan = plan_nodes(sku, workspace.replicas, workspace.gpu_memory_mib)
    # The label filter kept only nodes of the type: the best group's eligible nodes count.
    existing = max((r.eligible for r in outcome.reports), default=0)
    key = NodeGroupKey(sku.gpu_product, sku.gpu_count, sku.gpu_memory_mib)
    return WorkspacePlacement(
        workspace,
        key,
        plan.nodes_per_replica,
        placement_selector(workspace, key),
        provision=max(0, plan.nodes - existing),
        instance_type=it,
        reports=outcome.reports,
    )


def placement_selector(workspace: WorkspaceSpec, key: NodeGroupKey) -> tuple[tuple[str, str], ...]:
    """What the workload selects besides the workspace's own selector.

    The group's GPU product keeps every replica on identical GPUs; under NAP the instance
    type does (and is the label a provisioner acts on: the product name GFD will write on
    a node that does not exist yet is not known for certain).
    """
    if workspace.instance_type:
        return ((INSTANCE_TYPE_LABEL, workspace.instance_type),)
    return ((GPU_PRODUCT_LABEL, key.product),)


def restore_placement(workspace: WorkspaceSpec, key: NodeGroupKey) -> WorkspacePlacement:
    """The placement of a workspace whose group was chosen before (and stored).

    The group is chosen once, at creation; later the replicas may change, and the
    workload is re-rendered on the same group without asking the scheduler again.
    """
    spans = nodes_per_replica(workspace.gpu_memory_mib, key.node_gpu_memory_mib)
    return WorkspacePlacement(
        workspace,
        key,
        spans,
        placement_selector(workspace, key),
        instance_type=workspace.instance_type,
    )
