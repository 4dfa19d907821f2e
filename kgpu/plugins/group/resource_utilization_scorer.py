"""ResourceUtilizationScorer: the least GPU memory left idle per replica scores highest.

A replica takes whole nodes (``k`` of them when it spans), so what it wastes is
``k × node memory − requirement``. The score is the share of the taken memory the replica
uses, 100 × requirement / (k × node memory): on 0..100 without normalising, and, since the
requirement is the same for every group of one cycle, ordered exactly as the waste is
(less waste, higher score). An 8 GB model prefers a 24 GB A10 (33) to a 4 × 40 GB A100
node (5), keeping large nodes for the models that need them.
"""

from __future__ import annotations

from kgpu.framework.groups import GroupCycle, GroupScorePlugin
from kgpu.framework.interfaces import FloatArray, IntArray
from kgpu.model.workspace import WorkspaceSpec
from kgpu.plugins import names


class ResourceUtilizationScorer:
    name = names.RESOURCE_UTILIZATION_SCORER

    def score_groups(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, groups: IntArray
    ) -> FloatArray:
        taken = cycle.nodes_per_replica(groups) * cycle.node_memory_mib[groups]
        scores: FloatArray = 100.0 * workspace.gpu_memory_mib / taken
        return scores


_: type[GroupScorePlugin] = ResourceUtilizationScorer
