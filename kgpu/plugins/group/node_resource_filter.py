"""NodeResourceFilter: only nodes that can run one replica's pod count towards a group.

A GFD label says what hardware a node has; the pod, though, requests ``nvidia.com/gpu``, so
a node whose device plugin offers none (or fewer than its ``gpu.count`` label, after a GPU
failed its health check) could never run it. A cordoned node, or one whose GPUs other pods
hold, cannot either: counting them would admit a workspace whose pods then stay pending.
"""

from __future__ import annotations

from kgpu.framework import reasons
from kgpu.framework.groups import (
    GPUS_IN_USE,
    GPUS_NOT_ALLOCATABLE,
    NO_GPU_RESOURCE,
    GroupCycle,
    GroupNodeFilterPlugin,
)
from kgpu.framework.interfaces import IntArray, Verdicts
from kgpu.model.workspace import WorkspaceSpec
from kgpu.plugins import names


class NodeResourceFilter:
    """A node rejected for several reasons keeps the first: no GPU, too few, cordoned, busy."""

    name = names.NODE_RESOURCE_FILTER

    def filter_nodes(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, nodes: IntArray
    ) -> Verdicts:
        allocatable = cycle.gpu_allocatable[nodes]
        # The pod of a replica asks for every GPU the group's label promises.
        wanted = cycle.gpu_count[cycle.node_group[nodes]]
        verdicts = Verdicts.all_pass(len(nodes))
        verdicts.reject(NO_GPU_RESOURCE, allocatable == 0)
        verdicts.reject(GPUS_NOT_ALLOCATABLE, allocatable < wanted)
        verdicts.reject(reasons.NODE_UNSCHEDULABLE, cycle.unschedulable[nodes])
        verdicts.reject(GPUS_IN_USE, allocatable - cycle.gpu_in_use[nodes] < wanted)
        return verdicts


_: type[GroupNodeFilterPlugin] = NodeResourceFilter
