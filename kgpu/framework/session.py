"""A scheduling session: a snapshot in, plugins' callbacks, actions in order, decisions out.

``Session(snapshot, scheduler, plugins)`` opens over a ClusterState, the queues, the jobs
and their tasks (built by :class:`~kgpu.framework.session_open.Opening`); each plugin's ``on_open`` registers callbacks; the caller runs actions
(enqueue, allocate, backfill, reclaim, preempt: any order) with ``action.execute(session)``;
``close()`` returns the decisions as data: binds, evictions, nominations (pods waiting
for their victims to go), pending pods with reasons, and events.

Changes go through a :class:`Statement`: tentative allocations and evictions are logged
and either committed together or discarded in reverse order, so a gang holds nothing
unless all of it fits. After ``close()`` the state holds exactly what it held at open plus
the committed binds: evictions and nominations are decisions for the edge to carry out
(the victims' resources come back when they are gone), not changes to the snapshot.

Plugins register their callbacks on ``session.callbacks``
(:class:`~kgpu.framework.session_callbacks.SessionCallbacks`), which also holds the one
rule each kind combines by; the actions ask it. The actions' own state for the session
(what failed to fit, victim units) lives in ``session.scratch``
(:class:`~kgpu.framework.session_scratch.SessionScratch`), typed by key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from kgpu.framework.charges import GpuCharges
from kgpu.framework.gc_pause import collector_paused
from kgpu.framework.scheduler import Scheduler
from kgpu.framework.session_callbacks import SessionCallbacks, Verdict
from kgpu.framework.session_claims import SessionClaims
from kgpu.framework.session_open import Opening
from kgpu.framework.session_result import Pending, SessionResult, failed_event, scheduled_event
from kgpu.framework.session_scratch import SessionScratch
from kgpu.framework.session_snapshot import Snapshot
from kgpu.framework.statement import Op, Statement
from kgpu.framework.status import Code, Status
from kgpu.model.card import NAME_ANNOTATION, counted_units, node_cards
from kgpu.model.decision import Bind, Event, Evict, Nomination
from kgpu.model.dra import ClaimAllocation
from kgpu.model.job import JobInfo, Task, card_problem
from kgpu.model.ledger import QueueLedger, Shortfall
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.queue import DEFAULT_QUEUE, QueueSpec, QueueTree
from kgpu.model.resources import BASE, CPU, GPU, MEMORY, Vector, add
from kgpu.state.cluster import Allocation


def _position(tasks: list[Task], task: Task) -> int:
    """Where ``task`` sits in one of its job's lists. By identity: ``list.index`` compares
    with ``==``, a dataclass's generated ``__eq__`` (Python even in the compiled build) for
    every task before it; a job's lists hold each of its tasks once, as the same object."""
    for i, other in enumerate(tasks):
        if other is task:
            return i
    return tasks.index(task)  # an equal task that is not the same object, if ever


def _vector(
    pod: PodSpec, card: str | None, milli: int, claims: tuple[int, Vector] | None
) -> Vector:
    """The vector of ``pod`` (GPU ``milli`` besides its claims) as ``card``; its DRA claims,
    when it has some, count ``claims``: milli-GPU in ``gpu``, milli-cards by the card of
    their devices beside the card the pod names."""
    if claims is not None:
        milli += claims[0]
    vec = {CPU: pod.cpu_milli, MEMORY: pod.memory_mib, GPU: milli}
    if card is not None:
        vec[card] = counted_units(card, pod.gpu, milli)
    if claims is not None:
        add(vec, claims[1])
    return vec


class SessionPlugin(Protocol):
    @property
    def name(self) -> str: ...

    def on_open(self, session: Session) -> None:
        """Register callbacks (and compute what they need) for this session."""
        ...


class Action(Protocol):
    @property
    def name(self) -> str: ...

    def execute(self, session: Session) -> None: ...


NOT_TRIED = Status(Code.UNSCHEDULABLE, ("not tried in this session",), reason_code="NotTried")


def quota_status(short: Shortfall) -> Status:
    return Status(Code.UNSCHEDULABLE, (short.message,), "queue", short.code)


