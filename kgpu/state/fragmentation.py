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
from kgpu.state.node_classes import NodeClasses

FloatArray = npt.NDArray[np.float64]
Int32Array = npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True)
class TypicalPod:
    """A pod shape of the workload and its share of the pods (weights sum to 1)."""

    weight: float
    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    models: tuple[str, ...] = ()
    memory_mib: int = 0  # the mean of its pods'; not part of the shape


# At most this many typical pods: FGD's work per decision grows with them. openb's traces
# have 35 to 74; a cluster where requests vary freely (no two pods alike) would have one
# per pod, and is summarised on a coarser grid instead (``typical_pods``).
MAX_TYPICAL = 100
_CPU_GRID = 100  # milli-CPU, doubled per coarser level
_SHARE_GRID = 10  # milli-GPU of a share, doubled per coarser level


def typical_pods(
    pods: Iterable[PodSpec], coverage: float = 0.95, limit: int = MAX_TYPICAL
) -> list[TypicalPod]:
    """The most frequent shapes (CPU, per-GPU milli, GPU count, allowed models) that together
    cover ``coverage`` of the pods, weights renormalised to sum to 1.

    Memory does not tell shapes apart, as in the paper; each shape carries its pods' mean
    memory, which only kgpu's stranding term reads. Equal counts are ordered by descending
    CPU, milli, count and model list, which fixes which shapes make the cut.

    Where that takes more than ``limit`` shapes, requests are rounded up to a grid (CPU to
    200 milli, a share to 20 milli, then twice as coarse, and so on) until it does not: a
    workload whose pods all differ a little is then described by what they have in common,
    and no pod counts for less than it asks.
    """
    listed = [
        (
            pod.cpu_milli,
            pod.gpu.milli if pod.gpu.count else 0,
            pod.gpu.count,
            "|".join(pod.gpu.models),
            pod.memory_mib,
        )
        for pod in pods
    ]
    level = 0
    while True:
        kept, counts, memory = _most_frequent(listed, coverage, level)
        if len(kept) <= limit or level >= 32:
            break
        level += 1
    total = sum(counts.values())
    covered = sum(count for _, count in kept)
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


_Shape = tuple[int, int, int, str]


