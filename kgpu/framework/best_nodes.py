"""One shape's feasible nodes ranked by one raw score, kept from cycle to cycle.

A cycle whose choice is read off one cached score (``Scheduler._pick_raw``) wants the
feasible node with the highest raw score, the lowest tie-break rank among equals, and
whether any feasible node scores less (a normalised score's top is then 100, else 0). Over
the arrays that is a pass over every feasible node, a dozen microseconds at 5,000 nodes,
while most cycles changed one node since the shape's last: here the shape keeps its nodes
in two heaps (highest first, lowest first) and a cycle pushes the nodes it evaluated again
and pops what went stale, a few heap operations instead of the pass.

Entries are never removed from the heaps when a node changes: an entry is good while the
node's current score (``score``, None while it is not feasible) is still the one it
records, and the heaps' tops are checked against that when read. An entry that is stale
but equal to the node's current score is the node's current entry again, so nothing
depends on which copy comes first. The heaps are rebuilt from the node's current scores
once stale entries outnumber good ones.
"""

from __future__ import annotations

import heapq
import math

# (-score, tie-break rank, node): the best node is the smallest.
_High = tuple[float, int, int]
# (score, node): the lowest score is the smallest.
_Low = tuple[float, int]


class BestNodes:
    """The feasible nodes of one shape by one raw score (see the module docstring)."""

    __slots__ = ("_high", "_low", "score", "tie")

    def __init__(self, nodes: list[int], scores: list[float], tie: list[int] | None) -> None:
        """``nodes``: the feasible nodes; ``scores``: their raw scores; ``tie``: every
        node's tie-break rank (None: the node's index)."""
        self.tie = tie
        self.score: dict[int, float] = dict(zip(nodes, scores, strict=True))
        self._high: list[_High] = []
        self._low: list[_Low] = []
        self._rebuild()

    @staticmethod
    def usable(scores: list[float]) -> bool:
        """Whether ``scores`` compare as the arrays' reductions do: no NaN (which wins
        ``np.maximum`` but loses every comparison)."""
        return not any(math.isnan(s) for s in scores)

    def _rebuild(self) -> None:
        tie = self.tie
        items = self.score.items()
        if tie is None:
            self._high = [(-s, n, n) for n, s in items]
        else:
            self._high = [(-s, tie[n], n) for n, s in items]
        self._low = [(s, n) for n, s in items]
        heapq.heapify(self._high)
        heapq.heapify(self._low)

    def update(self, nodes: list[int], scores: list[float | None]) -> None:
        """``nodes`` were evaluated again: each its raw score, None where not feasible."""
        current, high, low, tie = self.score, self._high, self._low, self.tie
        for n, s in zip(nodes, scores, strict=True):
            if s is None:
                current.pop(n, None)
                continue
            if current.get(n) == s:
                continue  # its entries stand
            current[n] = s
            heapq.heappush(high, (-s, n if tie is None else tie[n], n))
            heapq.heappush(low, (s, n))
        if len(high) + len(low) > 4 * len(current) + 128:
            self._rebuild()

    def best(self) -> tuple[int, float, float] | None:
        """The best node, its score and the lowest feasible score; None if none is feasible."""
        current, high, low = self.score, self._high, self._low
        while high:
            neg, _, node = high[0]
            if current.get(node) == -neg:
                break
            heapq.heappop(high)
        else:
            return None
        while True:
            s, n = low[0]  # not empty: the best node has its entry there
            if current.get(n) == s:
                break
            heapq.heappop(low)
        return high[0][2], -high[0][0], low[0][0]

    def held(self) -> int:
        """How many entries the heaps hold, stale ones included (``most_bytes`` bounds
        their bytes)."""
        return len(self._high) + len(self._low)

    @staticmethod
    def most_bytes(nodes: int) -> int:
        """About the most a ranking over ``nodes`` nodes holds (its heaps are rebuilt past
        twice their good entries): tuples, floats and list slots in the heaps, a dictionary
        slot per node. The cache's budget counts this."""
        return 400 * nodes + 64 * 128