class Session:
    def __init__(
        self, snapshot: Snapshot, scheduler: Scheduler, plugins: Sequence[SessionPlugin] = ()
    ) -> None:
        self.state = snapshot.state
        self.scheduler = scheduler
        self.now = snapshot.now
        self.victims_leaving = snapshot.victims_leaving
        specs = list(snapshot.queues)
        if not any(q.name == DEFAULT_QUEUE for q in specs):
            specs.append(QueueSpec(DEFAULT_QUEUE))
        self.tree = QueueTree(specs)
        self.ledger = QueueLedger(self.tree)
        self.charges = GpuCharges(self.state)
        # DRA claims, recorded as pods are placed and counted in their queues (None without
        # pods' claims: a session without DRA does as before).
        dra = snapshot.dra
        self.dra = SessionClaims(dra) if dra is not None and dra.pod_claims else None
        self.callbacks = SessionCallbacks(self.tree)
        self.result = SessionResult()
        self.cards: dict[str, str | None] = {}  # card each running or placed task holds
        self.releases = 0  # ticks on every release: what failed to fit before may fit now
        # Names the state up to placements: a new mark on every release, and the mark from
        # before when a statement of evictions only is discarded (the state is then exactly
        # what it was). What failed to fit under a mark fails still while it holds.
        self.room_mark = 0
        self._marks = 0
        self.statuses: dict[str, Status] = {}
        self.scratch = SessionScratch()  # what the actions keep for the session
        self._provisional: list[Op] = []
        self._node_cards: dict[int, tuple[str, ...]] = {}
        self._job_of: dict[str, JobInfo] | None = None  # made when first asked
        with collector_paused():
            self.jobs, self.job_named = Opening(self).jobs(snapshot)
            for plugin in plugins:
                plugin.on_open(self)
            callbacks = self.callbacks
            for job in self.jobs:  # a loop, not generators: 25,000 jobs at 70,000 pods
                if job.problem == "":
                    verdict = callbacks.validity(job)
                    if verdict is not None:
                        job.problem = verdict.message
                if len(job.pending) > 1:
                    callbacks.sort_tasks(job.pending)

    def job_for(self, task: Task) -> JobInfo:
        """The job of ``task``, one of the session's."""
        return self.job_named[task.job or task.pod.key]

    @property
    def job_of(self) -> dict[str, JobInfo]:
        """Every pod's job, by the pod's key (``job_for`` finds one without this table)."""
        if self._job_of is None:
            self._job_of = {
                task.pod.key: job
                for job in self.jobs
                for tasks in (job.running, job.pending, job.placed)
                for task in tasks
            }
        return self._job_of

    def first_card(self, task: Task) -> str | None:
        if NAME_ANNOTATION not in task.pod.annotations:
            return None
        names = task.card_names() if not card_problem(task) else ()
        return names[0] if names and task.pod.gpu.count else None

    def node_cards(self, node: int) -> tuple[str, ...]:
        cards = self._node_cards.get(node)
        if cards is None:
            info = self.state.nodes[node]
            cards = tuple(c.name for c in node_cards(info.labels, info.gpu_count))
            self._node_cards[node] = cards
        return cards

    # ------------------------------------------------------------------ reading

    def vector(self, task: Task, card: str | None) -> Vector:
        """What pending ``task`` asks of its queue as ``card``: what quota checks, enqueue
        and reclaim count (a GPU share that depends on the node as its largest, see
        :mod:`kgpu.framework.charges`)."""
        pod = task.pod
        claims = self._claims_now(pod) if self.dra is not None else None
        return _vector(pod, card, self.charges.asked(pod.gpu), claims)

    def vector_on(
        self, task: Task, card: str | None, allocations: Mapping[str, ClaimAllocation]
    ) -> Vector:
        """``vector`` with the pod's DRA claims counted as ``allocations`` (what they would
        get on a node) says: what placing it there would charge its queue."""
        pod = task.pod
        assert self.dra is not None, "only a session with DRA claims counts them on a node"
        counted = self.dra.count_on(pod.key, allocations)
        return _vector(pod, card, self.charges.asked(pod.gpu), counted)

    def charge(self, task: Task, alloc: Allocation, card: str | None) -> Vector:
        """What ``task`` holds of its queue's account while it holds ``alloc`` as ``card``."""
        pod = task.pod
        claims = self._claims_now(pod) if self.dra is not None else None
        return _vector(pod, card, self.charges.held(alloc), claims)

    def _claims_now(self, pod: PodSpec) -> tuple[int, Vector] | None:
        """What the pod's DRA claims count now (milli-GPU, milli-cards); None: it has none."""
        dra = self.dra
        return dra.count(pod.key) if dra is not None and dra.has(pod.key) else None

    def asked_milli(self, pod: PodSpec) -> int:
        """The milli-GPU pending ``pod`` counts: its GPU request's, and its DRA claims'."""
        milli = self.charges.asked(pod.gpu)
        if self.dra is not None:
            milli += self.dra.milli(pod.key)
        return milli

    def held_milli(self, task: Task, alloc: Allocation) -> int:
        """The milli-GPU ``task`` counts while it holds ``alloc``, its DRA claims' included."""
        milli = self.charges.held(alloc)
        if self.dra is not None:
            milli += self.dra.milli(task.pod.key)
        return milli

    def has_claims(self, pod: PodSpec) -> bool:
        """Whether the pod has DRA claims: what it fits then depends on more than its shape."""
        return self.dra is not None and self.dra.has(pod.key)

    def dra_capacity(self) -> int:
        """The milli-GPU of the DRA GPU devices of the schedulable nodes (0 without DRA)."""
        if self.dra is None:
            return 0
        state = self.state
        names = {str(state.nodes[i].name) for i in np.flatnonzero(state.schedulable)}
        return self.dra.capacity(names)

    def held(self, task: Task) -> Vector:
        """What running or placed ``task`` holds of its queue's account."""
        key = task.pod.key
        return self.charge(task, self.state.allocations[key], self.cards.get(key))

    def held_total(self, tasks: Sequence[Task]) -> Vector:
        """What ``tasks`` hold together (``held`` summed, without a vector per pod)."""
        cpu = memory = gpu = 0
        out: Vector = {}
        allocations, held, cards = self.state.allocations, self.charges.held, self.cards
        dra = self.dra
        for task in tasks:
            pod = task.pod
            cpu += pod.cpu_milli
            memory += pod.memory_mib
            alloc = allocations[pod.key]
            milli = held(alloc) if alloc.mig_count else alloc.gpu_milli * len(alloc.gpus)
            claimed: Vector = {}
            if dra is not None and dra.has(pod.key):
                got, claimed = dra.count(pod.key)
                milli += got
            gpu += milli
            card = cards.get(pod.key)
            if card is not None:
                out[card] = out.get(card, 0) + counted_units(card, pod.gpu, milli)
            if claimed:
                add(out, claimed)
        out.update({CPU: cpu, MEMORY: memory, GPU: gpu})
        return out

    def may_evict(self, job: JobInfo) -> bool:
        """Whether preempt and reclaim may evict for ``job``: not while its earlier victims
        are still leaving."""
        leaving = self.victims_leaving
        return not leaving or not any(t.pod.key in leaving for t in job.pending)

    def need(self, job: JobInfo) -> Vector:
        """What ``needed(job)`` asks for (each pod as its first card)."""
        tasks = self.callbacks.needed(job)
        if len(tasks) == 1:  # most jobs, asked of each by enqueue and reclaim: ``add``'s sum
            vec = self.vector(tasks[0], self.first_card(tasks[0]))
            return {r: amount for r, amount in vec.items() if amount}
        out: Vector = {}
        for task in tasks:
            add(out, self.vector(task, self.first_card(task)))
        return out

    def check_allocatable(self, job: JobInfo, task: Task, vec: Vector) -> Verdict:
        short = self.ledger.shortfall(job.queue, vec)
        if short is not None:
            return quota_status(short)
        return self.callbacks.allocate_verdict(job, task, vec)

    def check_enqueueable(self, job: JobInfo, vec: Vector) -> Verdict:
        short = self.ledger.shortfall(job.queue, vec, with_inqueue=True, resources=BASE)
        if short is not None:
            return quota_status(short)
        return self.callbacks.enqueue_verdict(job, vec)

    # ------------------------------------------------------------------ deciding

    def statement(self) -> Statement:
        return Statement(self)

    def new_room_mark(self) -> None:
        """Something was released: a state no mark named before."""
        self._marks += 1
        self.room_mark = self._marks

    def back_to_mark(self, mark: int) -> None:
        """The state is again the one ``mark`` named (evictions undone, nothing else)."""
        self.room_mark = mark

    # The changes a Statement makes, each with its accounting, and their undoing.

    def assign(
        self,
        task: Task,
        node: int,
        gpus: tuple[int, ...],
        card: str | None,
        job: JobInfo | None = None,
    ) -> tuple[JobInfo, Allocation, Vector, int]:
        """Place pending ``task`` on ``node`` as ``card``: its job, its allocation, what it
        holds of its queue's account and where it sat in the job's pending list. Callers
        that hold the job give it: finding it from the pod is a lookup among every pod."""
        if job is None:
            job = self.job_for(task)
        index = _position(job.pending, task)
        alloc = self.state.allocate(task.pod, node, gpus)
        if self.dra is not None and self.dra.has(task.pod.key):
            self.dra.place(task.pod.key, self.state.nodes[node])
        vec = self.charge(task, alloc, card)
        self.ledger.charge(job.queue, vec)
        del job.pending[index]
        job.placed.append(task)
        self.cards[task.pod.key] = card
        return job, alloc, vec, index

    def _dra_undo(self, key: str) -> None:
        if self.dra is not None:
            self.dra.undo(key)

    def unassign(self, op: Op) -> None:
        self.state.release(op.task.pod.key)
        self._dra_undo(op.task.pod.key)
        self.ledger.charge(op.job.queue, op.vec, -1)
        placed = op.job.placed
        del placed[_position(placed, op.task)]
        op.job.pending.insert(op.index, op.task)
        self.releases += 1

    def unbind(
        self, task: Task, job: JobInfo | None = None
    ) -> tuple[JobInfo, Allocation, Vector, int]:
        """Take running ``task`` (of ``job``, if the caller holds it) off its node, as
        ``assign`` returns it."""
        if job is None:
            job = self.job_for(task)
        index = _position(job.running, task)
        alloc = self.state.release(task.pod.key)
        vec = self.charge(task, alloc, self.cards.get(task.pod.key))
        if self.dra is not None and self.dra.has(task.pod.key):
            self.dra.release(task.pod.key)
        self.ledger.charge(job.queue, vec, -1)
        del job.running[index]
        del job.running_nodes[index]
        self.releases += 1
        self.new_room_mark()
        return job, alloc, vec, index

    def rebind(self, op: Op) -> None:
        self.state.restore(op.alloc)
        self._dra_undo(op.task.pod.key)
        self.ledger.charge(op.job.queue, op.vec)
        op.job.running.insert(op.index, op.task)
        op.job.running_nodes.insert(op.index, op.alloc.node)

    def note(self, job: JobInfo, status: Status, tasks: Sequence[Task] | None = None) -> None:
        """Why ``tasks`` (all the job's pending pods by default) wait; the last word stays."""
        for task in job.pending if tasks is None else tasks:
            self.statuses[task.pod.key] = status

    def invalid(self, job: JobInfo) -> Status:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (job.problem,), "", "InvalidJob")

    def event(self, key: str, kind: str, type_: str, reason: str, message: str) -> None:
        self.result.events.append(Event(PodKey(key), type_, reason, message, kind))

    def record(self, ops: list[Op]) -> None:
        """A committed statement's operations, as decisions: binds, nominations, evictions."""
        names = self.state.nodes
        for op in ops:
            pod, node = op.task.pod, names[op.alloc.node].name
            if op.kind == "allocate":
                self.result.binds.append(Bind(pod.key, node, op.alloc.gpus, op.alloc.gpu_milli))
                self.result.allocations[pod.key] = op.alloc
                if self.dra is not None and self.dra.has(pod.key):
                    self.result.claims[pod.key] = self.dra.of(pod.key)
                self.result.events.append(scheduled_event(pod.key, node, op.alloc.gpus))
            elif op.kind == "pipeline":
                self.result.nominations.append(Nomination(pod.key, node, op.alloc.gpus))
                self._provisional.append(op)
            else:
                kind = op.eviction
                assert kind is not None, "an eviction's statement names its kind"
                self.result.evictions.append(Evict(pod.key, node, kind, op.message))
                self.event(pod.key, "Pod", "Warning", kind.value, op.message)
                self._provisional.append(op)

    def close(self) -> SessionResult:
        """Undo nominations and evictions in the state, and report every pod still pending."""
        for op in reversed(self._provisional):
            if op.kind == "evict":
                self.state.restore(op.alloc)
            else:
                self.state.release(op.task.pod.key)
            self._dra_undo(op.task.pod.key)
        self._provisional = []
        result = self.result
        pending, events, statuses = result.pending, result.events, self.statuses
        # Tens of thousands of pods wait and share a few thousand statuses (a job's pods
        # share one, as do a shape's refusals): each status's message is joined once.
        texts: dict[int, str] = {}
        for job in self.jobs:
            if not job.pending:
                continue
            invalid = self.invalid(job) if job.problem else None
            for task in job.pending:
                key = task.pod.key
                status = invalid if invalid is not None else statuses.get(key, NOT_TRIED)
                text = texts.get(id(status))  # ids stay apart: ``statuses`` holds each
                if text is None:
                    text = texts[id(status)] = status.message
                pending.append(Pending(key, status, text))
                events.append(failed_event(key, text))
        for q, spec in enumerate(self.tree.specs):
            result.allocated[spec.name] = dict(self.ledger.allocated[q])
            result.fair[spec.name] = dict(self.ledger.fair[q])
        return result
