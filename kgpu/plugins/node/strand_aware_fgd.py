"""kgpu's default placement: FGD, with GPUs that a node's CPU or memory can no longer serve
counted as fragmentation, holes in shared GPUs weighed by how likely a later share fills
them, and pods that ask for no GPU kept off idle GPUs.

FGD scores a node by int(100 × sigmoid(ΔF / 1000)), ΔF being how much the node's
fragmentation (measured against the workload's typical pods) drops with the placement.
FGD sees CPU only through each typical pod's threshold: a node's idle GPUs count as
fragment for a typical pod once its CPU falls below that pod's request, not before. On
the openb traces CPU is scarce next to the GPUs (an 8-GPU node has 12 cores per GPU, the
whole-GPU pods ask for 11 to 24), so nodes drift, one placement at a time, into holding
idle GPUs that no pod can use for want of CPU.

The workload says how much CPU a milli-GPU of typical work brings with it: ``r``, the
typical GPU pods' CPU over their GPU milli (frequency-weighted). A node with ``g`` idle
milli-GPU and ``c`` free milli-CPU can feed about ``c / r`` of them; the rest,
``max(0, g − c / r)``, is stranded. kgpu adds the drop in stranded milli to FGD's ΔF
before the sigmoid: stranded milli are idle milli that the typical pods cannot use, which
is what FGD's fragmentation counts, so they weigh one for one. This holds for every pod,
a GPU-less one included: its CPU strands GPUs too. Memory is read the same way (``m``,
MiB per milli-GPU, from the typical pods' mean memory), and a node feeds
``min(c / r, f / m)`` with ``f`` MiB free: where pods ask for much memory per core, a
node's memory runs out before its CPU.

A share also changes how much of its GPU the workload is expected to leave idle to the
end (``leftover.LeftoverModel``): a hole that common shares fill is worth little, one
that only rare shares fit is worth nearly all its milli. kgpu adds the drop in that
leftover to ΔF too, one for one, since it counts idle milli as well, and among GPUs and
nodes of equal score prefers the larger drop: where most pods take whole GPUs or none,
FGD scores most holes alike, and this is what tells them apart.

Among the nodes with the best score, a GPU-less pod goes to the node with the fewest idle
GPUs (ideally none: its CPU is then of no use to GPU work), and among those to the one
with the most CPU to spare, so no single node is drained. Inside a node a share goes, of
the GPUs scored equally, to the one whose leftover drops most, then the tightest (FGD
takes the lowest index). The tie-breaks stay below one score point, so the score always
wins. Other variants were measured on the openb traces and rejected (docs/POLICY.md).
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, GpuChoicePlugin, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names
from kgpu.plugins.node.fgd import FgdScore, sigmoid_score, sigmoid_scores_of
from kgpu.plugins.node.gpu_slots import lowest_idle_gpus
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import TypicalPod, best_per_node
from kgpu.state.leftover import LeftoverModel

# The tie-break stays strictly inside one FGD score point.
TIE_SPAN = 0.99
# Among nodes with equally few idle GPUs, spare CPU counts this much (idle GPUs count 1).
CPU_SPARE_WEIGHT = 0.5
# Inside a node, a tighter GPU wins only among GPUs of equal score and leftover drop.
_GPU_TIGHTNESS = 1e-6
# Up to this many nodes (or GPUs of a share) kgpu's own terms are worked out one by one in
# Python, past it over arrays. A decision of a shape seen before rescores only the nodes
# changed since, most often a handful, where a numpy call costs far more than its work
# (the openb replay). Both ways take the same IEEE operations in the same order, so
# they give the same figures to the last bit.
FEW = 64


def cpu_per_gpu_milli(typical: list[TypicalPod]) -> float:
    """Milli-CPU that a milli-GPU of the workload's typical GPU pods comes with; 0 when no
    typical pod asks for a GPU (then nothing is counted as stranded)."""
    return _per_gpu_milli(typical, [t.cpu_milli for t in typical])


def memory_per_gpu_milli(typical: list[TypicalPod]) -> float:
    """MiB of memory that a milli-GPU of the workload's typical GPU pods comes with; 0 when
    they ask for none (then memory strands nothing)."""
    return _per_gpu_milli(typical, [t.memory_mib for t in typical])


def _per_gpu_milli(typical: list[TypicalPod], amounts: list[int]) -> float:
    """Frequency-weighted amount per milli-GPU over the typical pods that take GPUs."""
    amount = sum(t.weight * a for t, a in zip(typical, amounts, strict=True) if t.gpu_count)
    gpu = sum(t.weight * t.gpu_milli * t.gpu_count for t in typical if t.gpu_count)
    return amount / gpu if gpu > 0 else 0.0


class StrandAwareFgd:
    name = names.STRAND_AWARE_FGD
    cacheable = True

    def __init__(self, typical: list[TypicalPod]) -> None:
        self.fgd = FgdScore(typical)
        self.cpu_per_milli = cpu_per_gpu_milli(typical)
        self.memory_per_milli = memory_per_gpu_milli(typical)
        self._leftover: LeftoverModel | None = None
        self._leftover_for = (0, 0)
        self._spans_of = (1, 1)
        self._spans_for = (0, 0)

    def leftover_model(self, state: ClusterState) -> LeftoverModel:
        bound_to = (state.serial, id(state))
        if self._leftover is None or self._leftover_for != bound_to:
            cpu_max = int(state.cpu_cap.max(initial=0))
            self._leftover = LeftoverModel(self.fgd.typical, cpu_max)
            self._leftover_for = bound_to
        return self._leftover

    def leftover_decrease(
        self, state: ClusterState, pod: PodSpec, free: IntArray, cpu: IntArray
    ) -> FloatArray:
        """Drop in the expected leftover of GPUs with ``free`` milli on nodes with ``cpu``
        milli-CPU free (both (P,)) if the share went on them."""
        model = self.leftover_model(state)
        after = model.leftover(free - pod.gpu.milli, cpu - pod.cpu_milli)
        return np.asarray(model.leftover(free, cpu) - after, dtype=np.float64)

    def stranded(self, idle_milli: IntArray, cpu_free: IntArray, mem_free: IntArray) -> FloatArray:
        """Idle milli-GPU beyond what the free CPU, or the free memory, can feed, in whole
        milli.

        Rounded so that before minus after is exact: a pod that strands nothing must leave
        ΔF exactly as FGD computes it, or the integer sigmoid may tip 50 to 49.
        """
        if self.cpu_per_milli <= 0:
            return np.zeros(len(idle_milli), dtype=np.float64)
        feedable = cpu_free / self.cpu_per_milli
        if self.memory_per_milli > 0:
            feedable = np.minimum(feedable, mem_free / self.memory_per_milli)
        return np.asarray(np.round(np.maximum(0.0, idle_milli - feedable)), dtype=np.float64)

    def stranded_of(self, idle_milli: int, cpu_free: int, mem_free: int) -> float:
        """``stranded`` of one node, in Python floats: the same operations, one by one."""
        if self.cpu_per_milli <= 0:
            return 0.0
        feedable = cpu_free / self.cpu_per_milli
        if self.memory_per_milli > 0:
            feedable = min(feedable, mem_free / self.memory_per_milli)
        return float(round(max(0.0, idle_milli - feedable)))

    def stranded_decrease(self, state: ClusterState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        if len(nodes) <= FEW:
            return np.array(self._stranded_drops(state, pod, nodes.tolist()), dtype=np.float64)
        idle, cpu, mem = state.gpu_free_total[nodes], state.cpu_free[nodes], state.mem_free[nodes]
        after = self.stranded(idle - pod.gpu.total_milli, cpu - pod.cpu_milli, mem - pod.memory_mib)
        return np.asarray(self.stranded(idle, cpu, mem) - after, dtype=np.float64)

    def _stranded_drops(self, state: ClusterState, pod: PodSpec, nodes: list[int]) -> list[float]:
        """``stranded_decrease`` of a few nodes, node by node."""
        drops: list[float] = []
        for node in nodes:
            idle, cpu_free, mem_free = state.idle_room(node)
            drops.append(self._stranded_drop(pod, idle, cpu_free, mem_free))
        return drops

    def _stranded_drop(self, pod: PodSpec, idle: int, cpu_free: int, mem_free: int) -> float:
        """``stranded_decrease`` of one node with these figures."""
        before = self.stranded_of(idle, cpu_free, mem_free)
        after = self.stranded_of(
            idle - pod.gpu.total_milli, cpu_free - pod.cpu_milli, mem_free - pod.memory_mib
        )
        return before - after

    def _best_gpus(
        self, state: ClusterState, pod: PodSpec, nodes: IntArray
    ) -> tuple[FloatArray, IntArray]:
        """Per node, the best score of the share over its GPUs and the lowest GPU with it
        (-inf and GPU 0 where none has room). A GPU's score: the integer score, then,
        below one point, the leftover drop and the tightness."""
        classes = self.fgd.model(state).classes.split(state, nodes)
        if classes is not None:
            first, inverse = classes
            best, gpus = self._best_gpus_of(state, pod, first)
            return best[inverse], gpus[inverse]
        return self._best_gpus_of(state, pod, nodes)

    def _best_gpus_of(
        self, state: ClusterState, pod: PodSpec, nodes: IntArray
    ) -> tuple[FloatArray, IntArray]:
        """``_best_gpus`` without the split into node states (``nodes`` are one of each
        already, or too few or too varied for it: splitting again would find nothing)."""
        model = self.fgd.model(state)
        at, slot, decrease = model.decrease_if_shared(state, pod, nodes)
        if len(at) <= FEW:
            return self._best_gpus_few(state, pod, nodes, at, slot, decrease)
        decrease = decrease + self.stranded_decrease(state, pod, nodes)[at]
        rows = nodes[at]
        free = state.gpu_free.take(rows * state.gpu_free.shape[1] + slot)
        kept = self.leftover_decrease(state, pod, free, state.cpu_free[rows])
        scores = sigmoid_score(decrease + kept)
        # A leftover lies within 0..1000 milli, so the drop within ±1000 maps into the span.
        scores = scores + (TIE_SPAN / (2 * MILLI_PER_GPU)) * (kept + MILLI_PER_GPU)
        scores = scores - _GPU_TIGHTNESS * (free - pod.gpu.milli)
        return best_per_node(at, slot, scores, len(nodes), -np.inf)

    def _best_gpus_few(
        self,
        state: ClusterState,
        pod: PodSpec,
        nodes: IntArray,
        at: IntArray,
        slot: IntArray,
        decrease: FloatArray,
    ) -> tuple[FloatArray, IntArray]:
        """``_best_gpus`` from ``decrease_if_shared``'s few pairs, one by one: the same
        figures, the same order of operations (the sigmoid on an array, as numpy's ``exp``
        is not Python's), and ``best_per_node``'s choice."""
        model = self.leftover_model(state)
        share, cpu = pod.gpu.milli, pod.cpu_milli
        rows = nodes[at].tolist()
        slots = slot.tolist()
        drops: dict[int, float] = {}
        totals: list[float] = []
        kepts: list[float] = []
        frees: list[int] = []
        for row, gpu, base in zip(rows, slots, decrease.tolist(), strict=True):
            idle, cpu_free, mem_free = state.idle_room(row)
            drop = drops.get(row)
            if drop is None:
                drop = self._stranded_drop(pod, idle, cpu_free, mem_free)
                drops[row] = drop
            free = state.gpu_free_at(row, gpu)
            kept = model.leftover_of(free, cpu_free) - model.leftover_of(
                free - share, cpu_free - cpu
            )
            totals.append(base + drop + kept)
            kepts.append(kept)
            frees.append(free)
        span = TIE_SPAN / (2 * MILLI_PER_GPU)
        best = [-np.inf] * len(nodes)
        gpus = [0] * len(nodes)
        seen = [False] * len(nodes)
        scores = sigmoid_scores_of(totals)
        pairs = zip(at.tolist(), slots, scores, kepts, frees, strict=True)
        for i, gpu, value, kept, free in pairs:
            value = value + span * (kept + MILLI_PER_GPU)
            value = value - _GPU_TIGHTNESS * (free - share)
            # Slots come ascending within a node: the first of the best is the lowest.
            if not seen[i] or value > best[i]:
                best[i], gpus[i], seen[i] = value, gpu, True
        return np.array(best, dtype=np.float64), np.array(gpus, dtype=np.int64)

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        state = cycle.state
        if pod.gpu.is_shared:
            best, gpus = self._best_gpus(state, pod, nodes)
            self.fgd.memo.record(state, pod, nodes, gpus)
            return best
        classes = self.fgd.model(state).classes.split(state, nodes)
        if classes is not None:
            first, inverse = classes
            return self._score_whole(state, pod, first)[inverse]
        return self._score_whole(state, pod, nodes)

    def _score_whole(self, state: ClusterState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        """``score`` of a pod of whole GPUs or none."""
        decrease = self.fgd.model(state).decrease_if_whole(state, pod, nodes)
        if len(nodes) <= FEW:
            scored = self._score_whole_few(state, pod, nodes.tolist(), decrease.tolist())
            return np.array(scored, dtype=np.float64)
        score = sigmoid_score(decrease + self.stranded_decrease(state, pod, nodes))
        if pod.gpu.count:
            return score
        gpu_span, cpu_span = self._spans(state)
        idle_gpu = state.gpu_free_total[nodes] / gpu_span
        cpu_short = 1.0 - (state.cpu_free[nodes] - pod.cpu_milli) / cpu_span
        stranding = (idle_gpu + CPU_SPARE_WEIGHT * cpu_short) / (1.0 + CPU_SPARE_WEIGHT)
        return np.asarray(score + TIE_SPAN * (1.0 - np.clip(stranding, 0.0, 1.0)))

    def _spans(self, state: ClusterState) -> tuple[int, int]:
        """The milli-GPU and milli-CPU of the cluster's largest node (at least 1): shares
        of them keep the GPU-less tie-break within 0..1 anywhere. Fixed facts of the
        cluster, so worked out once per state."""
        bound_to = (state.serial, id(state))
        if self._spans_for != bound_to:
            self._spans_of = (
                max(int(state.gpu_count.max(initial=0)) * MILLI_PER_GPU, 1),
                max(int(state.cpu_cap.max(initial=0)), 1),
            )
            self._spans_for = bound_to
        return self._spans_of

    def _score_whole_few(
        self, state: ClusterState, pod: PodSpec, nodes: list[int], decrease: list[float]
    ) -> list[float]:
        """``_score_whole`` of a few nodes, node by node: the same operations on Python
        floats (the sigmoid's ``exp`` on numpy's, as ``sigmoid_scores_of`` says)."""
        totals: list[float] = []
        for node, base in zip(nodes, decrease, strict=True):
            idle, cpu_free, mem_free = state.idle_room(node)
            totals.append(base + self._stranded_drop(pod, idle, cpu_free, mem_free))
        score = sigmoid_scores_of(totals)
        if pod.gpu.count:
            return score
        gpu_span, cpu_span = self._spans(state)
        out: list[float] = []
        for node, value in zip(nodes, score, strict=True):
            idle, cpu_free, _ = state.idle_room(node)
            idle_gpu = idle / gpu_span
            cpu_short = 1.0 - (cpu_free - pod.cpu_milli) / cpu_span
            stranding = (idle_gpu + CPU_SPARE_WEIGHT * cpu_short) / (1.0 + CPU_SPARE_WEIGHT)
            out.append(value + TIE_SPAN * (1.0 - min(max(stranding, 0.0), 1.0)))
        return out

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            known = self.fgd.memo.lookup(state, pod, node)
            if known is not None:
                return (known,)
            _, gpus = self._best_gpus(state, pod, np.array([node], dtype=np.int64))
            return (int(gpus[0]),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[ScorePlugin] = StrandAwareFgd
_g: type[GpuChoicePlugin] = StrandAwareFgd
