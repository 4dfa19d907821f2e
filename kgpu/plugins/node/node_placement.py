"""NodePlacement: bin packing or spreading, chosen per profile for GPUs and for CPU apart.

KAI's node placement strategies as a node score. Arguments (``pluginArgs``):
``{"gpu": "binpack" | "spread", "cpu": "binpack" | "spread"}``, both ``binpack`` by default.

- A pod that asks for GPUs is scored by the GPU strategy: bin packing prefers the node whose
  GPUs would be the most used after placing it (filling nodes before opening new ones),
  spreading the least used. The CPU strategy breaks ties among nodes of equal GPU use.
- A pod that asks for no GPU is scored by the CPU strategy alone, on CPU use.

Scores are 0..100 (the GPU term) plus up to 1 (the tie-breaking CPU term); they depend on
one node's state and the pod's shape only, so the framework may keep them between pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names

BINPACK: Final = "binpack"
SPREAD: Final = "spread"
_STRATEGIES: Final = (BINPACK, SPREAD)


class NodePlacement:
    name = names.NODE_PLACEMENT
    cacheable = True

    def __init__(self, gpu: str = BINPACK, cpu: str = BINPACK) -> None:
        for what, value in (("gpu", gpu), ("cpu", cpu)):
            if value not in _STRATEGIES:
                raise ValueError(
                    f"{names.NODE_PLACEMENT} argument {what} is {value!r}, expected binpack or spread"
                )
        self.gpu = gpu
        self.cpu = cpu

    @staticmethod
    def from_args(args: Mapping[str, Any]) -> NodePlacement:
        unknown = set(args) - {"gpu", "cpu"}
        if unknown:
            raise ValueError(
                f"{names.NODE_PLACEMENT} arguments {sorted(unknown)} are unknown, expected gpu and cpu"
            )
        return NodePlacement(str(args.get("gpu", BINPACK)), str(args.get("cpu", BINPACK)))

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        state = cycle.state
        cap = np.maximum(state.cpu_cap[nodes], 1)
        cpu_used = (cap - state.cpu_free[nodes] + pod.cpu_milli) / cap
        cpu_term = 100.0 * (cpu_used if self.cpu == BINPACK else 1.0 - cpu_used)
        if pod.gpu.count == 0:
            return np.asarray(cpu_term, dtype=np.float64)
        gpu_cap = np.maximum(state.gpu_count[nodes] * MILLI_PER_GPU, 1)
        gpu_used = (gpu_cap - state.gpu_free_total[nodes] + pod.gpu.total_milli) / gpu_cap
        gpu_term = 100.0 * (gpu_used if self.gpu == BINPACK else 1.0 - gpu_used)
        return np.asarray(gpu_term + cpu_term / 100.0, dtype=np.float64)


_: type[ScorePlugin] = NodePlacement
