"""Filters every pod passes first: cordoned nodes, node selectors and taints.

Their verdicts depend only on a node's fixed facts (cordon, labels, taints), never on what
is placed, so each says ``static_verdicts = True`` and the scheduler asks it once per pod
shape. Most clusters cordon and taint few nodes or none: the filters check the
cluster-wide flag or mask first and look at single nodes only where one is cordoned or
tainted.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.model.pod import PodSpec
from kgpu.model.taints import untolerated
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


_: type[FilterPlugin]
_ = NodeUnschedulable
_ = NodeSelector
_ = TaintToleration
