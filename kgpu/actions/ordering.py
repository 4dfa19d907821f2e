"""Which queue to serve next: down the tree, the child first in queue order at each level.

Each parent keeps a heap of its children that still have work, keyed by the session's
queue order. Serving a job changes what its queue and their ancestors hold, and nothing
else, so after each job only the queues on that path are re-keyed: a pick costs the
depth of the tree times a heap operation, however many queues there are.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from kgpu.framework.session import Key, Session


class QueuePicker:
    def __init__(self, session: Session, leaves: Iterable[int]) -> None:
        self.session = session
        tree = session.tree
        self.heaps: dict[int, list[tuple[Key, int]]] = {}
        active: set[int] = set()
        for leaf in leaves:
            active.update(tree.path[leaf])
        for q in sorted(active):
            heapq.heappush(self.heaps.setdefault(tree.parent[q], []), (session.queue_key(q), q))
        self._path: list[int] = []

    def pick(self) -> int | None:
        """The leaf queue to serve now, or None when no queue has work left."""
        tree = self.session.tree
        self._path = []
        node = -1
        while True:
            heap = self.heaps.get(node)
            if not heap:
                return None
            child = heap[0][1]
            self._path.append(child)
            if tree.is_leaf(child):
                return child
            node = child

    def served(self, more: bool) -> None:
        """The picked leaf was served; ``more``: it still has work."""
        tree = self.session.tree
        for q in reversed(self._path):
            heap = self.heaps[tree.parent[q]]
            heapq.heappop(heap)  # ``q`` is on top: it was picked and nothing moved since
            keep = more if tree.is_leaf(q) else bool(self.heaps.get(q))
            if keep:
                heapq.heappush(heap, (self.session.queue_key(q), q))
        self._path = []
