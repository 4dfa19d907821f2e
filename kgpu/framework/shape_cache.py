"""Filter verdicts and raw scores kept per pod shape between cycles.

Every filter and cacheable score is node-local: its answer for a node depends only on that
node's state and the pod's shape. Placing a pod changes one node, so the next pod of a
shape already seen only needs its verdicts and scores recomputed on the nodes that changed
since; the rest are read back. This is what lets a cycle score every node of a 5,000-node
cluster without redoing 5,000 nodes of work per pod.

The nodes that changed are those whose ``node_clock`` stamp is later than the state's
``clock`` when the entry was last brought up to date: read off the state's latest ticks
(``ClusterState.changed_since``, a bounded log) when a few went by since, as they mostly
have, else found by one comparison over the nodes.

A shape picked again also keeps its feasible nodes ranked by the score its choice is read
off (:mod:`kgpu.framework.best_nodes`), so that its cycles find the best node without a
pass over every feasible one; the budget counts the ranking's bytes too.

An entry holds a few arrays over every node (130 KB at 5,000 nodes), so the cache is
bounded by bytes as well as by entries: a cluster where every pod asks for something a
little different would otherwise keep thousands of them, half a gigabyte, for shapes that
never come back.

The static filters' verdicts (cordon, labels, taints: see ``Scheduler``) depend on the
pod's node selector and tolerations only, so they are kept per those too: a pod of a new
shape with the selector and tolerations of an earlier one skips the static filters.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from kgpu.framework.best_nodes import BestNodes
from kgpu.framework.interfaces import BoolArray, FloatArray, IntArray
from kgpu.framework.status import Reason
from kgpu.state.cluster import ClusterState


@dataclass(slots=True)
class ShapeEntry:
    """What one shape's cycles computed: per node, pass or the index of the reason why not."""

    seen_at: int  # the state's clock when last brought up to date
    feasible: BoolArray
    reason_idx: IntArray  # index into ShapeCache.reasons; -1 where feasible
    static_ok: BoolArray  # passed the filters whose verdicts never change (see Scheduler)
    scores: dict[str, FloatArray] = field(default_factory=dict)
    # Cached scores that are 0 on every node for this shape (``zero_for``): never asked.
    zero_scores: tuple[str, ...] = ()
    # Every score but the profile's first is among those: the choice is read off the
    # first's raw scores (``Scheduler``).
    lead_only: bool = False
    # The feasible nodes by the raw score the choice is read off (``Scheduler._ranking``),
    # what the cache counts for it, and how many of the shape's picks in a row found
    # hardly a node changed since the one before (a ranking is made after a few).
    streak: int = 0
    ranking: BestNodes | None = None
    ranking_bytes: int = 0


@dataclass(frozen=True, slots=True)
class StaticVerdicts:
    """What the static filters said of every node for one node selector and toleration set."""

    passed: IntArray  # the nodes that passed, ascending
    static_ok: BoolArray
    reason_idx: IntArray  # as ShapeEntry.reason_idx, -1 where passed


STATIC_CAPACITY = 256
# Up to this many ticks of the state since an entry's last cycle, its changed nodes are
# read off the state's latest ticks rather than found by comparing every node's stamp.
_FEW_TICKS = 64
BYTES_BUDGET = 64 * 1024 * 1024


def _entry_bytes(entry: ShapeEntry) -> int:
    arrays = (entry.feasible, entry.reason_idx, entry.static_ok, *entry.scores.values())
    return sum(a.nbytes for a in arrays) + entry.ranking_bytes


class ShapeCache:
    def __init__(self, capacity: int = 4096, max_bytes: int = BYTES_BUDGET) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.entries: OrderedDict[object, ShapeEntry] = OrderedDict()
        self._bytes = 0
        self.statics: OrderedDict[object, StaticVerdicts] = OrderedDict()
        self.reasons: list[Reason] = []
        self._reason_ids: dict[Reason, int] = {}
        self._bound_to = (0, 0)
        self._all_nodes: IntArray = np.empty(0, dtype=np.int64)
        self._no_nodes: IntArray = np.empty(0, dtype=np.int64)

    def reason_id(self, reason: Reason) -> int:
        rid = self._reason_ids.get(reason)
        if rid is None:
            rid = len(self.reasons)
            self.reasons.append(reason)
            self._reason_ids[reason] = rid
        return rid

    def bind(self, state: ClusterState) -> None:
        """Forget everything if the cache last served a different state.

        The serial tells apart states whose id() is reused after the first is freed; the
        id tells apart a copy, which keeps the serial but then changes on its own.
        """
        bound_to = (state.serial, id(state))
        if bound_to != self._bound_to:
            self.entries.clear()
            self.statics.clear()
            self._bytes = 0
            self._bound_to = bound_to
            self._all_nodes = np.arange(len(state), dtype=np.int64)

    def all_nodes(self) -> IntArray:
        """Every node of the bound state, in order (shared: callers must not write to it)."""
        return self._all_nodes

    def lookup(
        self, state: ClusterState, shape: object
    ) -> tuple[ShapeEntry | None, IntArray | list[int]]:
        """The entry for ``shape`` and the nodes to recompute (all of them for a new shape),
        ascending: a list where they were read off the state's latest ticks (mostly one or
        two nodes, which the scheduler judges one by one: an array would only be undone)."""
        entry = self.entries.get(shape)
        if entry is None:
            return None, self._all_nodes
        self.entries.move_to_end(shape)
        if state.clock == entry.seen_at:
            return entry, self._no_nodes
        # Exactly the changed nodes, however many: plugins gather their inputs by node
        # index either way, so a subset never costs more than all nodes. Mostly a node or
        # two changed since a shape's last cycle: the state's latest ticks tell which.
        few = state.changed_since(entry.seen_at, _FEW_TICKS)
        if few is not None:
            return entry, few
        return entry, (state.node_clock > entry.seen_at).nonzero()[0]

    def store(self, shape: object, entry: ShapeEntry) -> None:
        old = self.entries.pop(shape, None)
        if old is not None:
            self._bytes -= _entry_bytes(old)
        self.entries[shape] = entry
        self._bytes += _entry_bytes(entry)
        self._shrink()

    def rank(self, entry: ShapeEntry, ranking: BestNodes | None, nbytes: int = 0) -> None:
        """Give ``entry`` (the last looked up) ``ranking``, or take its ranking away (None),
        within the budget: the least recently used other entries go if it is passed."""
        self._bytes += nbytes - entry.ranking_bytes
        entry.ranking, entry.ranking_bytes = ranking, nbytes
        self._shrink()

    def _shrink(self) -> None:
        while len(self.entries) > 1 and (
            len(self.entries) > self.capacity or self._bytes > self.max_bytes
        ):
            _, evicted = self.entries.popitem(last=False)
            self._bytes -= _entry_bytes(evicted)

    def unrank(self) -> None:
        """Take every entry's ranking away (the tie-break ranks they were made with changed)."""
        for entry in self.entries.values():
            self._bytes -= entry.ranking_bytes
            entry.ranking, entry.ranking_bytes = None, 0

    def static_verdicts(self, key: object) -> StaticVerdicts | None:
        found = self.statics.get(key)
        if found is not None:
            self.statics.move_to_end(key)
        return found

    def store_static(self, key: object, verdicts: StaticVerdicts) -> None:
        self.statics[key] = verdicts
        self.statics.move_to_end(key)
        while len(self.statics) > STATIC_CAPACITY:
            self.statics.popitem(last=False)
