"""How a node's GPUs are connected, and which GPUs (and RDMA devices) belong together.

A node's GPU links are a matrix of link kinds, as ``nvidia-smi topo -m`` prints them, each
turned into a rank where higher is faster:

======  ==========================================================  ======
kind    path                                                        rank
======  ==========================================================  ======
NV<k>   k bonded NVLinks                                            100+k
PIX     one PCIe switch                                             40
PXB     several PCIe switches, no host bridge                       30
PHB     a PCIe host bridge (one CPU)                                20
NODE    across host bridges inside one NUMA node                    10
SYS     across NUMA nodes (SMP interconnect); SOC is its old name   0
======  ==========================================================  ======

An *island* is a connected group of GPUs over the node's fastest class of link (any NVLink
when there is one, else the best PCIe path): a job spread over two islands talks over the
slow path. A set of GPUs is as good as its slowest pair, then as its links summed; among
equally good sets the one that leaves the fewest idle GPUs behind in the islands it touches
wins (best fit, so whole islands stay free for the next large job), then the lowest minors.

Nodes share a handful of distinct matrices (every DGX is alike), so each distinct matrix
gets one plan, built once: the candidate sets of each size, best first, and a memo of the
choice per idle set. A choice is then a dictionary lookup.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

NVLINK: Final = 100
PCIE_RANKS: Final = {"PIX": 40, "PXB": 30, "PHB": 20, "NODE": 10, "SYS": 0, "SOC": 0}
LINK_KINDS: Final = "X (self), NV<k> (k NVLinks), PIX, PXB, PHB, NODE or SYS"
_NV: Final = re.compile(r"NV([0-9]{1,2})")


def link_rank(kind: str) -> int | None:
    """The rank of a link kind ("NV12", "PIX", ...); None if it is not one."""
    kind = kind.strip().upper()
    match = _NV.fullmatch(kind)
    if match is not None:
        return NVLINK + int(match[1])
    if kind == "NVLINK":
        return NVLINK + 1
    return PCIE_RANKS.get(kind)


@dataclass(frozen=True, slots=True)
class GpuLinks:
    """Link ranks between the GPUs of one node, by GPU slot; the diagonal is unused."""

    ranks: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        n = len(self.ranks)
        if any(len(row) != n for row in self.ranks):
            raise ValueError(f"a GPU link matrix must be square, got {self.ranks}")

    @property
    def size(self) -> int:
        return len(self.ranks)

    def rank(self, a: int, b: int) -> int:
        return self.ranks[a][b]

    def plan(self) -> TopologyPlan:
        found = _PLANS.get(self.ranks)
        if found is None:
            found = _PLANS[self.ranks] = TopologyPlan(self.ranks)
        return found


_PLANS: dict[tuple[tuple[int, ...], ...], TopologyPlan] = {}


class TopologyPlan:
    """Islands and ranked GPU sets of one link matrix (shared by every node that has it)."""

    def __init__(self, ranks: tuple[tuple[int, ...], ...]) -> None:
        self.ranks = ranks
        self.size = n = len(ranks)
        best = max((ranks[a][b] for a in range(n) for b in range(n) if a != b), default=0)
        self.threshold = NVLINK if best >= NVLINK else best
        self.islands = self._islands()
        self.island_of = [next(m for m in self.islands if m >> g & 1) for g in range(n)]
        self._ranked: dict[int, list[tuple[int, int, int]]] = {}
        self._memo: dict[tuple[int, int], tuple[tuple[int, ...], int] | None] = {}

    def _islands(self) -> list[int]:
        n, seen, out = self.size, 0, []
        for start in range(n):
            if seen >> start & 1:
                continue
            mask, stack = 0, [start]
            while stack:
                g = stack.pop()
                if mask >> g & 1:
                    continue
                mask |= 1 << g
                stack.extend(h for h in range(n) if h != g and self.ranks[g][h] >= self.threshold)
            seen |= mask
            out.append(mask)
        return out

    def ranked(self, k: int) -> list[tuple[int, int, int]]:
        """Every set of ``k`` GPUs as (slowest link, links summed, mask), best first and,
        among equals, lowest minors first."""
        found = self._ranked.get(k)
        if found is None:
            sets = []
            for combo in itertools.combinations(range(self.size), k):
                pairs = [self.ranks[a][b] for a, b in itertools.combinations(combo, 2)]
                mask = sum(1 << g for g in combo)
                sets.append((min(pairs, default=0), sum(pairs), combo, mask))
            sets.sort(key=lambda s: (-s[0], -s[1], s[2]))
            found = self._ranked[k] = [(s[0], s[1], s[3]) for s in sets]
        return found

    def choose(self, idle: int, k: int) -> tuple[tuple[int, ...], int] | None:
        """The best ``k`` of the idle GPUs (a bit mask) and their slowest link; None if
        fewer than ``k`` are idle."""
        key = (idle, k)
        if key in self._memo:
            return self._memo[key]
        best: tuple[int, int] | None = None
        choice: tuple[int, int] | None = None  # (leftover, mask)
        for slowest, total, mask in self.ranked(k):
            if best is not None and (slowest, total) != best:
                break
            if mask & idle != mask:
                continue
            best = (slowest, total)
            touched = 0
            for g in range(self.size):
                if mask >> g & 1:
                    touched |= self.island_of[g]
            leftover = (touched & idle & ~mask).bit_count()
            if choice is None or leftover < choice[0]:
                choice = (leftover, mask)
        out = None
        if choice is not None and best is not None:
            slots = tuple(g for g in range(self.size) if choice[1] >> g & 1)
            out = (slots, best[0])
        self._memo[key] = out
        return out

    def fits_one_island(self, slowest: int, k: int) -> bool:
        return k <= 1 or slowest >= self.threshold


def links_from_peers(
    count: int, peers: Sequence[Sequence[int]], pcie: Sequence[str], numa: Sequence[int]
) -> GpuLinks:
    """A matrix from what a Device resource says: NVLink peers (one NVLink each), else a
    shared PCIe switch (PIX), else a shared NUMA node (NODE), else SYS."""
    rows = []
    for a in range(count):
        row = []
        for b in range(count):
            if a == b:
                row.append(0)
            elif b in peers[a] or a in peers[b]:
                row.append(NVLINK + 1)
            elif pcie[a] and pcie[a] == pcie[b]:
                row.append(PCIE_RANKS["PIX"])
            elif numa[a] >= 0 and numa[a] == numa[b]:
                row.append(PCIE_RANKS["NODE"])
            else:
                row.append(PCIE_RANKS["SYS"])
        rows.append(tuple(row))
    return GpuLinks(tuple(rows))


def nearest(
    targets: Sequence[tuple[int, str]], free: Sequence[tuple[int, int, str]], count: int
) -> tuple[int, ...]:
    """``count`` of the ``free`` devices (slot, NUMA node, PCIe switch) closest to the
    ``targets`` (NUMA node, PCIe switch) of the GPUs a pod got: same PCIe switch first, then
    same NUMA node, then the rest, lowest slot first among equals."""
    switches = {p for _, p in targets if p}
    numas = {n for n, _ in targets if n >= 0}

    def distance(item: tuple[int, int, str]) -> tuple[int, int]:
        slot, numa, pcie = item
        if pcie and pcie in switches:
            return (0, slot)
        if numa >= 0 and numa in numas:
            return (1, slot)
        return (2, slot)

    return tuple(sorted(item[0] for item in sorted(free, key=distance)[:count]))
