"""One node-group cycle for one workspace: the profile's filters in order, then its scores.

The cycle only decides; it changes nothing. Its answer is data: the chosen group with its
eligible nodes, or a denial, and in both cases a report per group saying which filter
rejected it and why, or what it scored.

How answers combine (as in the pod cycle, :mod:`kgpu.framework.scheduler`):

- Filter: a group must pass every filter. A node filter drops single nodes from the groups
  still in the running; a group left without an eligible node is rejected with the reason
  that dropped most of its nodes there. A group filter judges the groups as they stand. A
  group rejected by one filter is not shown to the next and keeps that first reason.
- Score: the sum over score plugins of weight × score (each already on 0..100).
- Ties between groups with the best total go to the group with more eligible nodes (the
  group is chosen once, at creation, so room to scale replicas later is worth having), then
  to the lowest key (product, GPUs per node, memory per GPU): the same cluster and workspace
  always get the same group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from kgpu.framework.groups import (
    GroupCycle,
    GroupFilterPlugin,
    GroupNodeFilterPlugin,
    GroupScorePlugin,
    NodeGroup,
    NodeGroupKey,
)
from kgpu.framework.interfaces import IntArray
from kgpu.framework.status import Code, Reason, Status
from kgpu.model.node import NodeName
from kgpu.model.workspace import WorkspaceSpec

# KAITO's admission denial, word for word: users and tests match on it.
DENIAL: Final = (
    "No suitable node group found: insufficient capacity or no matching configurations "
    "after filtering."
)
NO_SUITABLE_GROUP: Final = "NoSuitableNodeGroup"


@dataclass(frozen=True, slots=True)
class GroupReport:
    """What one cycle made of one group.

    ``plugin``, ``reason`` and ``detail`` say which filter rejected the group, why, and the
    figures behind it; all empty when it passed, and then ``score`` is its total.
    ``dropped`` counts the group's nodes that node filters made ineligible, per reason.
    """

    key: NodeGroupKey
    nodes: int
    eligible: int
    plugin: str = ""
    reason: Reason | None = None
    detail: str = ""
    dropped: tuple[tuple[Reason, int], ...] = ()
    score: float | None = None

    @property
    def passed(self) -> bool:
        return self.reason is None

    def __str__(self) -> str:
        head = f"{self.key} ({self.nodes} node{'' if self.nodes == 1 else 's'})"
        if self.reason is None:
            return f"{head}: fits, score {self.score or 0.0:.1f}"
        text = f"{head}: {self.plugin}: {self.reason.phrase}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True, slots=True)
class GroupChoice:
    """The group chosen, its eligible nodes (by name) and how a replica maps onto them."""

    workspace: WorkspaceSpec
    group: NodeGroup
    nodes: tuple[NodeName, ...]
    nodes_per_replica: int
    score: float
    reports: tuple[GroupReport, ...]

    @property
    def key(self) -> NodeGroupKey:
        return self.group.key

    @property
    def nodes_needed(self) -> int:
        return self.workspace.replicas * self.nodes_per_replica


@dataclass(frozen=True, slots=True)
class NoGroup:
    """No group fits: KAITO's denial, followed by each group's reason (and any notes)."""

    workspace: WorkspaceSpec
    reports: tuple[GroupReport, ...]
    notes: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        parts = [str(r) for r in self.reports] + list(self.notes)
        if not parts:
            parts = ["there are no node groups to choose from"]
        return f"{DENIAL} " + "; ".join(parts) + "."

    @property
    def status(self) -> Status:
        # Unschedulable, not unresolvable: nodes joining or changing labels may fix it.
        return Status(Code.UNSCHEDULABLE, (self.message,), reason_code=NO_SUITABLE_GROUP)


GroupOutcome = GroupChoice | NoGroup


@dataclass(frozen=True, slots=True)
class _FilterStep:
    name: str
    nodes: GroupNodeFilterPlugin | None
    groups: GroupFilterPlugin | None


@dataclass(slots=True)
class _Rejection:
    plugin: str
    reason: Reason
    detail: str


class GroupScheduler:
    """Runs node-group cycles with a fixed set of plugins (built by the registry)."""

    def __init__(
        self,
        filters: Sequence[GroupNodeFilterPlugin | GroupFilterPlugin],
        scores: Sequence[tuple[GroupScorePlugin, float]],
    ) -> None:
        steps = []
        for plugin in filters:
            # A plugin may narrow nodes and judge groups too; the node part runs first.
            nodes = plugin if isinstance(plugin, GroupNodeFilterPlugin) else None
            groups = plugin if isinstance(plugin, GroupFilterPlugin) else None
            if nodes is None and groups is None:
                raise TypeError(f"plugin {plugin.name!r} filters neither nodes nor groups")
            steps.append(_FilterStep(plugin.name, nodes, groups))
        self.filters = tuple(steps)
        self.scores = tuple(scores)

    def schedule(self, groups: Sequence[NodeGroup], workspace: WorkspaceSpec) -> GroupOutcome:
        cycle = GroupCycle(groups, workspace)
        count = len(cycle.groups)
        alive: IntArray = np.arange(count, dtype=np.int64)
        rejected: dict[int, _Rejection] = {}
        dropped: list[dict[Reason, int]] = [{} for _ in range(count)]
        for step in self.filters:
            if step.nodes is not None and len(alive):
                alive = self._narrow(cycle, step.name, step.nodes, alive, rejected, dropped)
            if step.groups is not None and len(alive):
                verdicts = step.groups.filter_groups(cycle, workspace, alive)
                for reason, mask in verdicts.rejected:
                    for pos in np.flatnonzero(mask).tolist():
                        g = int(alive[pos])
                        detail = _with_dropped(verdicts.details.get(pos, ""), dropped[g])
                        rejected[g] = _Rejection(step.name, reason, detail)
                alive = alive[verdicts.ok]
        totals = self._totals(cycle, workspace, alive)
        eligible = cycle.eligible_count(np.arange(count, dtype=np.int64))
        reports = tuple(
            _report(cycle.groups[g], int(eligible[g]), rejected.get(g), dropped[g], totals.get(g))
            for g in range(count)
        )
        if not len(alive):
            return NoGroup(workspace, reports)
        best = min(
            alive.tolist(), key=lambda g: (-totals[g], -int(eligible[g]), cycle.groups[g].key)
        )
        chosen = cycle.groups[best]
        members = np.flatnonzero(cycle.eligible & (cycle.node_group == best)).tolist()
        names = tuple(sorted(cycle.nodes[i].name for i in members))
        per_replica = int(cycle.nodes_per_replica(np.array([best], dtype=np.int64))[0])
        return GroupChoice(workspace, chosen, names, per_replica, totals[best], reports)

    def _narrow(
        self,
        cycle: GroupCycle,
        name: str,
        plugin: GroupNodeFilterPlugin,
        alive: IntArray,
        rejected: dict[int, _Rejection],
        dropped: list[dict[Reason, int]],
    ) -> IntArray:
        """Run a node filter over the eligible nodes of ``alive``; return the groups left."""
        nodes = np.flatnonzero(cycle.eligible & np.isin(cycle.node_group, alive))
        verdicts = plugin.filter_nodes(cycle, cycle.workspace, nodes)
        here: dict[int, dict[Reason, int]] = {}
        for reason, mask in verdicts.rejected:
            counts = np.bincount(cycle.node_group[nodes[mask]], minlength=len(cycle.groups))
            for g in np.flatnonzero(counts).tolist():
                n = int(counts[g])
                here.setdefault(g, {})[reason] = n
                dropped[g][reason] = dropped[g].get(reason, 0) + n
        cycle.eligible[nodes[~verdicts.ok]] = False
        left = cycle.eligible_count(alive)
        for g in alive[left == 0].tolist():
            drops = here[g]
            main = max(drops, key=lambda r: drops[r])  # the first of equals: filter order
            # One reason for every node needs no figures; several are each counted.
            detail = "" if len(dropped[g]) == 1 else "no eligible node: " + _counts(dropped[g])
            rejected[g] = _Rejection(name, main, detail)
        return alive[left > 0]

    def _totals(
        self, cycle: GroupCycle, workspace: WorkspaceSpec, alive: IntArray
    ) -> dict[int, float]:
        total = np.zeros(len(alive), dtype=np.float64)
        if len(alive):
            for plugin, weight in self.scores:
                total += weight * plugin.score_groups(cycle, workspace, alive)
        return {int(g): float(t) + 0.0 for g, t in zip(alive.tolist(), total.tolist(), strict=True)}


def _counts(drops: dict[Reason, int]) -> str:
    return ", ".join(f"{n} {r.phrase}" for r, n in drops.items())


def _with_dropped(detail: str, drops: dict[Reason, int]) -> str:
    """A group filter's figures, and which of the group's nodes were not counted."""
    if not drops:
        return detail
    extra = "not counted: " + _counts(drops)
    return f"{detail}; {extra}" if detail else extra


def _report(
    group: NodeGroup,
    eligible: int,
    rejection: _Rejection | None,
    dropped: dict[Reason, int],
    score: float | None,
) -> GroupReport:
    drops = tuple(dropped.items())
    if rejection is None:
        return GroupReport(group.key, len(group.nodes), eligible, dropped=drops, score=score)
    return GroupReport(
        group.key,
        len(group.nodes),
        eligible,
        rejection.plugin,
        rejection.reason,
        rejection.detail,
        drops,
    )
