"""NodeGroupSizeFilter: the group has a node for every replica, or as many as each spans.

Replicas are never packed onto one node (KAITO: "no bin-packing of multiple replicas on the
same node"): each replica's pods request every GPU of their node. A replica that needs more
GPU memory than one node has spans ceil(requirement / node memory) whole nodes, so the group
needs replicas × that many eligible nodes. A single 8-GPU node therefore cannot take two
replicas of a small model however much memory it has.
"""

from __future__ import annotations

from kgpu.framework.groups import TOO_FEW_NODES, GroupCycle, GroupFilterPlugin, GroupVerdicts
from kgpu.framework.interfaces import IntArray
from kgpu.model.workspace import WorkspaceSpec
from kgpu.plugins import names


class NodeGroupSizeFilter:
    name = names.NODE_GROUP_SIZE_FILTER

    def filter_groups(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, groups: IntArray
    ) -> GroupVerdicts:
        eligible = cycle.eligible_count(groups)
        spans = cycle.nodes_per_replica(groups)
        needed = workspace.replicas * spans
        verdicts = GroupVerdicts.passing(len(groups))
        short = eligible < needed
        if short.any():
            details = [
                f"{workspace.replicas} replicas x {k} node{'' if k == 1 else 's'} each = "
                f"{need} nodes needed, {n} eligible"
                for k, need, n in zip(
                    spans.tolist(), needed.tolist(), eligible.tolist(), strict=True
                )
            ]
            verdicts.reject_each(TOO_FEW_NODES, short, details)
        return verdicts


_: type[GroupFilterPlugin] = NodeGroupSizeFilter
