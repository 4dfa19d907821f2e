"""GPU fragmentation of a node, measured against the workload's typical pods (FGD, ATC'23).

For a typical pod t, a node's fragment is the idle GPU milli that t cannot use: all of the
node's idle milli when t cannot run there at all (t asks for no GPU, the GPU model is not
allowed, the CPU or the GPUs are too few), and otherwise the idle milli on GPUs whose free
share is smaller than t's per-GPU share. A node's fragmentation is the weighted sum over
typical pods, the weights being how often each appears in the workload.

Per typical pod the fragment is an integer, and differences are taken per typical pod
before weighting, so "no change" is exactly zero: FGD's integer scores sit at 50 for it and
a rounding error in a float sum would tip them to 49.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.cluster import BoolArray, ClusterState, IntArray

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TypicalPod:
    """A pod shape of the workload and its share of the pods (weights sum to 1)."""

    weight: float
    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    models: tuple[str, ...] = ()
    memory_mib: int = 0  # the mean of its pods'; not part of the shape


def typical_pods(pods: Iterable[PodSpec], coverage: float = 0.95) -> list[TypicalPod]:
    """The most frequent shapes (CPU, per-GPU milli, GPU count, allowed models) that together
    cover ``coverage`` of the pods, weights renormalised to sum to 1.

    Memory does not tell shapes apart, as in the paper; each shape carries its pods' mean
    memory, which only kgpu's stranding term reads. Equal counts are ordered by descending
    CPU, milli, count and model list, which fixes which shapes make the cut.
    """
    counts: Counter[tuple[int, int, int, str]] = Counter()
    memory: Counter[tuple[int, int, int, str]] = Counter()
    for pod in pods:
        g = pod.gpu
        shape = (pod.cpu_milli, g.milli if g.count else 0, g.count, "|".join(g.models))
        counts[shape] += 1
        memory[shape] += pod.memory_mib
    total = sum(counts.values())
    if total == 0:
        return []
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    kept: list[tuple[tuple[int, int, int, str], int]] = []
    covered = 0
    expected = int(coverage * 100) * total // 100
    for shape, count in ranked:
        if covered >= expected and kept:
            break
        kept.append((shape, count))
        covered += count
    return [
        TypicalPod(
            weight=(count / total) / (covered / total),
            cpu_milli=cpu,
            gpu_milli=milli,
            gpu_count=num,
            models=tuple(m for m in spec.split("|") if m),
            memory_mib=round(memory[(cpu, milli, num, spec)] / count),
        )
        for (cpu, milli, num, spec), count in kept
    ]


class FragmentModel:
    """The typical pods as arrays, bound to one cluster's GPU model ids."""

    def __init__(self, typical: list[TypicalPod], state: ClusterState) -> None:
        self.typical = typical
        self.weights: FloatArray = np.array([t.weight for t in typical], dtype=np.float64)
        self.cpu: IntArray = np.array([t.cpu_milli for t in typical], dtype=np.int64)
        self.milli: IntArray = np.array([t.gpu_milli for t in typical], dtype=np.int64)
        self.count: IntArray = np.array([t.gpu_count for t in typical], dtype=np.int64)
        # model_ok[m + 1, t]: can typical pod t use GPU model id m (row 0: no GPU at all)?
        self.model_ok = np.zeros((len(state.models) + 1, len(typical)), dtype=np.bool_)
        for j, t in enumerate(typical):
            if t.gpu_count == 0:
                continue  # a pod without GPUs leaves every idle GPU idle: never "fits"
            for m, name in enumerate(state.models):
                self.model_ok[m + 1, j] = not t.models or name in t.models

    def _gpu_parts(self, free: IntArray) -> tuple[BoolArray, IntArray, IntArray]:
        """Per node and typical pod: GPUs big enough (K,G,T), their milli and count (K,T)."""
        big = free[:, :, None] >= self.milli[None, None, :]
        usable = (free[:, :, None] * big).sum(axis=1)
        enough = big.sum(axis=1)
        return big, usable, enough

    def _allowed(self, cpu: IntArray, model: IntArray) -> BoolArray:
        """Per node and typical pod (K,T): whether the GPU model and the CPU allow the pod."""
        return np.asarray(
            self.model_ok[model + 1] & (cpu[:, None] >= self.cpu[None, :]), dtype=np.bool_
        )

    def _fragments(
        self, idle: IntArray, usable: IntArray, enough: IntArray, allowed: BoolArray
    ) -> IntArray:
        fits = allowed & (enough >= self.count[None, :])
        return np.asarray(idle[:, None] - np.where(fits, usable, 0), dtype=np.int64)

    def fragments(self, state: ClusterState, nodes: IntArray) -> IntArray:
        """Per node and typical pod, the fragment in milli (K,T)."""
        _, usable, enough = self._gpu_parts(state.gpu_free[nodes])
        allowed = self._allowed(state.cpu_free[nodes], state.model_id[nodes])
        return self._fragments(state.gpu_free_total[nodes], usable, enough, allowed)

    def node_fragmentation(self, state: ClusterState, nodes: IntArray) -> FloatArray:
        return np.asarray(self.fragments(state, nodes) @ self.weights, dtype=np.float64)

    def decrease_if_shared(self, state: ClusterState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        """Fragmentation before minus after placing a one-GPU share on each GPU (K,G);
        -inf where the share does not fit that GPU."""
        free = state.gpu_free[nodes]
        cpu = state.cpu_free[nodes]
        model = state.model_id[nodes]
        idle = state.gpu_free_total[nodes]
        share = pod.gpu.milli
        big, usable, enough = self._gpu_parts(free)
        before = self._fragments(idle, usable, enough, self._allowed(cpu, model))
        allowed_after = self._allowed(cpu - pod.cpu_milli, model)
        after_free = free - share
        big_after = after_free[:, :, None] >= self.milli[None, None, :]
        usable_after = (
            usable[:, None, :] - free[:, :, None] * big + after_free[:, :, None] * big_after
        )
        enough_after = enough[:, None, :] - big + big_after
        fits = allowed_after[:, None, :] & (enough_after >= self.count[None, None, :])
        idle_after = (idle - share)[:, None, None]
        frag_after = idle_after - np.where(fits, usable_after, 0)
        decrease = np.asarray((before[:, None, :] - frag_after) @ self.weights, dtype=np.float64)
        return np.where(free >= share, decrease, -np.inf)

    def decrease_if_whole(self, state: ClusterState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        """Fragmentation before minus after placing a whole-GPU or GPU-less pod (K,).

        Whole GPUs come out of the idle ones, which every typical pod could use, so each
        taken GPU lowers the usable milli by 1000 and the count of big-enough GPUs by one.
        """
        k = pod.gpu.count
        cpu = state.cpu_free[nodes]
        model = state.model_id[nodes]
        idle = state.gpu_free_total[nodes]
        _, usable, enough = self._gpu_parts(state.gpu_free[nodes])
        before = self._fragments(idle, usable, enough, self._allowed(cpu, model))
        allowed_after = self._allowed(cpu - pod.cpu_milli, model)
        fits = allowed_after & (enough - k >= self.count[None, :])
        idle_after = (idle - k * MILLI_PER_GPU)[:, None]
        frag_after = idle_after - np.where(fits, usable - k * MILLI_PER_GPU, 0)
        return np.asarray((before - frag_after) @ self.weights, dtype=np.float64)
