"""Random-fit: one feasible node drawn uniformly at random scores 100, the others 0."""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names


class RandomScore:
    name = names.RANDOM
    cacheable = False  # a fresh draw every cycle

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        scores = np.zeros(len(nodes), dtype=np.float64)
        scores[self.rng.integers(len(nodes))] = 100.0
        return scores


_: type[ScorePlugin] = RandomScore
