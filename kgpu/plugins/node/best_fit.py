"""Best-fit: the node left with the least CPU and GPU after placement, min-max normalised.

The paper's simulator scores int(100 × (1 − ½·cpu_slack/128000 − ½·gpu_slack/8000)) and
normalises over the cycle's feasible nodes with integer division (all 0 when equal).
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, NormalizeScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.dot_product import MAX_SPEC_CPU, MAX_SPEC_GPU


def min_max_normalize(scores: FloatArray) -> FloatArray:
    """Integer min-max onto 0..100, as kube-scheduler plugins normalise (all 0 if equal).

    The scores are whole numbers (``BestFit.score`` truncates), so the floor of the true
    quotient is exactly the integer division: a quotient short of a whole number by at
    least 1/(high − low) cannot round up to it. ``np.floor_divide`` on floats gives the
    same figures at five times the cost, and this runs once a cycle over every feasible node.
    """
    if len(scores) == 0:
        return scores
    low, high = scores.min(), scores.max()
    if high == low:
        return np.zeros_like(scores)
    return np.asarray(np.floor((scores - low) * 100.0 / (high - low)), dtype=np.float64)


class BestFit:
    name = names.BEST_FIT
    cacheable = True
    # Integer min-max gives 100 exactly where the raw score is highest: a quotient short of
    # 100 by at least 100 / (high − low) never floors to it.
    normalize_keeps_best = True

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        state = cycle.state
        cpu_slack = (state.cpu_free[nodes] - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
        gpu_slack = (state.gpu_free_total[nodes] - pod.gpu.total_milli) / MAX_SPEC_GPU * 0.5
        return np.asarray(np.trunc((1.0 - (cpu_slack + gpu_slack)) * 100.0), dtype=np.float64)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return min_max_normalize(scores)


_: type[NormalizeScorePlugin] = BestFit
