"""Filter verdicts and raw scores kept per pod shape between cycles.

Every filter and cacheable score is node-local: its answer for a node depends only on that
node's state and the pod's shape. Placing a pod changes one node, so the next pod of a
shape already seen only needs its verdicts and scores recomputed on the nodes that changed
since; the rest are read back. This is what lets a cycle score every node of a 5,000-node
cluster without redoing 5,000 nodes of work per pod.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from kgpu.framework.interfaces import BoolArray, FloatArray, IntArray
from kgpu.framework.status import Reason
from kgpu.state.cluster import ClusterState

# Past this share of changed nodes a full recompute is cheaper than gathering the subset.
_FULL_RECOMPUTE_SHARE = 0.25


@dataclass(slots=True)
class ShapeEntry:
    """What one shape's cycles computed: per node, pass or the index of the reason why not."""

    seen_at: int  # position in the state's change log when last brought up to date
    feasible: BoolArray
    reason_idx: IntArray  # index into ShapeCache.reasons; -1 where feasible
    scores: dict[str, FloatArray] = field(default_factory=dict)


class ShapeCache:
    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[object, ShapeEntry] = OrderedDict()
        self.reasons: list[Reason] = []
        self._reason_ids: dict[Reason, int] = {}
        self._state_id = 0
        self._node_count = -1

    def reason_id(self, reason: Reason) -> int:
        rid = self._reason_ids.get(reason)
        if rid is None:
            rid = len(self.reasons)
            self.reasons.append(reason)
            self._reason_ids[reason] = rid
        return rid

    def bind(self, state: ClusterState) -> None:
        """Forget everything if the cache last served a different state or node set."""
        if id(state) != self._state_id or len(state) != self._node_count:
            self.entries.clear()
            self._state_id = id(state)
            self._node_count = len(state)

    def lookup(self, state: ClusterState, shape: object) -> tuple[ShapeEntry | None, IntArray]:
        """The entry for ``shape`` and the nodes to recompute (all of them for a new shape)."""
        entry = self.entries.get(shape)
        n = len(state)
        if entry is None:
            return None, np.arange(n, dtype=np.int64)
        self.entries.move_to_end(shape)
        pending = len(state.changes) - entry.seen_at
        if pending == 0:
            return entry, np.empty(0, dtype=np.int64)
        if pending > n * _FULL_RECOMPUTE_SHARE:
            return entry, np.arange(n, dtype=np.int64)
        stale = np.unique(np.asarray(state.changes[entry.seen_at :], dtype=np.int64))
        return entry, stale

    def store(self, shape: object, entry: ShapeEntry) -> None:
        self.entries[shape] = entry
        self.entries.move_to_end(shape)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
