"""NodeUnschedulable: the filter of cordoned nodes (``spec.unschedulable``).

Its verdicts depend only on a node's cordon, never on what is placed, so it says
``static_verdicts = True`` and the scheduler asks it once per pod shape. Most clusters
cordon few nodes or none: it checks the cluster-wide flag before any node.
"""

from __future__ import annotations

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.model.pod import PodSpec
from kgpu.plugins import names


class NodeUnschedulable:
    """Rejects cordoned nodes (``spec.unschedulable``)."""

    name = names.NODE_UNSCHEDULABLE
    static_verdicts = True

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        verdicts = Verdicts.all_pass(len(nodes))
        state = cycle.state
        if state.any_cordoned:
            verdicts.reject(reasons.NODE_UNSCHEDULABLE, ~state.schedulable[nodes])
        return verdicts


_: type[FilterPlugin] = NodeUnschedulable
