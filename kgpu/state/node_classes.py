"""Nodes in the same state, so that a placement score is computed once per state.

FGD's scores (and kgpu's terms on top) read of a node only its GPU model, free CPU, free
memory and each GPU's free milli. Nodes equal in all of these score alike, whatever the
pod, so a decision over thousands of nodes can score one node of each state and hand its
figures to the others. A fresh cluster, or a node group of one instance type that a
packing policy leaves mostly idle, is a handful of states; a cluster whose nodes all
differ gains nothing, and then the split is not made (:meth:`NodeClasses.split`).

A node's state id is recomputed only when its ``node_clock`` moved, as FGD's per-node
parts are; ids are numbered afresh once there are many more of them than nodes, so a long
run does not grow them without bound.
"""

from __future__ import annotations

import numpy as np

from kgpu.state.cluster import ClusterState, IntArray

# Fewer nodes than this are scored directly: the split would cost what it saves.
MIN_NODES = 256
# Split only where at most this share of the nodes are states of their own.
MAX_STATE_SHARE = 0.5
# Past this many nodes to renumber at once, their distinct rows are found first.
_FEW_ROWS = 64


class NodeClasses:
    """State ids of one cluster's nodes, bound to it like ``FragmentModel``."""

    def __init__(self, state: ClusterState) -> None:
        n = len(state)
        self._of = np.zeros(n, dtype=np.int64)  # state id per node
        self._seen = np.full(n, -1, dtype=np.int64)  # node_clock when last computed
        self._ids: dict[bytes, int] = {}
        # Renumbered from scratch past this many ids; a node's state changes with every
        # placement on it, and most of those states are never seen again.
        self._id_limit = 4 * n + 1024

    def _refresh(self, state: ClusterState, nodes: IntArray) -> None:
        changed, clocks = state.moved(self._seen, nodes)
        if not len(changed):
            return
        if len(self._ids) > self._id_limit:
            self._ids.clear()
            self._seen.fill(-1)
            changed, clocks = nodes, state.node_clock[nodes]
        rows = np.column_stack(
            (
                state.model_id[changed],
                state.cpu_free[changed],
                state.mem_free[changed],
                state.gpu_free.take(changed, axis=0),
            )
        ).astype(np.int64)
        ids = self._ids
        if len(changed) > _FEW_ROWS:
            # Many nodes at once (the first decision): their distinct rows are few, so look
            # those up and spread the ids, instead of a lookup per node.
            distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
            found = [ids.setdefault(row.tobytes(), len(ids)) for row in distinct]
            self._of[changed] = np.array(found, dtype=np.int64)[inverse.ravel()]
        else:
            of = self._of
            for node, row in zip(changed.tolist(), rows, strict=True):
                of[node] = ids.setdefault(row.tobytes(), len(ids))
        self._seen[changed] = clocks

    def split(self, state: ClusterState, nodes: IntArray) -> tuple[IntArray, IntArray] | None:
        """One node of each state among ``nodes`` and, per node of
        ``nodes``, the index of its state's node in that list; None where the nodes are
        too few or too varied for the split to pay."""
        if len(nodes) < MIN_NODES:
            return None
        self._refresh(state, nodes)
        ids = self._of[nodes]
        present = np.zeros(len(self._ids), dtype=np.bool_)
        present[ids] = True
        which = present.nonzero()[0]
        if len(which) > MAX_STATE_SHARE * len(nodes):
            return None
        index = np.empty(len(self._ids), dtype=np.int64)
        index[which] = np.arange(len(which), dtype=np.int64)
        inverse = index[ids]
        first = np.empty(len(which), dtype=np.int64)
        first[inverse] = nodes  # any node of a state stands for all of it
        return first, inverse