def _most_frequent(
    listed: list[tuple[int, int, int, str, int]], coverage: float, level: int
) -> tuple[list[tuple[_Shape, int]], Counter[_Shape], Counter[_Shape]]:
    """The shapes covering ``coverage`` of the pods, most frequent first, with every
    shape's count and memory sum; at ``level`` > 0, on the grid of that level."""
    counts: Counter[_Shape] = Counter()
    memory: Counter[_Shape] = Counter()
    cpu_step = _CPU_GRID << level if level else 1
    share_step = _SHARE_GRID << level if level else 1
    for cpu, milli, num, spec, mib in listed:
        if level:
            cpu = -(-cpu // cpu_step) * cpu_step
            if 0 < milli < MILLI_PER_GPU:
                milli = min(-(-milli // share_step) * share_step, MILLI_PER_GPU - 1)
        shape = (cpu, milli, num, spec)
        counts[shape] += 1
        memory[shape] += mib
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    kept: list[tuple[_Shape, int]] = []
    covered = 0
    expected = int(coverage * 100) * total // 100
    for shape, count in ranked:
        if covered >= expected and kept:
            break
        kept.append((shape, count))
        covered += count
    return kept, counts, memory


# Per-node figures are kept as int32, half the bytes of int64 to walk per decision: milli
# of a node's GPUs (at most 256 × 1000) and milli-CPU (at most 2^30) both fit. Their rows
# are gathered with ``take``: indexing a 2-D array with an array of rows copies them one
# at a time, 6 to 30 times slower (as is a pair of index arrays, read as flat indices).
_I32 = np.int32
_NEVER = np.iinfo(np.int32).max  # the CPU threshold of a typical pod a node can never take
_NEVER_INT: int = int(_NEVER)
# A whole-GPU pod's decreases come from the table (``decrease_if_whole``) for this many
# nodes or more, and when bringing it up to date costs at most this many times a lookup
# per node; otherwise they are computed directly.
_TABLE_MIN_NODES = 256
_TABLE_REFRESH_RATIO = 8
# Tables kept, one per GPU count asked (workloads ask for a handful: 0, 1, 2, 4, 8); a pod
# of yet another count is computed directly rather than let requests grow the memory.
_MAX_TABLES = 16
# Up to this many nodes the decreases are worked out node by node on Python ints, past it
# over arrays. A decision of a shape seen before rescores only the nodes changed since,
# most often a handful (an openb replay's usual cycle), where each of the array path's
# numpy calls costs far more than its work. Every figure before the weighting is an
# integer, and both ways weight them with the same matrix product, so they agree to the
# last bit.
FEW_NODES = 32
# The node-by-node path keeps the GPU parts of up to this many distinct rows of free milli.
_ROWS_KEPT = 4096


class FragmentModel:
    """The typical pods as arrays, bound to one cluster's GPU model ids.

    What a node's fragmentation is made of before any pod is placed (per typical pod: the
    milli on GPUs big enough for it, how many there are, the fragment) does not depend on
    the pod being scored, so it is kept per node and recomputed only for nodes whose
    ``node_clock`` moved since (:meth:`_base`). A decision for a pod of a never-seen shape
    then costs the pod's own part only: what each node would look like after it.

    Both decreases are taken as integers per typical pod before weighting, as
    ``fragments`` would give them before and after; with ``lost`` = before − idle (minus
    the milli a typical pod that fits can use), the fragment before minus after is
    ``lost + where(fits after, usable after, milli taken)``.
    """

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
        n, kinds = len(state), len(typical)
        # The free milli-CPU a node needs for each typical pod; _NEVER where its GPU model
        # rules the pod out. Fixed per node, so one comparison per decision.
        ok = self.model_ok[state.model_id + 1] & (self.cpu < _NEVER)[None, :]
        self._cpu_needed = np.where(ok, self.cpu[None, :], _NEVER).astype(_I32)
        self._milli32 = self.milli.astype(_I32)
        self._count32 = self.count.astype(_I32)
        self._usable = np.zeros((n, kinds), dtype=_I32)
        self._enough = np.zeros((n, kinds), dtype=_I32)
        self._lost = np.zeros((n, kinds), dtype=_I32)
        # first[i, g]: slot g holds the first GPU of node i with its free milli. Equal free
        # shares score alike, so a share is tried on these slots only.
        self._first = np.zeros((n, state.max_gpus), dtype=np.bool_)
        self._earlier = np.tri(state.max_gpus, k=-1, dtype=np.bool_)[None]  # slot h < g
        self._seen = np.full(n, -1, dtype=np.int64)  # node_clock when last computed
        # For whole-GPU and GPU-less pods: which typical pods a node's CPU still allows
        # after the pod depends only on how many typical CPU requests fit in what is left,
        # j = 0..T, so a node's decrease for k GPUs is one of T + 1 figures (``_whole``).
        rank = np.empty(kinds, dtype=np.int64)
        rank[np.argsort(self.cpu, kind="stable")] = np.arange(kinds)
        self._cpu_sorted = np.sort(self.cpu)
        self._cpu_fits_j = rank[None, :] < np.arange(kinds + 1)[:, None]  # (T+1, T)
        self._whole: dict[int, tuple[FloatArray, IntArray]] = {}
        self.classes = NodeClasses(state)
        # The node-by-node path's own copies, as Python ints: per typical pod its milli,
        # GPU count and (per GPU model id + 1) the CPU it needs; the distinct millis, as
        # a node's GPU parts are worked out per milli and repeated per typical pod.
        self._milli_list: list[int] = [t.gpu_milli for t in typical]
        self._count_list: list[int] = [t.gpu_count for t in typical]
        self._needed_by_model: list[list[int]] = np.where(
            self.model_ok & (self.cpu < _NEVER)[None, :], self.cpu[None, :], _NEVER
        ).tolist()
        self._model_of: list[int] = state.model_id.tolist()
        self._millis: list[int] = sorted(set(self._milli_list))
        where = {m: i for i, m in enumerate(self._millis)}
        self._milli_at: list[int] = [where[m] for m in self._milli_list]
        # Per node, as of its clock then: usable, enough, lost (as ``_refresh`` keeps
        # them) and the (slot, free milli) of the first GPU of each free share.
        self._parts: list[_NodeParts | None] = [None] * n
        # The GPU part of those (usable, enough, first GPU of each free share) by a node's
        # row of free milli: nodes share rows (idle, one share taken, ...), so a node whose
        # clock moved mostly finds its row's worked out already.
        self._by_row: dict[tuple[int, ...], tuple[list[int], list[int], list[tuple[int, int]]]] = {}

    def _gpu_parts(self, free: IntArray) -> tuple[IntArray, IntArray]:
        """Per node and typical pod (K,T): the milli on GPUs big enough, and their count."""
        big = free[:, :, None] >= self.milli[None, None, :]
        # The ufuncs' own reductions: ndarray.sum and .any go through a Python-level
        # wrapper that costs more than these small arrays' work. The same results.
        return np.add.reduce(free[:, :, None] * big, axis=1), np.add.reduce(big, axis=1)

    def _cpu_allows(self, cpu_free: IntArray, nodes: IntArray) -> BoolArray:
        """(K,T): the GPU model and ``cpu_free`` (K,) milli-CPU allow each typical pod."""
        # Bounded into int32 below the sentinel (np.clip costs several times more).
        cpu = np.maximum(np.minimum(cpu_free, _NEVER - 1), -_NEVER).astype(_I32)
        return np.asarray(cpu[:, None] >= self._cpu_needed.take(nodes, axis=0), dtype=np.bool_)

    def _refresh(self, state: ClusterState, nodes: IntArray) -> None:
        """Recompute the per-node parts of those ``nodes`` changed since they were last
        computed (``ClusterState.moved``)."""
        changed, clocks = state.moved(self._seen, nodes)
        if not len(changed):
            return
        free = state.gpu_free.take(changed, axis=0)
        usable, enough = self._gpu_parts(free)
        fits = self._cpu_allows(state.cpu_free[changed], changed) & (enough >= self.count[None, :])
        self._usable[changed] = usable
        self._enough[changed] = enough
        self._lost[changed] = np.where(fits, -usable, 0)
        repeated = np.logical_or.reduce(
            (free[:, :, None] == free[:, None, :]) & self._earlier, axis=2
        )
        self._first[changed] = ~repeated
        self._seen[changed] = clocks

    def _parts_of(self, state: ClusterState, node: int) -> _NodeParts:
        """``_refresh``'s figures of one node, on Python ints, recomputed when its clock
        moved since."""
        clock = state.stamp(node)
        known = self._parts[node]
        if known is not None and known.clock == clock:
            return known
        row = tuple(state.gpu_row(node))
        gpu = self._by_row.get(row)
        if gpu is None:
            gpu = self._gpu_row_parts(row)
            if len(self._by_row) >= _ROWS_KEPT:  # rows never seen again are let go
                self._by_row.clear()
            self._by_row[row] = gpu
        usable_t, enough_t, firsts = gpu
        cpu = _bounded(state.idle_room(node)[1])
        needed = self._needed_by_model[self._model_of[node] + 1]
        counts = self._count_list
        lost: list[int] = []
        # Indexed loops: mypyc compiles them to plain C, where zip builds tuples.
        for t in range(len(counts)):
            lost.append(-usable_t[t] if cpu >= needed[t] and enough_t[t] >= counts[t] else 0)
        parts = _NodeParts(clock, usable_t, enough_t, lost, firsts)
        self._parts[node] = parts
        return parts

    def _gpu_row_parts(
        self, row: tuple[int, ...]
    ) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """Per typical pod, the milli on GPUs of ``row`` (a node's free milli per slot) big
        enough for it and how many there are; and the (slot, free milli) of the first GPU
        of each free share."""
        counted: dict[int, int] = {}
        firsts: list[tuple[int, int]] = []
        for slot, free in enumerate(row):
            if free in counted:
                counted[free] += 1
            else:
                counted[free] = 1
                firsts.append((slot, free))
        usable_of: list[int] = []
        enough_of: list[int] = []
        for milli in self._millis:
            usable = enough = 0
            for free, many in counted.items():
                if free >= milli:
                    usable += free * many
                    enough += many
            usable_of.append(usable)
            enough_of.append(enough)
        at = self._milli_at
        return [usable_of[i] for i in at], [enough_of[i] for i in at], firsts

    def _weighted(self, diffs: list[int], rows: int) -> FloatArray:
        """``diffs`` (rows × T, row by row) weighted as the array path weights its (K,T)
        int32 differences: the same matrix product, so the same sums to the last bit."""
        diff = np.array(diffs, dtype=_I32).reshape(rows, len(self.typical))
        return np.asarray(diff @ self.weights, dtype=np.float64)

    def _whole_few(self, state: ClusterState, pod: PodSpec, nodes: list[int]) -> FloatArray:
        """``decrease_if_whole`` of a few nodes, node by node."""
        k = pod.gpu.count
        taken = k * MILLI_PER_GPU
        counts = self._count_list
        diffs: list[int] = []
        for node in nodes:
            parts = self._parts_of(state, node)
            cpu = _bounded(state.idle_room(node)[1] - pod.cpu_milli)
            needed = self._needed_by_model[self._model_of[node] + 1]
            lost, usable, enough = parts.lost, parts.usable, parts.enough
            for t in range(len(counts)):
                fits = cpu >= needed[t] and enough[t] - k >= counts[t]
                diffs.append(lost[t] + (usable[t] if fits else taken))
        return self._weighted(diffs, len(nodes))

    def _shared_few(
        self, state: ClusterState, pod: PodSpec, nodes: list[int]
    ) -> tuple[IntArray, IntArray, FloatArray]:
        """``decrease_if_shared`` of a few nodes, node by node."""
        share = pod.gpu.milli
        at: list[int] = []
        slots: list[int] = []
        diffs: list[int] = []
        millis, milli_at, counts = self._millis, self._milli_at, self._count_list
        for i, node in enumerate(nodes):
            parts = self._parts_of(state, node)
            cpu = _bounded(state.idle_room(node)[1] - pod.cpu_milli)
            needed = self._needed_by_model[self._model_of[node] + 1]
            for slot, free in parts.firsts:
                if free < share:
                    continue
                after = free - share
                # This GPU's share leaves what it counted; its remainder counts again
                # where still big enough.
                gained_of = [
                    (after if after >= m else 0) - (free if free >= m else 0) for m in millis
                ]
                more_of = [(after >= m) - (free >= m) for m in millis]
                lost, usable, enough = parts.lost, parts.usable, parts.enough
                for t in range(len(counts)):
                    m = milli_at[t]
                    fits = cpu >= needed[t] and enough[t] + more_of[m] >= counts[t]
                    diffs.append(lost[t] + (usable[t] + gained_of[m] if fits else 0) + share)
                at.append(i)
                slots.append(slot)
        return (
            np.array(at, dtype=np.int64),
            np.array(slots, dtype=np.int64),
            self._weighted(diffs, len(at)),
        )

    def _base(
        self, state: ClusterState, nodes: IntArray
    ) -> tuple[Int32Array, Int32Array, Int32Array]:
        """Usable milli, big-enough GPUs and lost milli (K,T) of ``nodes`` as they are now."""
        self._refresh(state, nodes)
        return (
            self._usable.take(nodes, axis=0),
            self._enough.take(nodes, axis=0),
            self._lost.take(nodes, axis=0),
        )

    def fragments(self, state: ClusterState, nodes: IntArray) -> IntArray:
        """Per node and typical pod, the fragment in milli (K,T): the idle milli, less what
        a typical pod that fits can use."""
        _, _, lost = self._base(state, nodes)
        return np.asarray(state.gpu_free_total[nodes][:, None] + lost, dtype=np.int64)

    def node_fragmentation(self, state: ClusterState, nodes: IntArray) -> FloatArray:
        return np.asarray(self.fragments(state, nodes) @ self.weights, dtype=np.float64)

    def decrease_if_shared(
        self, state: ClusterState, pod: PodSpec, nodes: IntArray
    ) -> tuple[IntArray, IntArray, FloatArray]:
        """Fragmentation before minus after placing a one-GPU share, on each GPU with room
        for it that is the first of its free milli on its node: (at, slot, decrease), each
        (P,), ``at`` indexing ``nodes`` in ascending order and ``slot`` ascending within.

        A GPU with the same free milli as an earlier one of its node would give the same
        figure, so it is left out: a node's GPUs are few distinct shares (most often one,
        idle), which is what makes a share's cost close to a whole GPU's.
        """
        if len(nodes) <= FEW_NODES:
            return self._shared_few(state, pod, nodes.tolist())
        share = pod.gpu.milli
        self._refresh(state, nodes)
        free = state.gpu_free.take(nodes, axis=0)
        width = free.shape[1]
        # Flat: the (row, slot) pairs of a 2-D nonzero cost several times more.
        flat = (self._first.take(nodes, axis=0) & (free >= share)).reshape(-1).nonzero()[0]
        at = flat // width
        slot = flat - at * width
        rows = nodes.take(at)
        f = free.reshape(-1).take(flat).astype(_I32)[:, None]
        big = f >= self._milli32[None, :]
        after_free = f - _I32(share)
        big_after = after_free >= self._milli32[None, :]
        # Usable milli after: this GPU's share leaves what it counted, its remainder
        # counts again where still big enough.
        usable_after = self._usable.take(rows, axis=0) - f * big + after_free * big_after
        enough_after = self._enough.take(rows, axis=0) - big + big_after
        allows = self._cpu_allows(state.cpu_free[rows] - pod.cpu_milli, rows)
        fits = allows & (enough_after >= self._count32[None, :])
        kept = self._lost.take(rows, axis=0) + np.where(fits, usable_after, 0)
        decrease = np.asarray((kept + _I32(share)) @ self.weights, dtype=np.float64)
        return at, slot, decrease

    def decrease_if_whole(self, state: ClusterState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        """Fragmentation before minus after placing a whole-GPU or GPU-less pod (K,).

        Whole GPUs come out of the idle ones, which every typical pod could use, so each
        taken GPU lowers the usable milli by 1000 and the count of big-enough GPUs by one:
        a typical pod that still fits loses nothing, one that no longer does loses them.

        Over many nodes the figures are read from a table per GPU count of every node's
        T + 1 possible decreases (one per how many typical CPU requests fit what the pod
        leaves), kept up to date like the per-node parts: a pod of a new shape then costs
        a lookup per node instead of work per node and typical pod.
        """
        k = pod.gpu.count
        known = self._whole.get(k)
        if len(nodes) >= _TABLE_MIN_NODES and (known is not None or len(self._whole) < _MAX_TABLES):
            table, seen = known or self._new_table(state, k)
            stale = seen[nodes] != state.node_clock[nodes]
            changed = int(np.count_nonzero(stale))
            # A new table is filled whatever it costs (once); after that, rows are brought
            # up to date only while that costs no more than a few lookups per node, as
            # when every pod is of a new shape. Where pods of known shapes come between
            # (the per-shape cache serves them), it would cost more than it saves.
            if known is None or changed * (len(self.typical) + 1) <= _TABLE_REFRESH_RATIO * len(
                nodes
            ):
                if changed:
                    self._refresh_table(state, k, nodes[stale])
                fit = np.searchsorted(
                    self._cpu_sorted, state.cpu_free[nodes] - pod.cpu_milli, "right"
                )
                return np.asarray(table.take(nodes * table.shape[1] + fit), dtype=np.float64)
        if len(nodes) <= FEW_NODES:
            return self._whole_few(state, pod, nodes.tolist())
        usable, enough, lost = self._base(state, nodes)
        allows = self._cpu_allows(state.cpu_free[nodes] - pod.cpu_milli, nodes)
        fits = allows & (enough - _I32(k) >= self._count32[None, :])
        diff = lost + np.where(fits, usable, _I32(k * MILLI_PER_GPU))
        return np.asarray(diff @ self.weights, dtype=np.float64)

    def _new_table(self, state: ClusterState, k: int) -> tuple[FloatArray, IntArray]:
        n = len(state)
        entry = (
            np.zeros((n, len(self.typical) + 1), dtype=np.float64),
            np.full(n, -1, dtype=np.int64),
        )
        self._whole[k] = entry
        return entry

    def _refresh_table(self, state: ClusterState, k: int, nodes: IntArray) -> None:
        """Every decrease of ``nodes`` for a pod of ``k`` whole GPUs, by how many typical
        CPU requests fit what it leaves: ``decrease_if_whole``'s sum for each of them."""
        table, seen = self._whole[k]
        usable, enough, lost = self._base(state, nodes)
        model_ok = self._cpu_needed.take(nodes, axis=0) < _NEVER
        room = (enough - _I32(k) >= self._count32[None, :]) & model_ok
        fits = room[:, None, :] & self._cpu_fits_j[None, :, :]  # (S, T+1, T)
        diff = lost[:, None, :] + np.where(fits, usable[:, None, :], _I32(k * MILLI_PER_GPU))
        table[nodes] = diff @ self.weights
        seen[nodes] = state.node_clock[nodes]


@dataclass(frozen=True, slots=True)
class _NodeParts:
    """One node's per-typical-pod parts as of ``clock`` (see ``FragmentModel._parts_of``)."""

    clock: int
    usable: list[int]
    enough: list[int]
    lost: list[int]
    firsts: list[tuple[int, int]]


def _bounded(cpu: int) -> int:
    """Free milli-CPU bounded into int32 below the sentinel, as ``_cpu_allows`` bounds it."""
    return max(min(cpu, _NEVER_INT - 1), -_NEVER_INT)


def best_per_node(
    at: IntArray, slot: IntArray, values: FloatArray, nodes: int, empty: float
) -> tuple[FloatArray, IntArray]:
    """Per node, the best of its GPUs' ``values`` and the lowest slot holding it, from the
    pairs ``decrease_if_shared`` names (``at`` ascending); a node without a pair gets
    ``empty`` and slot 0, as an argmax over a row of ``empty`` would."""
    if len(at) == nodes and (nodes == 0 or at[-1] == nodes - 1) and _one_each(at):
        return values, slot  # one GPU per node, the common case: nothing to reduce
    best = np.full(nodes, empty, dtype=np.float64)
    slots = np.zeros(nodes, dtype=np.int64)
    if len(at) == 0:
        return best, slots
    starts = np.flatnonzero(np.concatenate(([True], at[1:] != at[:-1])))
    top = np.maximum.reduceat(values, starts)
    sizes = np.diff(np.append(starts, len(at)))
    at_top = values == np.repeat(top, sizes)
    owners = at[starts]
    best[owners] = top
    slots[owners] = np.minimum.reduceat(np.where(at_top, slot, np.iinfo(np.int64).max), starts)
    return best, slots


def _one_each(at: IntArray) -> bool:
    """Does ascending ``at`` (as long as the nodes, ending at the last) name every node
    once? Then no two entries are equal."""
    return len(at) < 2 or not np.count_nonzero(at[1:] == at[:-1])
