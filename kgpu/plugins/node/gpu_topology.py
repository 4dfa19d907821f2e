"""GpuTopology: prefer nodes where a multi-GPU request fits inside one NVLink island.

A job of k GPUs that spans two islands talks over PCIe or the CPU interconnect; inside one
island it talks over NVLink. For a request of two or more whole GPUs, a node scores:

- 100 when its best idle set of k GPUs is connected by its fastest links (one island);
- below that, 50 × (slowest link of the best set) / (the node's fastest link class), so a
  set joined by PCIe beats one joined across NUMA nodes;
- 50 when the node's links are unknown: neither preferred over a node known to fit one
  island nor pushed below one known not to.

Every other request scores 0 everywhere, which changes no choice. The score depends on
the node's idle GPUs only, so the framework keeps it per pod shape and recomputes it on
the nodes that changed (``cacheable``).
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, ScorePlugin
from kgpu.model.gpu import GpuKind
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names
from kgpu.plugins.node.gpu_slots import linked_gpus

ONE_ISLAND = 100.0
UNKNOWN = 50.0


class GpuTopology:
    name = names.GPU_TOPOLOGY
    cacheable = True

    def zero_for(self, pod: PodSpec) -> bool:
        """Every request but one of two or more whole GPUs scores 0 on every node: the
        framework then neither asks nor adds this score (a replay's most pods)."""
        req = pod.gpu
        return req.kind is not GpuKind.GPU or req.milli != MILLI_PER_GPU or req.count < 2

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        req = pod.gpu
        if self.zero_for(pod):
            return np.zeros(len(nodes), dtype=np.float64)
        state = cycle.state
        out = np.full(len(nodes), UNKNOWN, dtype=np.float64)
        for i in np.flatnonzero(state.has_links[nodes]).tolist():
            node = int(nodes[i])
            best = linked_gpus(state, node, req.count)
            links = state.links[node]
            if best is None or links is None:
                out[i] = 0.0
                continue
            plan = links.plan()
            if plan.fits_one_island(best[1], req.count):
                out[i] = ONE_ISLAND
            else:
                out[i] = UNKNOWN * best[1] / max(plan.threshold, 1)
        return out


_: type[ScorePlugin] = GpuTopology
