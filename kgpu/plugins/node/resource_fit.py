"""NodeResourcesFit: CPU, memory and the node's pod limit."""

from __future__ import annotations

import numpy as np

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import IntArray, NodeByNodeFilter, Verdicts
from kgpu.framework.status import Reason
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.filter_verdicts import asks_most, first_reasons, one_by_one
from kgpu.state.cluster import ClusterState

# Up to this many nodes, a call judges each in Python: a cycle mostly re-checks the few
# nodes changed since, where a dozen array operations cost more than reading each node's
# figures as Python ints (``ClusterState.room``).
_FEW_NODES = 16


class NodeResourcesFit:
    """A node rejected for several of these keeps the first: pod limit, CPU, memory."""

    name = names.NODE_RESOURCES_FIT

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        state = cycle.state
        if len(nodes) <= _FEW_NODES:
            return one_by_one([_why_not(state, pod, n) for n in nodes.tolist()])
        if asks_most(state, nodes):
            return first_reasons(
                nodes,
                (
                    (reasons.TOO_MANY_PODS, state.pods >= state.max_pods),
                    (reasons.INSUFFICIENT_CPU, state.cpu_free < pod.cpu_milli),
                    (reasons.INSUFFICIENT_MEMORY, state.mem_free < pod.memory_mib),
                ),
            )
        full = state.pods[nodes] >= state.max_pods[nodes]
        short_cpu = state.cpu_free[nodes] < pod.cpu_milli
        short_mem = state.mem_free[nodes] < pod.memory_mib
        bad = full | short_cpu | short_mem
        if not np.count_nonzero(bad):  # the common case: no reasons to sort out
            return Verdicts(~bad)
        verdicts = Verdicts.all_pass(len(nodes))
        verdicts.reject(reasons.TOO_MANY_PODS, full)
        verdicts.reject(reasons.INSUFFICIENT_CPU, short_cpu)
        verdicts.reject(reasons.INSUFFICIENT_MEMORY, short_mem)
        return verdicts

    def judges_one(self, pod: PodSpec) -> bool:
        return True

    def why_not_one(self, cycle: CycleState, pod: PodSpec, node: int) -> Reason | None:
        return _why_not(cycle.state, pod, node)


def _why_not(state: ClusterState, pod: PodSpec, node: int) -> Reason | None:
    """The array path's verdict on one node."""
    cpu, memory, slots = state.room(node)
    if slots <= 0:  # as many pods as the node allows, or more
        return reasons.TOO_MANY_PODS
    if cpu < pod.cpu_milli:
        return reasons.INSUFFICIENT_CPU
    if memory < pod.memory_mib:
        return reasons.INSUFFICIENT_MEMORY
    return None


_: type[NodeByNodeFilter] = NodeResourcesFit
