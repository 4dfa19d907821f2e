"""A session's transaction: tentative allocations and evictions, committed or discarded.

A gang is placed through one :class:`Statement`: each allocation and eviction changes the
cluster state and the queue ledger at once (so the next placement of the same gang sees
them) and is logged; ``commit`` hands the log to the session as decisions, ``discard``
undoes it in reverse order, so a job that cannot be placed whole holds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgpu.model.decision import EvictionKind
from kgpu.model.job import JobInfo, Task
from kgpu.model.resources import Vector
from kgpu.state.cluster import Allocation

if TYPE_CHECKING:
    from kgpu.framework.session import Session


@dataclass(slots=True)
class Op:
    kind: str  # "allocate", "pipeline" or "evict"
    task: Task
    job: JobInfo
    alloc: Allocation
    vec: Vector
    index: int  # where the task sat in its job's list, to put it back there
    message: str = ""
    eviction: EvictionKind | None = None  # why, for an eviction


class Statement:
    """Tentative allocations and evictions: ``commit`` them together or ``discard`` them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ops: list[Op] = []
        self._mark = session.room_mark  # the state's mark before this statement's releases

    def allocate(
        self, task: Task, node: int, gpus: tuple[int, ...], card: str | None, pipeline: bool = False
    ) -> None:
        s = self.session
        job = s.job_of[task.pod.key]
        index = job.pending.index(task)
        alloc = s.state.allocate(task.pod, node, gpus)
        vec = s.charge(task, alloc, card)
        s.ledger.charge(job.queue, vec)
        del job.pending[index]
        job.placed.append(task)
        s.cards[task.pod.key] = card
        self.ops.append(Op("pipeline" if pipeline else "allocate", task, job, alloc, vec, index))

    def evict(self, task: Task, kind: EvictionKind, message: str) -> None:
        s = self.session
        job = s.job_of[task.pod.key]
        index = job.running.index(task)
        alloc = s.state.release(task.pod.key)
        vec = s.charge(task, alloc, s.cards.get(task.pod.key))
        s.ledger.charge(job.queue, vec, -1)
        del job.running[index]
        s.releases += 1
        s.new_room_mark()
        self.ops.append(Op("evict", task, job, alloc, vec, index, message, kind))

    def discard(self) -> None:
        s = self.session
        evictions_only = bool(self.ops) and all(op.kind == "evict" for op in self.ops)
        for op in reversed(self.ops):
            if op.kind == "evict":
                s.state.restore(op.alloc)
                s.ledger.charge(op.job.queue, op.vec)
                op.job.running.insert(op.index, op.task)
            else:
                s.state.release(op.task.pod.key)
                s.ledger.charge(op.job.queue, op.vec, -1)
                op.job.placed.remove(op.task)
                op.job.pending.insert(op.index, op.task)
                s.releases += 1
        if evictions_only:
            # Every pod is back where it was (a trial of victims, say): the state is the one
            # the mark named when this statement began (statements nest, the inner one
            # ending first, so nothing else changed it meanwhile).
            s.room_mark = self._mark
        elif self.ops:
            s.new_room_mark()
        self.ops = []

    def commit(self) -> None:
        self.session.record(self.ops)
        self.ops = []
