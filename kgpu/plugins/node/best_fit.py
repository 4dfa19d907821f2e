"""Best-fit: the node left with the least CPU and GPU after placement, min-max normalised.

The paper's simulator scores int(100 × (1 − ½·cpu_slack/128000 − ½·gpu_slack/8000)) and
normalises over the cycle's feasible nodes with integer division (all 0 when equal).
"""

from __future__ import annotations

import math

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, NodeByNodeScore, NormalizeScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.dot_product import MAX_SPEC_CPU, MAX_SPEC_GPU
from kgpu.state.cluster import ClusterState

# Up to this many nodes a call scores each in Python (a cycle mostly scores again the one
# node the last placement changed), where the arrays' dozen operations cost more.
_FEW_NODES = 16


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
        if len(nodes) <= _FEW_NODES:
            return np.array([_one(state, pod, n) for n in nodes.tolist()], dtype=np.float64)
        cpu_slack = (state.cpu_free[nodes] - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
        gpu_slack = (state.gpu_free_total[nodes] - pod.gpu.total_milli) / MAX_SPEC_GPU * 0.5
        return np.asarray(np.trunc((1.0 - (cpu_slack + gpu_slack)) * 100.0), dtype=np.float64)

    def score_one(self, cycle: CycleState, pod: PodSpec, node: int) -> float:
        return _one(cycle.state, pod, node)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return min_max_normalize(scores)


def _one(state: ClusterState, pod: PodSpec, node: int) -> float:
    """The array path's score of one node, the same float: the same operations on doubles,
    and the sign of a zero as ``np.trunc`` leaves it."""
    gpu_free, cpu_free, _ = state.idle_room(node)
    cpu_slack = (cpu_free - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
    gpu_slack = (gpu_free - pod.gpu.total_milli) / MAX_SPEC_GPU * 0.5
    raw = (1.0 - (cpu_slack + gpu_slack)) * 100.0
    return math.copysign(float(math.trunc(raw)), raw)


_: type[NormalizeScorePlugin] = BestFit
__: type[NodeByNodeScore] = BestFit
