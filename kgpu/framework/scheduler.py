"""One scheduling cycle for one pod: PreFilter, Filter, Score, then the GPU choice.

The cycle only decides; it never changes the cluster state. The caller (an action of a
session) reserves what was decided, so that a decision can be inspected, replayed or
discarded.

How answers combine:

- PreFilter: every plugin must succeed; the first failure ends the cycle with its status.
- Filter: a node must pass every filter; a node rejected by one filter is not shown to the
  next, and keeps the first reason it was given.
- Score: the sum over score plugins of weight × score, where a plugin that normalises maps
  its raw scores of the cycle's feasible nodes onto 0..100 first.
- Ties between nodes with the best total go to the node with the lowest tie-break rank
  (a fixed, seeded permutation of the nodes; by default the node order itself).
- GPU choice: the one GPU-choice plugin of the profile picks the node's GPU slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import (
    FilterPlugin,
    FloatArray,
    GpuChoicePlugin,
    IntArray,
    NormalizeScorePlugin,
    PreFilterPlugin,
    ScorePlugin,
)
from kgpu.framework.shape_cache import ShapeCache, ShapeEntry
from kgpu.framework.status import Code, NodeReasons, Status
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState


@dataclass(frozen=True, slots=True)
class Placement:
    """The cycle's choice: a node and the GPU slots on it."""

    pod: PodSpec
    node: int
    gpus: tuple[int, ...]
    score: float


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """No node fits: the status and, when filters ran, how many nodes each reason rejected."""

    pod: PodSpec
    status: Status
    node_reasons: NodeReasons | None = None

    @property
    def message(self) -> str:
        if self.node_reasons is not None:
            return self.node_reasons.message()
        return self.status.message


Outcome = Placement | Unschedulable


class Scheduler:
    """Runs cycles with a fixed set of plugins (built from a profile by the registry)."""

    def __init__(
        self,
        pre_filters: Sequence[PreFilterPlugin],
        filters: Sequence[FilterPlugin],
        scores: Sequence[tuple[ScorePlugin, float]],
        gpu_choice: GpuChoicePlugin,
        *,
        use_cache: bool = True,
    ) -> None:
        self.pre_filters = list(pre_filters)
        self.filters = list(filters)
        self.scores = list(scores)
        self.gpu_choice = gpu_choice
        self.use_cache = use_cache
        self.cache = ShapeCache()
        self.tie_rank: IntArray | None = None

    def set_tie_rank(self, rank: IntArray | None) -> None:
        """Nodes with equal best totals go to the lowest rank; None: the lowest index."""
        self.tie_rank = None if rank is None else np.asarray(rank, dtype=np.int64)

    # ------------------------------------------------------------------ the cycle

    def schedule(self, state: ClusterState, pod: PodSpec) -> Outcome:
        cycle = CycleState(state, pod)
        for plugin in self.pre_filters:
            status = plugin.pre_filter(cycle, pod)
            if not status.ok:
                return Unschedulable(pod, status)
        entry = self._refresh(cycle, pod)
        feasible = np.flatnonzero(entry.feasible)
        if len(feasible) == 0:
            return self._unschedulable(pod, entry, len(state))
        total = self._total_scores(cycle, pod, entry, feasible)
        best = self._pick(feasible, total)
        gpus = self.gpu_choice.choose_gpus(state, pod, best) if pod.gpu.count else ()
        return Placement(pod, best, gpus, float(total.max()))

    def _refresh(self, cycle: CycleState, pod: PodSpec) -> ShapeEntry:
        """Bring the shape's verdicts and cacheable scores up to date for changed nodes."""
        state = cycle.state
        if not self.use_cache:
            entry = self._new_entry(state)
            self._evaluate(cycle, pod, entry, np.arange(len(state), dtype=np.int64))
            return entry
        self.cache.bind(state)
        shape = pod.shape
        found, stale = self.cache.lookup(state, shape)
        if found is None:
            entry = self._new_entry(state)
            self.cache.store(shape, entry)
        else:
            entry = found
        if len(stale):
            self._evaluate(cycle, pod, entry, stale)
        entry.seen_at = len(state.changes)
        return entry

    def _new_entry(self, state: ClusterState) -> ShapeEntry:
        n = len(state)
        return ShapeEntry(
            seen_at=len(state.changes),
            feasible=np.zeros(n, dtype=np.bool_),
            reason_idx=np.full(n, -1, dtype=np.int64),
            scores={p.name: np.zeros(n, dtype=np.float64) for p, _ in self.scores if p.cacheable},
        )

    def _evaluate(
        self, cycle: CycleState, pod: PodSpec, entry: ShapeEntry, nodes: IntArray
    ) -> None:
        alive = nodes
        entry.reason_idx[nodes] = -1
        for filter_plugin in self.filters:
            if len(alive) == 0:
                break
            verdicts = filter_plugin.filter(cycle, pod, alive)
            for reason, mask in verdicts.rejected:
                entry.reason_idx[alive[mask]] = self.cache.reason_id(reason)
            alive = alive[verdicts.ok]
        entry.feasible[nodes] = False
        entry.feasible[alive] = True
        if len(alive):
            for plugin, _ in self.scores:
                if plugin.cacheable:
                    entry.scores[plugin.name][alive] = plugin.score(cycle, pod, alive)

    def _total_scores(
        self, cycle: CycleState, pod: PodSpec, entry: ShapeEntry, feasible: IntArray
    ) -> FloatArray:
        total = np.zeros(len(feasible), dtype=np.float64)
        for plugin, weight in self.scores:
            if plugin.cacheable:
                raw = entry.scores[plugin.name][feasible]
            else:
                raw = plugin.score(cycle, pod, feasible)
            if isinstance(plugin, NormalizeScorePlugin):
                raw = plugin.normalize(raw)
            total += weight * raw
        return total

    def _pick(self, feasible: IntArray, total: FloatArray) -> int:
        best = feasible[total == total.max()]
        if len(best) == 1 or self.tie_rank is None:
            return int(best[0])
        return int(best[np.argmin(self.tie_rank[best])])

    def _unschedulable(self, pod: PodSpec, entry: ShapeEntry, n: int) -> Unschedulable:
        reasons = NodeReasons(total=n)
        rejected = entry.reason_idx[entry.reason_idx >= 0]
        counts = np.bincount(rejected) if len(rejected) else np.zeros(0, dtype=np.int64)
        for rid in np.flatnonzero(counts):
            reasons.add(self.cache.reasons[int(rid)], int(counts[rid]))
        top = self.cache.reasons[int(np.argmax(counts))].code if len(counts) else "NoNodes"
        status = Status(Code.UNSCHEDULABLE, (reasons.message(),), reason_code=top)
        return Unschedulable(pod, status, reasons)
