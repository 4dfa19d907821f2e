"""NodeSelector: the filter of nodes whose labels do not match the pod's ``nodeSelector``.

Its verdicts depend only on a node's labels, never on what is placed, so it says
``static_verdicts = True`` and the scheduler asks it once per pod shape.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.model.pod import PodSpec
from kgpu.plugins import names


class NodeSelector:
    """Rejects nodes whose labels do not carry every ``nodeSelector`` pair of the pod."""

    name = names.NODE_SELECTOR
    static_verdicts = True

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        verdicts = Verdicts.all_pass(len(nodes))
        if pod.node_selector:
            match = np.ones(len(nodes), dtype=np.bool_)
            for key, value in pod.node_selector:
                match &= cycle.state.label_mask(key, value)[nodes]
            verdicts.reject(reasons.NODE_SELECTOR_MISMATCH, ~match)
        return verdicts


_: type[FilterPlugin] = NodeSelector
