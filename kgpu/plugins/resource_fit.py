"""NodeResourcesFit: CPU, memory and the node's pod limit."""

from __future__ import annotations

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.model.pod import PodSpec
from kgpu.plugins import names


class NodeResourcesFit:
    name = names.NODE_RESOURCES_FIT

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        state = cycle.state
        verdicts = Verdicts.all_pass(len(nodes))
        verdicts.reject(reasons.TOO_MANY_PODS, state.pods[nodes] >= state.max_pods[nodes])
        verdicts.reject(reasons.INSUFFICIENT_CPU, state.cpu_free[nodes] < pod.cpu_milli)
        verdicts.reject(reasons.INSUFFICIENT_MEMORY, state.mem_free[nodes] < pod.memory_mib)
        return verdicts


_: type[FilterPlugin] = NodeResourcesFit
