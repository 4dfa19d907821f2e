"""Capacity card: queue quotas per card name, checked at enqueue and at allocation.

Volcano's capacity-card plugin, inside kgpu's queue tree. A queue's card quota (the
``volcano.sh/card.quota`` annotation, or deserved/limit per card in the Queue spec) is a
limit on its path like any other, which the session checks for every pod it places. This
plugin adds what is particular to cards:

- enqueue: a job's ``volcano.sh/card.request`` must fit the quota of its queue and of
  every ancestor that sets one, counting what they hold and the requests of jobs admitted
  before it in this session; for alternatives ``A|B`` one of them must fit, tried in the
  written order; a job admitted in an earlier session whose pods are not placed yet
  (``JobSpec.enqueued``: a Volcano PodGroup ``Inqueue``) counts its request too, as the
  first alternative its queue's path has a quota for;
- allocation: a pod that names a card may only use it if some queue on its path has a
  quota for that card ("card types without quotas default to 0", as in Volcano); the
  cards a pod's DRA GPU claims count (:mod:`kgpu.dra.gpu_count`) are held to the quotas
  that name them, as any resource with a limit, but a card no queue has a quota for does
  not hold a DRA pod: it names no card, its claims only count in one;
- ``cardUnlimitedCpuMemory``: pods that hold a card are not held to their queue's CPU and
  memory limits;
- one card type per job (a job with ``one_card_type``, as Volcano's PodGroups are): once a
  task of the job holds or is given a card, its other tasks may take only that card, so
  ``A|B`` never spreads one job over A and B.

Refusals carry InsufficientScalarQuota (cards), InsufficientCPUQuota or
InsufficientMemoryQuota and the numbers: "queue team-a: NVIDIA-A100-80GB requested 4,
allocated 3, quota 5".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kgpu.framework.session import Session, SessionPlugin, quota_status
from kgpu.framework.status import Code, Status
from kgpu.model.card import CardError
from kgpu.model.job import JobInfo, JobKey, Task
from kgpu.model.ledger import Shortfall
from kgpu.model.resources import BASE, MILLI, Vector, add
from kgpu.plugins import names

# A task refused a card its job's other tasks do not hold (kgpu's word: the seed has none).
ONE_CARD_TYPE: Final = "OneCardTypePerJob"


class CapacityCard:
    name = names.CAPACITY_CARD

    def __init__(self, card_unlimited_cpu_memory: bool = False) -> None:
        self.card_unlimited_cpu_memory = card_unlimited_cpu_memory

    @staticmethod
    def from_args(args: Mapping[str, Any]) -> CapacityCard:
        unknown = set(args) - {"cardUnlimitedCpuMemory"}
        if unknown:
            raise ValueError(
                f"capacity-card arguments {sorted(unknown)} are unknown, "
                "expected only cardUnlimitedCpuMemory"
            )
        flag = args.get("cardUnlimitedCpuMemory", False)
        if not isinstance(flag, bool):
            raise ValueError(
                f"capacity-card argument cardUnlimitedCpuMemory is {flag!r}, expected true or false"
            )
        return CapacityCard(flag)

    def on_open(self, session: Session) -> None:
        ledger, tree = session.ledger, session.tree
        ledger.card_unlimited_cpu_memory = self.card_unlimited_cpu_memory
        inqueue: list[Vector] = [{} for _ in range(len(tree))]
        chosen: dict[JobKey, Vector] = {}

        def short(queue: int, card: str, units: int) -> Shortfall | None:
            path = tree.path[queue]
            if not any(card in tree.specs[q].limit for q in path):
                held = ledger.allocated[queue].get(card, 0) + inqueue[queue].get(card, 0)
                return Shortfall(tree.name(queue), card, units, held, 0)
            for q in path:
                limit = tree.specs[q].limit.get(card)
                held = ledger.allocated[q].get(card, 0) + inqueue[q].get(card, 0)
                if limit is not None and held + units > limit:
                    return Shortfall(tree.name(q), card, units, held, limit)
            return None

        for job in session.jobs:
            if job.spec.enqueued and job.spec.card_request and job.queue >= 0 and not job.running:
                path = tree.path[job.queue]
                for alternatives, count in job.spec.card_request.items():
                    quoted = [
                        c for c in alternatives if any(c in tree.specs[q].limit for q in path)
                    ]
                    card = (quoted or list(alternatives))[0]
                    for q in path:
                        add(inqueue[q], {card: count * MILLI})

        def enqueueable(job: JobInfo, vec: Vector) -> Status | None:
            if not job.spec.card_request:
                return None  # most jobs: no card to judge, nothing to charge once admitted
            charge: Vector = {}
            for alternatives, count in job.spec.card_request.items():
                refusals = []
                for card in alternatives:
                    refusal = short(job.queue, card, count * MILLI)
                    if refusal is None:
                        add(charge, {card: count * MILLI})
                        break
                    refusals.append(refusal)
                else:
                    if len(refusals) == 1:
                        return quota_status(refusals[0])
                    text = "; ".join(r.message for r in refusals)
                    return Status(
                        Code.UNSCHEDULABLE, (text,), names.CAPACITY_CARD, refusals[0].code
                    )
            chosen[job.key] = charge
            return None

        def admitted(job: JobInfo) -> None:
            charge = chosen.pop(job.key, None)
            if charge:
                for q in tree.path[job.queue]:
                    add(inqueue[q], charge)

        def allocatable(job: JobInfo, task: Task, vec: Vector) -> Status | None:
            named: tuple[str, ...] | None = None  # read when a card is first met
            for card, units in vec.items():
                if card in BASE or units <= 0:
                    continue
                if named is None:
                    named = _named_cards(task)
                if card not in named:
                    continue  # counted by a DRA claim: the ledger's limits hold it
                if job.spec.one_card_type:
                    taken = _job_card(session, job)
                    if taken is not None and taken != card:
                        message = (
                            f"job {job.key} runs on {taken}, not {card}: "
                            "all tasks of a job use one card type"
                        )
                        return Status(Code.UNSCHEDULABLE, (message,), self.name, ONE_CARD_TYPE)
                if not any(card in tree.specs[q].limit for q in tree.path[job.queue]):
                    held = ledger.allocated[job.queue].get(card, 0)
                    return quota_status(Shortfall(tree.name(job.queue), card, units, held, 0))
            return None

        session.callbacks.enqueueable.append(enqueueable)
        session.callbacks.on_admit.append(admitted)
        session.callbacks.allocatable.append(allocatable)


def _named_cards(task: Task) -> tuple[str, ...]:
    """The cards the pod's ``volcano.sh/card.name`` names (none when it cannot be read:
    such a pod's job is refused whole when the session opens)."""
    try:
        return task.card_names()
    except CardError:
        return ()


def _job_card(session: Session, job: JobInfo) -> str | None:
    """The card the job's running or placed tasks hold, if any."""
    for task in (*job.running, *job.placed):
        card = session.cards.get(task.key)
        if card is not None:
            return card
    return None


_: type[SessionPlugin] = CapacityCard
