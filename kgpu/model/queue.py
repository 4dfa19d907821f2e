"""Queues: a tree of teams sharing the cluster, each with a quota, a limit and a weight.

Every resource of a queue (``cpu``, ``memory``, ``gpu`` and each card name; see
:mod:`kgpu.model.resources`) has:

- ``deserved``: the quota the queue is guaranteed when it asks for it (missing: 0);
- ``limit``: the most it may ever hold, borrowed or not (missing: no limit);
- ``over_quota_weight``: its weight when what no quota claims is divided (missing: 1).

Two options give Volcano's Queues (:mod:`kgpu.kube.anchors.volcano`) Volcano's meaning, and
leave every other queue as it was:

- ``guarantee``: resources held for the queue alone, never lent: every queue not on its path
  is held below what the cluster offers less the guarantees of the others (Volcano's
  capacity plugin: ``realCapability = total - others' guarantee``), whether or not the queue
  uses them (:func:`guarantee_ceilings`);
- ``reclaimable`` False: what the queue holds past its deserved is never reclaimed.

``priority`` puts a queue ahead of its siblings when over-quota resources are divided and
when the scheduler picks the next queue; ``min_runtime_s`` protects its pods from
preemption and reclaim until they have run that long.

A queue names its ``parent`` ("" for the top level); only leaf queues hold jobs. The tree
is checked when it is built: a queue with an unknown parent, on a cycle or listed twice is
left out with a problem that names it, the field, the value and what was expected, and the
rest of the tree is used, so one bad Queue object never stops the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from kgpu.model.card import parse_card_quota

DEFAULT_QUEUE: Final = "default"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    parent: str = ""
    deserved: Mapping[str, int] = field(default_factory=dict)
    limit: Mapping[str, int] = field(default_factory=dict)
    over_quota_weight: Mapping[str, float] = field(default_factory=dict)
    priority: int = 0
    min_runtime_s: float = 0.0
    # The Queue's own cardUnlimitedCpuMemory: its CPU and memory limits do not hold pods
    # that take a card (the capacity-card argument of that name sets it for every queue).
    card_unlimited_cpu_memory: bool = False
    guarantee: Mapping[str, int] = field(default_factory=dict)
    reclaimable: bool = True

    def weight(self, resource: str) -> float:
        return self.over_quota_weight.get(resource, 1.0)


def with_card_quota(queue: QueueSpec, quota: Mapping[str, int]) -> QueueSpec:
    """The queue with Volcano card quotas (whole cards) as its deserved and limit per card.

    A card's quota is both what the queue is guaranteed and the most it may hold, as the
    capacity-card plugin makes it; a deserved or limit the Queue spec sets for that card
    itself wins.
    """
    milli = {name: count * 1000 for name, count in quota.items()}
    return replace(queue, deserved={**milli, **queue.deserved}, limit={**milli, **queue.limit})


def queue_from_annotation(queue: QueueSpec, text: str) -> QueueSpec:
    """``with_card_quota`` over the text of ``volcano.sh/card.quota`` (CardError if bad)."""
    return with_card_quota(queue, parse_card_quota(text))


def guarantee_ceilings(specs: Sequence[QueueSpec], total: Mapping[str, int]) -> list[QueueSpec]:
    """``specs`` with what the other queues' guarantees hold back as limits: a queue may hold
    of a resource at most ``total`` less the guarantees of the queues off its path (its own
    and its ancestors' are its own to use, its descendants' it holds for them). A guarantee
    nested in another's counts once, in the outermost. Unchanged when no queue has one."""
    if not any(spec.guarantee for spec in specs):
        return list(specs)
    by_name = {spec.name: spec for spec in specs}

    def ancestors(name: str) -> list[str]:
        out: list[str] = []
        spec = by_name.get(name)
        while spec is not None and spec.parent and spec.parent not in out:
            out.append(spec.parent)
            spec = by_name.get(spec.parent)
        return out

    lines = {spec.name: ancestors(spec.name) for spec in specs}
    out = []
    for spec in specs:
        mine = {spec.name, *lines[spec.name]}
        held: dict[str, int] = {}
        for other in specs:
            if other.name in mine or spec.name in lines[other.name]:
                continue  # on its path, or below it (its own jobs' guarantee)
            for resource, amount in other.guarantee.items():
                outer = [a for a in lines[other.name] if a not in mine]
                if any(resource in by_name[a].guarantee for a in outer if a in by_name):
                    continue  # counted in the outermost guarantee
                held[resource] = held.get(resource, 0) + amount
        if not held:
            out.append(spec)
            continue
        limit = dict(spec.limit)
        for resource, amount in held.items():
            ceiling = max(total.get(resource, 0) - amount, 0)
            limit[resource] = min(limit.get(resource, ceiling), ceiling)
        out.append(replace(spec, limit=limit))
    return out


