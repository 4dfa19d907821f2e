"""CapacityFilter: the group's eligible nodes hold at least replicas × per-replica memory.

KAITO's check (``preset.TotalGPUMemoryRequirement * inference.replicas``) over the nodes
that survived the node filters. It is the memory test alone: whether those nodes can also
be split into one replica per node (or per few nodes) is NodeGroupSizeFilter's, so that a
group with memory enough but in too few nodes says so rather than "insufficient memory".
"""

from __future__ import annotations

from kgpu.framework.groups import (
    INSUFFICIENT_GROUP_MEMORY,
    GroupCycle,
    GroupFilterPlugin,
    GroupVerdicts,
)
from kgpu.framework.interfaces import IntArray
from kgpu.model.workspace import WorkspaceSpec
from kgpu.plugins import names


class CapacityFilter:
    name = names.CAPACITY_FILTER

    def filter_groups(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, groups: IntArray
    ) -> GroupVerdicts:
        eligible = cycle.eligible_count(groups)
        node_memory = cycle.node_memory_mib[groups]
        total = eligible * node_memory
        need = workspace.total_gpu_memory_mib
        verdicts = GroupVerdicts.passing(len(groups))
        short = total < need
        if short.any():
            details = [
                f"{workspace.replicas} replicas x {workspace.gpu_memory_mib} MiB = {need} MiB "
                f"needed, {n} eligible nodes x {m} MiB = {t} MiB"
                for n, m, t in zip(
                    eligible.tolist(), node_memory.tolist(), total.tolist(), strict=True
                )
            ]
            verdicts.reject_each(INSUFFICIENT_GROUP_MEMORY, short, details)
        return verdicts


_: type[GroupFilterPlugin] = CapacityFilter
