"""What a session decided, as data: all the edge and the simulators read of a session.

A :class:`SessionResult` holds no live object of the session (no jobs, tree or ledger):
binds with the devices each pod was given, evictions with their kind, nominations, pending
pods with their reasons, the events to emit, and the figures the status writer and the
metrics publish: per queue (:class:`QueueFigures`) and, for the jobs the caller asked about,
per PodGroup (:class:`JobFigures`). The Kubernetes edge carries it out; the simulators
apply it to their own state.

The two decision events a plain placement makes as a session does (``Scheduled``,
``FailedScheduling``) are written here, once, for both.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field

from kgpu.framework.status import Status
from kgpu.model.decision import Bind, Event, Evict, Nomination
from kgpu.model.dra import ClaimAllocation
from kgpu.model.job import JobInfo, JobKey
from kgpu.model.ledger import QueueLedger
from kgpu.model.pod import PodKey
from kgpu.model.queue import QueueTree
from kgpu.model.resources import BASE, Vector
from kgpu.state.records import Allocation


@dataclass(frozen=True, slots=True, init=False)
class Pending:
    pod: PodKey
    status: Status
    message: str

    # Written out, not generated: a session closes with one per waiting pod, tens of
    # thousands, and the generated __init__ of a frozen dataclass is Python even in the
    # compiled build (it sets each field through a call); compiled, this is several times
    # cheaper, and the record as frozen as before.
    def __init__(self, pod: PodKey, status: Status, message: str) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "message", message)


@dataclass(frozen=True, slots=True)
class CardFigures:
    """One queue's figures for one card, in milli-cards."""

    deserved: int = 0
    allocated: int = 0
    request: int = 0
    capacity: int = 0


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's figures after a session, in the core's units (see model.resources)."""

    name: str
    allocated: Vector
    deserved: Vector
    fair: Vector
    cards: Mapping[str, CardFigures] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobFigures:
    """One job as the session closed it, for its PodGroup's status."""

    key: JobKey
    min_member: int
    running: tuple[PodKey, ...]  # pods bound before the session
    scheduled: int  # pods bound or placed (not those nominated, which wait for victims)
    admitted: bool  # admitted by enqueue, and valid
    waiting: Status | None  # why its first pod still pending waits, if one does,
    # else why enqueue turned the job down (a job with no pods yet)


@dataclass(slots=True)
class SessionResult:
    binds: list[Bind] = field(default_factory=list)
    # What each bound pod holds on its node (GPU slots and memory, MIG, RDMA, FPGA): the
    # devices the edge writes for the node agent.
    allocations: dict[PodKey, Allocation] = field(default_factory=dict)
    # The DRA claims each bound pod's placement allocated (claim key -> allocation), as the
    # edge writes them into the claims' status before the Binding.
    claims: dict[PodKey, dict[str, ClaimAllocation]] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    nominations: list[Nomination] = field(default_factory=list)
    allocated: dict[str, Vector] = field(default_factory=dict)  # per queue, at close
    fair: dict[str, Vector] = field(default_factory=dict)
    queues: list[QueueFigures] = field(default_factory=list)
    jobs: list[JobFigures] = field(default_factory=list)  # of the jobs asked about
    seconds: dict[str, float] = field(default_factory=dict)  # per step: open, actions, close
    refused: dict[JobKey, Status] = field(default_factory=dict)  # by enqueue: why


def scheduled_event(pod: PodKey, node: str, gpus: Sequence[int]) -> Event:
    # One a bind: a list, which the compiled build makes natively, rather than ``map``.
    where = f"{node} (GPUs {','.join([str(g) for g in gpus])})" if gpus else node
    return Event(pod, "Normal", "Scheduled", f"Successfully assigned {pod} to {where}")


def failed_event(pod: PodKey, message: str) -> Event:
    return Event(pod, "Warning", "FailedScheduling", message)


def queue_figures(
    tree: QueueTree, ledger: QueueLedger, cluster: Callable[[], Vector]
) -> list[QueueFigures]:
    """Every queue of ``tree`` (``default`` included) as ``ledger`` holds it; a card's
    capacity is the queue's limit for it, else what the cluster offers of it (``cluster``,
    asked once, and only then: it walks every node)."""
    offered: Vector | None = None
    out = []
    for q, spec in enumerate(tree.specs):
        allocated, demand = ledger.allocated[q], ledger.demand[q]
        cards: dict[str, CardFigures] = {}
        for card in sorted({*spec.deserved, *spec.limit, *allocated, *demand} - set(BASE)):
            limit = spec.limit.get(card)
            if limit is None:
                offered = cluster() if offered is None else offered
                limit = offered.get(card, 0)
            cards[card] = CardFigures(
                spec.deserved.get(card, 0),
                max(allocated.get(card, 0), 0),
                max(demand.get(card, 0), 0),
                limit,
            )
        out.append(
            QueueFigures(
                spec.name,
                {r: max(allocated.get(r, 0), 0) for r in BASE},
                {r: spec.deserved.get(r, 0) for r in BASE},
                {r: ledger.fair[q].get(r, 0) for r in BASE},
                cards,
            )
        )
    return out


def job_figures(
    jobs: Sequence[JobInfo], result: SessionResult, only: Container[str]
) -> list[JobFigures]:
    """The figures of the closed session's ``jobs`` whose key is in ``only``."""
    if not only:  # most sessions (all but the live loop's): no walk of every job
        return []
    wanted = [job for job in jobs if job.key in only]
    if not wanted:
        return []
    waiting = {p.pod: p.status for p in result.pending}
    nominated = {n.pod for n in result.nominations}
    out = []
    for job in wanted:
        scheduled = len(job.running) + len([t for t in job.placed if t.key not in nominated])
        first = next((waiting[t.pod.key] for t in job.pending if t.pod.key in waiting), None)
        if first is None and not job.pending:
            first = result.refused.get(job.key)
        out.append(
            JobFigures(
                job.key,
                job.spec.min_member,
                tuple([t.pod.key for t in job.running]),
                scheduled,
                job.admitted and not job.problem,
                first,
            )
        )
    return out
