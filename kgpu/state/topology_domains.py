"""The domains of each topology level over a cluster's nodes, and their free room.

A domain of level ``i`` is a path of label values, one per level from the highest down to
``i`` (block ``b1`` then rack ``r1``): Kueue's convention, under which two racks named
``r1`` in two blocks are two racks. A node lacking the label of a level, or of one above
it, is in no domain of that level (KAI: a required placement never uses such a node).

Labels are fixed per node (as ``ClusterState.label_mask`` assumes), so the domains are
worked out once per state; their free room is read off the state's arrays when asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState, IntArray

Selector = tuple[tuple[str, str], ...]  # node label pairs, as PodSpec.node_selector


@dataclass(frozen=True, slots=True)
class LevelDomains:
    """One level's domains; ids follow the sorted order of their paths (deterministic).

    ``of_node[n]``: node ``n``'s domain (-1: none). ``names``: how messages call each
    domain (its own value, or its path ``b1/r1`` where the value alone is ambiguous).
    ``selectors``: the node labels that pin a pod to each domain. ``parent``: each domain's
    domain one level up (-1 at the top).
    """

    name: str
    label: str
    of_node: IntArray
    names: tuple[str, ...]
    selectors: tuple[Selector, ...]
    parent: IntArray

    def __len__(self) -> int:
        return len(self.names)

    def holding(self, nodes: Iterable[int]) -> list[int]:
        """The domains ``nodes`` are in (-1: a node in none), sorted."""
        return sorted({int(self.of_node[n]) for n in nodes})

    def sums(self, per_node: IntArray) -> IntArray:
        """``per_node`` summed over each domain's nodes."""
        inside = self.of_node >= 0
        totals = np.bincount(
            self.of_node[inside], weights=per_node[inside].astype(np.float64), minlength=len(self)
        )
        return np.rint(totals).astype(np.int64)


def pinned(pod: PodSpec, selector: Selector) -> PodSpec:
    """``pod`` held to the nodes that also have the labels of ``selector`` (a domain's),
    through its node selector, which the profile's NodeSelector filter holds it to."""
    return replace(pod, node_selector=tuple(sorted({*pod.node_selector, *selector})))


class TopologyDomains:
    """Every level's domains over the nodes of ``state``."""

    __slots__ = ("levels", "state")

    def __init__(self, state: ClusterState, levels: Sequence[tuple[str, str]]) -> None:
        self.state = state
        out: list[LevelDomains] = []
        paths: list[tuple[str, ...] | None] = [() for _ in state.nodes]
        for name, label in levels:
            for n, node in enumerate(state.nodes):
                path = paths[n]
                value = node.labels.get(label)
                paths[n] = None if path is None or value is None else (*path, value)
            out.append(_level(name, label, paths, out[-1] if out else None, levels))
        self.levels = tuple(out)

    def free(self) -> tuple[IntArray, IntArray, IntArray]:
        """Free milli-GPU, milli-CPU and MiB of each node that takes pods (cordoned: 0)."""
        state = self.state
        open_ = state.schedulable.astype(np.int64)
        return state.gpu_free_total * open_, state.cpu_free * open_, state.mem_free * open_


def _level(
    name: str,
    label: str,
    paths: Sequence[tuple[str, ...] | None],
    above: LevelDomains | None,
    levels: Sequence[tuple[str, str]],
) -> LevelDomains:
    distinct = sorted({p for p in paths if p is not None})
    ids = {path: i for i, path in enumerate(distinct)}
    of_node = np.array([-1 if p is None else ids[p] for p in paths], dtype=np.int64)
    count: dict[str, int] = {}
    for path in distinct:
        count[path[-1]] = count.get(path[-1], 0) + 1
    names = tuple(p[-1] if count[p[-1]] == 1 else "/".join(p) for p in distinct)
    depth = len(distinct[0]) if distinct else 0
    selectors = tuple(
        tuple(zip([lab for _, lab in levels[:depth]], path, strict=True)) for path in distinct
    )
    if above is None:
        parent = np.full(len(distinct), -1, dtype=np.int64)
    else:
        # The level above holds every prefix of this level's paths: map through its paths.
        above_ids = {tuple(v for _, v in sel): i for i, sel in enumerate(above.selectors)}
        parent = np.array([above_ids.get(p[:-1], -1) for p in distinct], dtype=np.int64)
    return LevelDomains(name, label, of_node, names, selectors, parent)
