"""What each queue holds, has admitted and should hold: the accounts a session keeps.

Every change to a queue's account is also a change to its ancestors' accounts: a pod
placed in ``team-a/research`` counts in ``research``, in ``team-a`` and up to the top.
Limits are checked the same way, on every queue of the path: a child never takes its
parent past the parent's limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from kgpu.model.queue import QueueTree
from kgpu.model.resources import CPU, GPU, MEMORY, Vector, add, show

INSUFFICIENT_CPU_QUOTA: Final = "InsufficientCPUQuota"
INSUFFICIENT_MEMORY_QUOTA: Final = "InsufficientMemoryQuota"
INSUFFICIENT_SCALAR_QUOTA: Final = "InsufficientScalarQuota"
# The reason codes of a pod its queue's quota holds back, whatever room the nodes have.
QUOTA_CODES: Final = frozenset(
    {INSUFFICIENT_CPU_QUOTA, INSUFFICIENT_MEMORY_QUOTA, INSUFFICIENT_SCALAR_QUOTA}
)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A request a queue's quota cannot take: "queue team-a: NVIDIA-A100-80GB requested 4,
    allocated 3, quota 5"."""

    queue: str
    resource: str
    requested: int
    allocated: int
    quota: int

    @property
    def code(self) -> str:
        if self.resource == CPU:
            return INSUFFICIENT_CPU_QUOTA
        if self.resource == MEMORY:
            return INSUFFICIENT_MEMORY_QUOTA
        return INSUFFICIENT_SCALAR_QUOTA

    @property
    def message(self) -> str:
        r = self.resource
        return (
            f"queue {self.queue}: {r} requested {show(r, self.requested)}, "
            f"allocated {show(r, self.allocated)}, quota {show(r, self.quota)}"
        )


class QueueLedger:
    """Per queue: ``allocated`` (held now, the session's tentative placements included),
    ``inqueue`` (minimum resources of jobs admitted but not yet placed), ``demand`` (held
    plus asked, as the session opened) and ``fair`` (the fair share, set by a fair-share
    plugin; empty when none runs)."""

    def __init__(self, tree: QueueTree) -> None:
        n = len(tree)
        self.tree = tree
        # The tree's paths, held here: the tree is not compiled, and a charge (every
        # placement and its undoing) would read them as an attribute of an object.
        self._path: list[tuple[int, ...]] = tree.path
        # The same for what limit checks read of each queue's spec (a frozen dataclass of
        # that module, its attributes read generically): the limits, and which queues
        # free pods with a card from their CPU and memory limits.
        self._limit: list[Mapping[str, int]] = [spec.limit for spec in tree.specs]
        self._card_free: list[bool] = [spec.card_unlimited_cpu_memory for spec in tree.specs]
        self.allocated: list[Vector] = [{} for _ in range(n)]
        self.inqueue: list[Vector] = [{} for _ in range(n)]
        self.demand: list[Vector] = [{} for _ in range(n)]
        self.fair: list[Vector] = [{} for _ in range(n)]
        self.version = 0  # ticks on every change: what is derived from the accounts is stale
        self.changed: list[int] = [0] * n  # the version of each queue's last change
        # Volcano's cardUnlimitedCpuMemory: pods that hold a card are not held to the
        # CPU and memory limits of their queue.
        self.card_unlimited_cpu_memory = False

    def charge(self, queue: int, vec: Mapping[str, int], sign: int = 1) -> None:
        self.version += 1
        version, allocated, changed = self.version, self.allocated, self.changed
        for q in self._path[queue]:
            add(allocated[q], vec, sign)
            changed[q] = version

    def admit(self, queue: int, vec: Mapping[str, int], sign: int = 1) -> None:
        inqueue = self.inqueue
        for q in self._path[queue]:
            add(inqueue[q], vec, sign)

    def shortfall(
        self,
        queue: int,
        vec: Mapping[str, int],
        *,
        with_inqueue: bool = False,
        resources: Iterable[str] | None = None,
    ) -> Shortfall | None:
        """The first limit on the queue's path that ``vec`` more would pass, if any.

        A request that takes a card is not held to the CPU and memory limits of a queue
        that says so (its ``card_unlimited_cpu_memory``), or of any queue when the
        capacity-card argument does."""
        names: list[str] | None = None  # made at the first queue with a limit: most have none
        carded: bool | None = None  # asked once, and only of a queue with the flag: hot path
        limits, card_free = self._limit, self._card_free
        for q in self._path[queue]:
            limit = limits[q]
            if not limit:
                continue
            if names is None:
                names = list(vec if resources is None else resources)
            free = False
            if self.card_unlimited_cpu_memory or card_free[q]:
                if carded is None:
                    carded = any(a for r, a in vec.items() if r not in (CPU, MEMORY, GPU))
                free = carded
            held = self.allocated[q]
            queued = self.inqueue[q] if with_inqueue else {}
            for r in names:
                amount = vec.get(r, 0)
                if amount <= 0 or r not in limit or (free and r in (CPU, MEMORY)):
                    continue
                already = held.get(r, 0) + queued.get(r, 0)
                if already + amount > limit[r]:
                    return Shortfall(self.tree.name(q), r, amount, already, limit[r])
        return None
