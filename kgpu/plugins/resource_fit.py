"""NodeResourcesFit: CPU, memory and the node's pod limit."""

from __future__ import annotations

import numpy as np

from kgpu.framework import reasons
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.model.pod import PodSpec
from kgpu.plugins import names


class NodeResourcesFit:
    """A node rejected for several of these keeps the first: pod limit, CPU, memory."""

    name = names.NODE_RESOURCES_FIT

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        state = cycle.state
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


_: type[FilterPlugin] = NodeResourcesFit
