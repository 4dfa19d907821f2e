"""FGD: place the pod where the cluster's expected fragmentation grows least.

Fragmentation gradient descent (Weng et al., ATC'23). The score of a node is
int(100 × sigmoid(ΔF / 1000)) where ΔF is the node's fragmentation before minus after the
placement (``fragmentation.FragmentModel``); a share of one GPU is tried on every GPU that
fits and the node takes the best of those integer scores. The GPU choice repeats that
computation on the chosen node and takes the lowest-index GPU with the best score.
GPUs of a node with equal free shares score alike, so a share is scored on the first GPU
of each free share of a node only (``FragmentModel.decrease_if_shared``).
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, GpuChoicePlugin, IntArray, ScorePlugin
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.gpu_slots import lowest_idle_gpus
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import FEW_NODES, FragmentModel, TypicalPod, best_per_node


class GpuMemo:
    """The best GPU per node found while scoring a share, kept for the GPU choice.

    Scoring a share already tries it on every GPU of every node it scores; the GPU choice
    that follows, on the chosen node, would redo that work. Each entry records the node's
    change clock, so it is used only while the node is exactly as it was scored.
    """

    def __init__(self) -> None:
        self._bound_to = (0, 0)
        self._by_shape: dict[object, tuple[IntArray, IntArray]] = {}

    def record(self, state: ClusterState, pod: PodSpec, nodes: IntArray, best: IntArray) -> None:
        bound_to = (state.serial, id(state))
        if bound_to != self._bound_to or len(self._by_shape) > 4096:
            self._by_shape.clear()
            self._bound_to = bound_to
        entry = self._by_shape.get(pod.shape)
        if entry is None:
            n = len(state)
            entry = (np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64))
            self._by_shape[pod.shape] = entry
        gpus, clocks = entry
        gpus[nodes] = best
        clocks[nodes] = state.node_clock[nodes]

    def lookup(self, state: ClusterState, pod: PodSpec, node: int) -> int | None:
        if (state.serial, id(state)) != self._bound_to:
            return None
        entry = self._by_shape.get(pod.shape)
        if entry is None or entry[1][node] != state.node_clock[node]:
            return None
        return int(entry[0][node])


# exp(700) is 1e304, where 100 / (1 + it) truncates to 0 as surely as past exp's overflow
# (709.8), whose 100 / inf is 0 too: bounding there gives the same scores and spares the
# cost of silencing the overflow warning, which is more than the call's work.
_EXP_BOUND = 700.0


def sigmoid_score(decrease: FloatArray) -> FloatArray:
    """int(100 × sigmoid(ΔF / 1000)) of each decrease (x / −1000 is −x / 1000 exactly)."""
    return np.trunc(100.0 / (1.0 + np.exp(np.minimum(decrease / -1000.0, _EXP_BOUND))))


def sigmoid_scores_of(decreases: list[float]) -> list[float]:
    """``sigmoid_score`` of a few decreases, as Python floats: the same IEEE operations,
    one by one, but for ``exp``, which stays numpy's (Python's may differ in the last bit).
    A decrease is finite, so the quotient lies within 0..100 and truncating it through an
    int is ``np.trunc``'s."""
    bounded = [min(d / -1000.0, _EXP_BOUND) for d in decreases]
    grown: list[float] = np.exp(np.array(bounded, dtype=np.float64)).tolist()
    return [float(int(100.0 / (1.0 + e))) for e in grown]


class FgdScore:
    name = names.FGD
    cacheable = True

    def __init__(self, typical: list[TypicalPod]) -> None:
        self.typical = typical
        self._model: FragmentModel | None = None
        # The state's serial and id: a new state may reuse a freed one's id, and the model
        # (GPU model ids) must follow the state it scores.
        self._bound_to = (0, 0)
        self.memo = GpuMemo()

    def model(self, state: ClusterState) -> FragmentModel:
        bound_to = (state.serial, id(state))
        if self._model is None or self._bound_to != bound_to:
            self._model = FragmentModel(self.typical, state)
            self._bound_to = bound_to
        return self._model

    def best_gpus(
        self, state: ClusterState, pod: PodSpec, nodes: IntArray
    ) -> tuple[FloatArray, IntArray]:
        """Per node, the best integer score of a share over its GPUs and the lowest GPU with
        it; -1 and GPU 0 where no GPU has room."""
        classes = self.model(state).classes.split(state, nodes)
        if classes is not None:
            first, inverse = classes
            best, gpus = self._best_gpus_of(state, pod, first)
            return best[inverse], gpus[inverse]
        return self._best_gpus_of(state, pod, nodes)

    def _best_gpus_of(
        self, state: ClusterState, pod: PodSpec, nodes: IntArray
    ) -> tuple[FloatArray, IntArray]:
        """``best_gpus`` without the split into node states (``nodes`` are one of each
        already, or too few or too varied for it: splitting again would find nothing)."""
        at, slot, decrease = self.model(state).decrease_if_shared(state, pod, nodes)
        return best_per_node(at, slot, sigmoid_score(decrease), len(nodes), -1.0)

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        state = cycle.state
        if pod.gpu.is_shared:
            best, gpus = self.best_gpus(state, pod, nodes)
            self.memo.record(state, pod, nodes, gpus)
            return best
        model = self.model(state)
        classes = model.classes.split(state, nodes)
        if classes is not None:
            first, inverse = classes
            return sigmoid_score(model.decrease_if_whole(state, pod, first))[inverse]
        decrease = model.decrease_if_whole(state, pod, nodes)
        if len(nodes) <= FEW_NODES:  # a few: cheaper on Python floats, the same figures
            return np.array(sigmoid_scores_of(decrease.tolist()), dtype=np.float64)
        return sigmoid_score(decrease)

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            known = self.memo.lookup(state, pod, node)
            if known is not None:
                return (known,)
            _, gpus = self.best_gpus(state, pod, np.array([node], dtype=np.int64))
            return (int(gpus[0]),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


_: type[ScorePlugin] = FgdScore
_g: type[GpuChoicePlugin] = FgdScore
