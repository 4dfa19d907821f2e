"""Which queue to serve next: down the tree, the child first in queue order at each level.

Each parent keeps a heap of its children that still have work, keyed by the session's
queue order. Serving a job changes what its queue and their ancestors hold, and nothing
else, so after each job only the queues on that path are re-keyed: a pick costs the
depth of the tree times a heap operation, however many queues there are. Most jobs
tried in reclaim, and many in allocate, change nothing at all (they fail before any
placement): then no key moved, and only a queue left without work leaves its heap.

A heap entry is the queue's key with the queue appended: one flat tuple, whose items
compare natively (the key's last item, the queue's name, is unique: the queue itself is
never compared, and the order of picks is the keys' whatever the heap's layout).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from kgpu.framework.session import Session

Entry = tuple[Any, ...]  # the queue's key, then the queue


class QueuePicker:
    def __init__(self, session: Session, leaves: Iterable[int]) -> None:
        self.session = session
        self.callbacks = session.callbacks
        self.ledger = session.ledger
        self.state = session.state
        tree = session.tree
        # Read once: the tree stands for the session, and is plain Python even compiled.
        self.parent: list[int] = list(tree.parent)
        self.leaf: list[bool] = [not kids for kids in tree.children]
        self.heaps: dict[int, list[Entry]] = {}
        active: set[int] = set()
        for leaf in leaves:
            active.update(tree.path[leaf])
        for q in sorted(active):
            heapq.heappush(self.heaps.setdefault(self.parent[q], []), self.callbacks.queue_entry(q))
        self._path: list[int] = []
        # What queue keys are read from, as of the last pick: the queues' accounts and the
        # state (a statement ticks both, even one discarded).
        self._version = self.ledger.version
        self._clock = self.state.clock

    def pick(self) -> int | None:
        """The leaf queue to serve now, or None when no queue has work left."""
        leaf, heaps = self.leaf, self.heaps
        path: list[int] = []
        self._path = path
        node = -1
        while True:
            heap = heaps.get(node)
            if not heap:
                return None
            child: int = heap[0][-1]
            path.append(child)
            if leaf[child]:
                self._version = self.ledger.version
                self._clock = self.state.clock
                return child
            node = child

    def served(self, more: bool) -> None:
        """The picked leaf was served; ``more``: it still has work."""
        leaf, heaps, parent = self.leaf, self.heaps, self.parent
        moved = self.ledger.version != self._version or self.state.clock != self._clock
        path = self._path
        for i in range(len(path) - 1, -1, -1):
            q = path[i]
            keep = more if leaf[q] else bool(heaps.get(q))
            if keep and not moved:
                break  # ``q`` and the queues above it stay where they are, as they were
            heap = heaps[parent[q]]
            if not keep:
                heapq.heappop(heap)  # ``q`` is on top: it was picked and nothing moved since
                continue
            entry = self.callbacks.queue_entry(q)
            # Re-keyed in one sift, not a pop and a push; not at all when its key came
            # back the same (a statement discarded).
            if entry != heap[0]:
                heapq.heapreplace(heap, entry)
        self._path = []
