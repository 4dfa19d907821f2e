"""The allocate action: place pending jobs, gangs whole or not at all, queue by queue.

A session step decides and records; it does not talk to anyone. What it returns (binds,
pods left pending with their reasons, the events to emit) is plain data that the Kubernetes
edge carries out and the simulator applies, so a session can be replayed, tested and
explained.

In a session (``Allocate``), two passes over the admitted jobs:

1. gangs: the queue first in queue order (down the tree, see ``ordering``) offers its first
   job in job order that is not ready yet; the job's pods are placed through one statement
   until the job is ready, and kept only then; otherwise everything is discarded and the
   job holds nothing. The queue is re-ranked after every job.
2. extras: ready jobs with pods left (an elastic job's pods past its minimum) get one pod
   per turn, in the same queue order, until nothing more fits.

Pods asking for nothing at all are left to backfill, as Volcano does.

``allocate(state, scheduler, pods)`` is the plain form the live edge calls: pods one by
one, higher priority first, each seeing the ones placed before it; its reservations stay
in ``state`` and ``undo`` releases one whose bind the edge could not carry out.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from kgpu.actions.ordering import QueuePicker
from kgpu.actions.placement import Placer, best_effort, placer_of
from kgpu.actions.topology_placement import extra_within, place_in_domains, wants_topology
from kgpu.dra.allocator import Refused
from kgpu.dra.inventory import DraInventory
from kgpu.framework.scheduler import Placement, Scheduler
from kgpu.framework.session import Session
from kgpu.framework.session_callbacks import Key
from kgpu.framework.session_result import Pending, SessionResult, failed_event, scheduled_event
from kgpu.framework.status import Code, Status
from kgpu.model.decision import Bind, Event
from kgpu.model.job import JobInfo
from kgpu.model.pod import PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.dra_claims import CODE as DRA_CODE
from kgpu.state.cluster import ClusterState

__all__ = ["Allocate", "Bind", "Event", "Pending", "SessionResult", "allocate", "undo"]


def allocate(
    state: ClusterState,
    scheduler: Scheduler,
    pods: Sequence[PodSpec],
    dra: DraInventory | None = None,
) -> SessionResult:
    """``dra``: the DRA objects the scheduler's DraClaims filter reads; a placed pod's
    claims are allocated there at once (``result.claims``), so the next pod sees its
    devices taken."""
    result = SessionResult()
    ordered = sorted(range(len(pods)), key=lambda i: -pods[i].priority)
    for i in ordered:
        pod = pods[i]
        outcome = scheduler.schedule(state, pod)
        if isinstance(outcome, Placement):
            node = state.nodes[outcome.node].name
            if dra is not None and pod.key in dra.pod_claims:
                info = state.nodes[outcome.node]
                claimed = dra.record(pod.key, str(node), info.labels)
                if isinstance(claimed, Refused):  # DraClaims let it through: not expected
                    result.pending.append(Pending(pod.key, _refused(claimed), claimed.reason))
                    result.events.append(failed_event(pod.key, claimed.reason))
                    continue
                result.claims[pod.key] = claimed.allocations
            alloc = state.allocate(pod, outcome.node, outcome.gpus)
            result.binds.append(Bind(pod.key, node, outcome.gpus, pod.gpu.milli))
            result.allocations[pod.key] = alloc
            result.events.append(scheduled_event(pod.key, node, outcome.gpus))
        else:
            result.pending.append(Pending(pod.key, outcome.status, outcome.message))
            result.events.append(failed_event(pod.key, outcome.message))
    return result


def _refused(refused: Refused) -> Status:
    return Status(Code.UNSCHEDULABLE, (refused.reason,), names.DRA_CLAIMS, DRA_CODE)


def undo(state: ClusterState, bind: Bind, dra: DraInventory | None = None) -> None:
    """Release a reservation (and its claims) whose bind the edge could not carry out."""
    state.release(bind.pod)
    if dra is not None:
        dra.release(bind.pod)


def schedulable(session: Session, job: JobInfo) -> bool:
    """A job the session may place pods of: valid, admitted, with pods waiting (asked of
    every job, most of them running with nothing pending: that test first)."""
    return bool(job.pending) and not job.problem and job.admitted


def gang_message(session: Session, job: JobInfo, placed: int, why: Status) -> Status:
    """The reason a gang waits: its first refusal, and how far the gang got."""
    if session.callbacks.ready(job, job.alive + placed + 1) and placed == 0:
        return why  # a job of one pod: the pod's own reason says it all
    text = f"{why.message} (gang {job.key}: {job.alive + placed} of {job.spec.min_member} pods fit)"
    return Status(why.code, (text,), why.plugin, why.reason_code)


def place_gang(session: Session, placer: Placer, job: JobInfo) -> bool:
    """Place pods of ``job`` until it is ready; all of them, or none."""
    if wants_topology(session, job):  # one domain at a time: kgpu.actions.topology_placement
        return place_in_domains(session, placer, job)
    statement = session.statement()
    why: Status | None = None
    placed = 0
    for task in list(job.pending):
        if session.callbacks.ready(job):
            break
        why = placer.place(statement, job, task)
        if why is not None:
            break
        placed += 1
    if session.callbacks.ready(job):
        statement.commit()
        return True
    statement.discard()
    if why is not None:
        session.note(job, gang_message(session, job, placed, why))
    return False


class Allocate:
    name = "allocate"

    def execute(self, session: Session) -> None:
        placer = placer_of(session)
        # The jobs either pass may serve: the extras pass's are among the gang pass's, as
        # placing only takes pods off ``pending``. (A walk of every job, of which most run
        # with nothing pending, done once.)
        jobs = [job for job in session.jobs if schedulable(session, job)]
        self._serve(session, placer, jobs, gangs=True)
        self._serve(session, placer, jobs, gangs=False)
        for job in session.jobs:
            if not job.spec.max_member:
                continue
            room = max(job.max_pods - job.alive, 0)
            if len(job.pending) > room:
                text = f"job {job.key} runs its maxMember of {job.spec.max_member} pods"
                status = Status(Code.UNSCHEDULABLE, (text,), "", "MaxMember")
                session.note(job, status, job.pending[room:])

    def _serve(self, session: Session, placer: Placer, jobs: list[JobInfo], gangs: bool) -> None:
        waiting: dict[int, list[tuple[Key, JobInfo]]] = {}
        for job in jobs:
            if not schedulable(session, job):
                continue
            if best_effort(job.pending[0]) and all(best_effort(t) for t in job.pending):
                continue  # (the first pod mostly settles it, without a generator)
            if gangs == session.callbacks.ready(job) or job.alive >= job.max_pods:
                continue  # the gang pass takes jobs not ready yet, the extras pass ready ones
            waiting.setdefault(job.queue, []).append((session.callbacks.job_key(job), job))
        for heap in waiting.values():
            heapq.heapify(heap)
        picker = QueuePicker(session, waiting)
        while (leaf := picker.pick()) is not None:
            heap = waiting[leaf]
            _, job = heapq.heappop(heap)
            if gangs:
                place_gang(session, placer, job)
            elif self._extra(session, placer, job):
                heapq.heappush(heap, (session.callbacks.job_key(job), job))
            picker.served(bool(heap))

    def _extra(self, session: Session, placer: Placer, job: JobInfo) -> bool:
        """Place one extra pod of a ready job; True if the job has room for more."""
        task = job.pending[0]
        statement = session.statement()
        why = placer.place(statement, job, task, within=extra_within(session, job))
        if why is not None:
            session.note(job, why)
            return False
        statement.commit()
        return bool(job.pending) and job.alive < job.max_pods
