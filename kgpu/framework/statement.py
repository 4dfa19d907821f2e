"""A session's transaction: tentative allocations and evictions, committed or discarded.

A gang is placed through one :class:`Statement`: each allocation and eviction changes the
cluster state and the queue ledger at once (so the next placement of the same gang sees
them) and is logged; ``commit`` hands the log to the session as decisions, ``discard``
undoes it in reverse order, so a job that cannot be placed whole holds nothing.

A statement changes the session only through the methods :class:`Changes` names (the
session's), and does not import the session: the session imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kgpu.model.decision import EvictionKind
from kgpu.model.job import JobInfo, Task
from kgpu.model.resources import Vector
from kgpu.state.cluster import Allocation


@dataclass(slots=True, init=False)
class Op:
    kind: str  # "allocate", "pipeline" or "evict"
    task: Task
    job: JobInfo
    alloc: Allocation
    vec: Vector
    index: int  # where the task sat in its job's list, to put it back there
    message: str
    eviction: EvictionKind | None  # why, for an eviction

    # Written out, not generated: a generated __init__ is Python even in the compiled
    # build (mypyc compiles only what the source spells), and a session makes thousands.
    def __init__(
        self,
        kind: str,
        task: Task,
        job: JobInfo,
        alloc: Allocation,
        vec: Vector,
        index: int,
        message: str = "",
        eviction: EvictionKind | None = None,
    ) -> None:
        self.kind = kind
        self.task = task
        self.job = job
        self.alloc = alloc
        self.vec = vec
        self.index = index
        self.message = message
        self.eviction = eviction


class Changes(Protocol):
    """What a statement asks of the session: each change made with its accounting (the
    state, the queue's account, the job's lists), and undone."""

    @property
    def room_mark(self) -> int: ...

    def assign(
        self,
        task: Task,
        node: int,
        gpus: tuple[int, ...],
        card: str | None,
        job: JobInfo | None = None,
    ) -> tuple[JobInfo, Allocation, Vector, int]: ...

    def unassign(self, op: Op) -> None: ...

    def unbind(
        self, task: Task, job: JobInfo | None = None
    ) -> tuple[JobInfo, Allocation, Vector, int]: ...

    def rebind(self, op: Op) -> None: ...

    def new_room_mark(self) -> None: ...

    def back_to_mark(self, mark: int) -> None: ...

    def record(self, ops: list[Op]) -> None: ...


class Statement:
    """Tentative allocations and evictions: ``commit`` them together or ``discard`` them."""

    def __init__(self, session: Changes) -> None:
        self.session = session
        self.ops: list[Op] = []
        self._mark = session.room_mark  # the state's mark before this statement's releases

    def allocate(
        self,
        task: Task,
        node: int,
        gpus: tuple[int, ...],
        card: str | None,
        pipeline: bool = False,
        job: JobInfo | None = None,
    ) -> None:
        """Place ``task`` (of ``job``, found from the task if not given)."""
        job, alloc, vec, index = self.session.assign(task, node, gpus, card, job)
        self.ops.append(Op("pipeline" if pipeline else "allocate", task, job, alloc, vec, index))

    def evict(
        self, task: Task, kind: EvictionKind, message: str, job: JobInfo | None = None
    ) -> None:
        """Take running ``task`` (of ``job``, found from the task if not given) off its node."""
        job, alloc, vec, index = self.session.unbind(task, job)
        self.ops.append(Op("evict", task, job, alloc, vec, index, message, kind))

    def discard(self) -> None:
        s = self.session
        evictions_only = bool(self.ops) and all(op.kind == "evict" for op in self.ops)
        for op in reversed(self.ops):
            if op.kind == "evict":
                s.rebind(op)
            else:
                s.unassign(op)
        if evictions_only:
            # Every pod is back where it was (a trial of victims, say): the state is the one
            # the mark named when this statement began (statements nest, the inner one
            # ending first, so nothing else changed it meanwhile).
            s.back_to_mark(self._mark)
        elif self.ops:
            s.new_room_mark()
        self.ops = []

    def commit(self) -> None:
        self.session.record(self.ops)
        self.ops = []

    def take(self, inner: Statement) -> None:
        """Make the changes of ``inner`` (begun after this one, and still open) this
        statement's, in their order, as if made through it; ``inner`` holds none after.
        A trial kept once it proves to be the one to make is not undone and made again."""
        self.ops.extend(inner.ops)
        inner.ops = []