@dataclass(frozen=True, slots=True)
class QueueProblem:
    """A queue left out of the tree, and why, in the words a Queue event carries."""

    queue: str
    field: str
    value: object
    expected: str

    @property
    def message(self) -> str:
        shown = json.dumps(self.value, ensure_ascii=False, default=str)
        return f"Queue {self.queue}: {self.field} is {shown}, expected {self.expected}"


class QueueTree:
    """The usable queues, indexed: ``specs[i]``, ``parent[i]`` (-1: top level), children.

    Indices follow a depth-first walk from the top, siblings in name order, so a parent
    always comes before its children and every loop over queues is deterministic.
    """

    def __init__(self, specs: Sequence[QueueSpec]) -> None:
        self.problems: list[QueueProblem] = []
        usable = self._check(specs)
        kids: dict[str, list[str]] = {}
        for spec in usable.values():
            kids.setdefault(spec.parent, []).append(spec.name)
        self.specs: list[QueueSpec] = []
        self.parent: list[int] = []
        self.children: list[list[int]] = []
        self.top: list[int] = []
        self.index: dict[str, int] = {}
        stack = [(name, -1) for name in sorted(kids.get("", []), reverse=True)]
        while stack:
            name, parent = stack.pop()
            i = len(self.specs)
            self.index[name] = i
            self.specs.append(usable[name])
            self.parent.append(parent)
            self.children.append([])
            (self.children[parent] if parent >= 0 else self.top).append(i)
            stack.extend((kid, i) for kid in sorted(kids.get(name, []), reverse=True))
        # Path from each queue up to its top-level ancestor, the queue itself first.
        self.path: list[tuple[int, ...]] = []
        for i in range(len(self.specs)):
            up = self.parent[i]
            self.path.append((i, *self.path[up]) if up >= 0 else (i,))

    def _check(self, specs: Sequence[QueueSpec]) -> dict[str, QueueSpec]:
        by_name: dict[str, QueueSpec] = {}
        twice: set[str] = set()
        for spec in specs:
            if not spec.name:
                self.problems.append(QueueProblem("(no name)", "name", "", "a non-empty name"))
            elif spec.name in by_name:
                twice.add(spec.name)
            else:
                by_name[spec.name] = spec
        for name in sorted(twice):
            del by_name[name]
            self.problems.append(QueueProblem(name, "name", name, "a name used by one queue"))
        for spec in list(by_name.values()):
            bad = _bad_amounts(spec)
            if bad is not None:
                del by_name[spec.name]
                self.problems.append(bad)
        # Leave out queues whose parent is missing or that sit on a cycle, and their subtrees.
        ok: dict[str, bool] = {"": True}

        def settle(name: str, seen: tuple[str, ...]) -> bool:
            if name in ok:
                return ok[name]
            spec = by_name.get(name)
            if spec is None or name in seen:
                return False
            ok[name] = settle(spec.parent, (*seen, name))
            return ok[name]

        for name in sorted(by_name):
            if not settle(name, ()):
                parent = by_name[name].parent
                expected = (
                    "a queue that is not its own ancestor"
                    if parent in by_name
                    else "the name of an existing queue, or empty for a top-level queue"
                )
                self.problems.append(QueueProblem(name, "parent", parent, expected))
        return {name: spec for name, spec in by_name.items() if ok.get(name)}

    def __len__(self) -> int:
        return len(self.specs)

    def is_leaf(self, i: int) -> bool:
        return not self.children[i]

    def name(self, i: int) -> str:
        return self.specs[i].name

    def lca_below(self, a: int, b: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The parts of ``a``'s and ``b``'s paths below their lowest common ancestor."""
        shared = set(self.path[a]) & set(self.path[b])
        return (
            tuple(q for q in self.path[a] if q not in shared),
            tuple(q for q in self.path[b] if q not in shared),
        )


def _bad_amounts(spec: QueueSpec) -> QueueProblem | None:
    for what, amounts in (("deserved", spec.deserved), ("limit", spec.limit)):
        for resource, amount in amounts.items():
            if amount < 0:
                return QueueProblem(spec.name, f"{what}[{resource}]", amount, "at least 0")
    for resource, weight in spec.over_quota_weight.items():
        if not weight >= 0:
            return QueueProblem(
                spec.name, f"overQuotaWeight[{resource}]", weight, "a number of at least 0"
            )
    for resource, amount in spec.guarantee.items():
        if amount < 0:
            return QueueProblem(spec.name, f"guarantee[{resource}]", amount, "at least 0")
    if spec.min_runtime_s < 0:
        return QueueProblem(spec.name, "minRuntime", spec.min_runtime_s, "at least 0 seconds")
    return None
