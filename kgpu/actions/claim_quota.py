"""The queue's check of a pod's DRA claims on each node: what they would take there.

Before a node is chosen, a queue counts a pod's unallocated claims by their requests
(:mod:`kgpu.dra.gpu_count`): ``All`` as one device, a request that pins no single product
as no card. On a node the allocator says which devices they would get: an ``All`` request
every matching device of the node (8 on one node, 4 on another), each device of the card
of its product. A placement charges the queue what the claims got, so each node is checked
for that: :class:`ClaimQuota` is a filter for one pod's cycles (``Scheduler.schedule``'s
``extra``, asked after every other filter) that turns down the nodes where the queue's
limits, GPU or card, would not hold it. It reads what the ``DraClaims`` filter of the same
cycle found on each node, so the allocator runs once a node.
"""

from __future__ import annotations

from typing import Final

from kgpu.dra.allocator import Allocated
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.framework.session import Session
from kgpu.framework.status import Reason
from kgpu.model.job import JobInfo, Task
from kgpu.model.ledger import Shortfall
from kgpu.model.pod import PodSpec
from kgpu.plugins import names

NAME: Final = "QueueClaimQuota"


def claim_checks(
    session: Session, job: JobInfo, task: Task, card: str | None
) -> tuple[FilterPlugin, ...]:
    """The filters a cycle of ``task`` (as ``card``) adds: the queue's check of its claims,
    for a pod with claims in a queue whose path sets some limit (else none)."""
    if session.dra is None or job.queue < 0 or not session.has_claims(task.pod):
        return ()
    tree = session.tree
    if not any(tree.specs[q].limit for q in tree.path[job.queue]):
        return ()
    return (ClaimQuota(session, job, task, card),)


class ClaimQuota:
    """Turns down the nodes where what the pod's claims would get passes a queue's limit."""

    name = NAME

    def __init__(self, session: Session, job: JobInfo, task: Task, card: str | None) -> None:
        self.session = session
        self.job = job
        self.task = task
        self.card = card

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        session = self.session
        inventory = session.dra.inventory if session.dra is not None else None
        if inventory is None:
            return Verdicts.all_pass(len(nodes))
        found: dict[int, Allocated] = cycle.get(names.DRA_CLAIMS) or {}
        why: list[Reason | None] = []
        reasons: dict[Shortfall, Reason] = {}
        for i in nodes:
            outcome = found.get(int(i))
            if outcome is None:  # no DraClaims before in this cycle: ask the allocator
                node = cycle.state.nodes[int(i)]
                asked = inventory.try_allocate(str(pod.key), str(node.name), node.labels)
                if not isinstance(asked, Allocated):
                    why.append(None)  # the claims do not fit: DraClaims' to say, not ours
                    continue
                outcome = asked
            vec = session.vector_on(self.task, self.card, outcome.allocations)
            short = session.ledger.shortfall(self.job.queue, vec)
            if short is None:
                why.append(None)
                continue
            reason = reasons.get(short)
            if reason is None:
                reason = reasons[short] = Reason(
                    short.code, f"node(s) where the claims would pass the quota: {short.message}"
                )
            why.append(reason)
        return Verdicts.from_reasons(why)


_: type[FilterPlugin] = ClaimQuota
