"""Which queue to serve next: down the tree, the child first in queue order at each level.

Each parent keeps a heap of its children that still have work, keyed by the session's
queue order. Serving a job changes what its queue and their ancestors hold, and nothing
else, so after each job only the queues on that path are re-keyed: a pick costs the
depth of the tree times a heap operation, however many queues there are. Most jobs
tried in reclaim, and many in allocate, change nothing at all (they fail before any
placement): then no key moved, and only a queue left without work leaves its heap.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from kgpu.framework.session import Session
from kgpu.framework.session_callbacks import Key


class QueuePicker:
    def __init__(self, session: Session, leaves: Iterable[int]) -> None:
        self.session = session
        tree = session.tree
        self.heaps: dict[int, list[tuple[Key, int]]] = {}
        active: set[int] = set()
        for leaf in leaves:
            active.update(tree.path[leaf])
        for q in sorted(active):
            heapq.heappush(
                self.heaps.setdefault(tree.parent[q], []), (session.callbacks.queue_key(q), q)
            )
        self._path: list[int] = []
        self._seen = self._accounts()

    def _accounts(self) -> tuple[int, int]:
        """What queue keys are read from, as of now: the queues' accounts and the state
        (a statement ticks both, even one discarded)."""
        return (self.session.ledger.version, self.session.state.clock)

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
                self._seen = self._accounts()
                return child
            node = child

    def served(self, more: bool) -> None:
        """The picked leaf was served; ``more``: it still has work."""
        tree = self.session.tree
        moved = self._accounts() != self._seen
        for q in reversed(self._path):
            keep = more if tree.is_leaf(q) else bool(self.heaps.get(q))
            if keep and not moved:
                break  # ``q`` and the queues above it stay where they are, as they were
            heap = self.heaps[tree.parent[q]]
            # ``q`` is on top: it was picked and nothing moved since. Re-keyed in one sift,
            # not a pop and a push (keys end in the queue's name: unique, so the order
            # of picks is the keys' whatever the heap's layout).
            if keep:
                heapq.heapreplace(heap, (self.session.callbacks.queue_key(q), q))
            else:
                heapq.heappop(heap)
        self._path = []
