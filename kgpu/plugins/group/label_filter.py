"""LabelFilter: only nodes the workspace's ``resource.labelSelector`` matches.

Under node auto-provisioning (``resource.instanceType`` set) a node must also be of that
instance type (``node.kubernetes.io/instance-type``): existing nodes of another type are not
what the workspace asked to be provisioned on. The two are told apart in the reasons, since
the fixes differ (relabel the node, or change the instance type).
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.groups import (
    INSTANCE_TYPE_MISMATCH,
    LABEL_SELECTOR_MISMATCH,
    GroupCycle,
    GroupNodeFilterPlugin,
)
from kgpu.framework.interfaces import IntArray, Verdicts
from kgpu.model.workspace import INSTANCE_TYPE_LABEL, WorkspaceSpec
from kgpu.plugins import names


class LabelFilter:
    name = names.LABEL_FILTER

    def filter_nodes(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, nodes: IntArray
    ) -> Verdicts:
        selector = workspace.selector
        all_nodes = cycle.nodes
        # Selectors are arbitrary expressions over a node's labels: one test per node. A
        # workspace is placed once, at creation, over at most a few thousand nodes.
        unmatched = np.array(
            [not selector.matches(all_nodes[i].labels) for i in nodes.tolist()], dtype=np.bool_
        )
        verdicts = Verdicts.all_pass(len(nodes))
        verdicts.reject(LABEL_SELECTOR_MISMATCH, unmatched)
        if workspace.instance_type:
            other_type = np.array(
                [
                    all_nodes[i].labels.get(INSTANCE_TYPE_LABEL) != workspace.instance_type
                    for i in nodes.tolist()
                ],
                dtype=np.bool_,
            )
            verdicts.reject(INSTANCE_TYPE_MISMATCH, other_type)
        return verdicts


_: type[GroupNodeFilterPlugin] = LabelFilter
