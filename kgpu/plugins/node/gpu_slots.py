"""Picks of GPU slots on one node that several GPU choices share: the lowest-index idle
GPUs, the tightest GPU for a share, and the best-connected idle set where links are known.

A node's row holds a handful of GPU slots, so these run in plain Python over the row as a
list: numpy's overhead per call would cost more than the work.
"""

from __future__ import annotations

from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.cluster import ClusterState


def lowest_idle_gpus(state: ClusterState, node: int, count: int) -> tuple[int, ...]:
    free = state.gpu_free[node].tolist()
    return tuple([g for g, milli in enumerate(free) if milli == MILLI_PER_GPU][:count])


def tightest_gpu(state: ClusterState, node: int, milli: int) -> int:
    """The GPU with the least free milli that still covers ``milli``, lowest index first."""
    free = state.gpu_free[node].tolist()
    return min(((f, g) for g, f in enumerate(free) if f >= milli), default=(0, 0))[1]


def linked_gpus(
    state: ClusterState, node: int, count: int, allowed: int = -1
) -> tuple[tuple[int, ...], int] | None:
    """The best-connected ``count`` idle GPUs of a node with known links (limited to the
    ``allowed`` bit mask), and their slowest link; None if fewer are idle."""
    links = state.links[node]
    if links is None:
        return None
    free = state.gpu_free[node].tolist()
    idle = sum(1 << g for g in range(links.size) if free[g] == MILLI_PER_GPU) & allowed
    return links.plan().choose(idle, count)
