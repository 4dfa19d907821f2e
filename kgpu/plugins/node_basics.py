"""Filters every pod passes first: cordoned nodes, node selectors and taints."""

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

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        verdicts = Verdicts.all_pass(len(nodes))
        verdicts.reject(reasons.NODE_UNSCHEDULABLE, ~cycle.state.schedulable[nodes])
        return verdicts


class NodeSelector:
    """Rejects nodes whose labels do not carry every ``nodeSelector`` pair of the pod."""

    name = names.NODE_SELECTOR

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

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        verdicts = Verdicts.all_pass(len(nodes))
        all_nodes = cycle.state.nodes
        blocked = np.fromiter(
            (
                bool(all_nodes[i].taints)
                and untolerated(all_nodes[i].taints, pod.tolerations) is not None
                for i in nodes
            ),
            dtype=np.bool_,
            count=len(nodes),
        )
        verdicts.reject(reasons.UNTOLERATED_TAINT, blocked)
        return verdicts


_: type[FilterPlugin]
_ = NodeUnschedulable
_ = NodeSelector
_ = TaintToleration
