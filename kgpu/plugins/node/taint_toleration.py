"""TaintToleration: the filter of nodes with a taint the pod does not tolerate.

Its verdicts depend only on a node's taints, never on what is placed, so it says
``static_verdicts = True`` and the scheduler asks it once per pod shape. Most clusters
taint few nodes or none: it checks the cluster-wide mask first and looks at single nodes
only where one is tainted.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.model.pod import PodSpec
from kgpu.model.taints import untolerated
from kgpu.plugins import names


class TaintToleration:
    """Rejects nodes with a NoSchedule or NoExecute taint that the pod does not tolerate."""

    name = names.TAINT_TOLERATION
    static_verdicts = True

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        verdicts = Verdicts.all_pass(len(nodes))
        state = cycle.state
        if not state.any_tainted:
            return verdicts
        tainted = state.tainted[nodes]
        if not np.count_nonzero(tainted):
            return verdicts
        all_nodes = state.nodes
        blocked = np.zeros(len(nodes), dtype=np.bool_)
        for pos in tainted.nonzero()[0].tolist():  # positions in ``nodes``
            taints = all_nodes[nodes[pos]].taints
            blocked[pos] = untolerated(taints, pod.tolerations) is not None
        verdicts.reject(reasons.UNTOLERATED_TAINT, blocked)
        return verdicts


_: type[FilterPlugin] = TaintToleration
