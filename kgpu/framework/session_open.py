"""Opening a session: the snapshot's pods grouped into jobs, and each queue's account.

:class:`Opening` builds a :class:`~kgpu.framework.session.Session`'s jobs once, as it
opens: every pod goes to its job (a PodGroup's, or a job of its own), running pods
charge what they hold to their queue and pending pods add what they ask to its demand,
each queue's sums charged up the tree once; pods naming a card or holding DRA devices
count those too. Jobs whose queue is missing or not a leaf, or whose PodGroup is
missing, open with their problem said (``JobInfo.problem``), not placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kgpu.framework.charges import GpuCharges
from kgpu.framework.session_claims import SessionClaims
from kgpu.framework.session_snapshot import Snapshot
from kgpu.model.card import NAME_ANNOTATION, counted_units
from kgpu.model.job import JobInfo, JobKey, JobSpec, Task, card_problem, singleton_job
from kgpu.model.ledger import QueueLedger
from kgpu.model.pod import PodSpec
from kgpu.model.queue import DEFAULT_QUEUE, QueueTree
from kgpu.model.resources import CPU, GPU, MEMORY, Vector, add
from kgpu.state.cluster import Allocation, ClusterState


class Opened(Protocol):
    """What the opening reads of the session it builds jobs for, and the cards it notes
    (a :class:`~kgpu.framework.session.Session`, which imports this module)."""

    state: ClusterState
    charges: GpuCharges
    dra: SessionClaims | None
    tree: QueueTree
    ledger: QueueLedger
    cards: dict[str, str | None]

    def first_card(self, task: Task) -> str | None: ...

    def node_cards(self, node: int) -> tuple[str, ...]: ...

    def asked_milli(self, pod: PodSpec) -> int: ...

    def held_milli(self, task: Task, alloc: Allocation) -> int: ...

    def held_total(self, tasks: Sequence[Task]) -> Vector: ...


class Opening:
    """What a session opens with, built from its snapshot (``jobs``: once)."""

    def __init__(self, session: Opened) -> None:
        self.session = session
        self.tree = session.tree
        self.ledger = session.ledger
        self._places: dict[str, tuple[int, str]] = {}  # by queue name (``_new_job``)

    def jobs(self, snapshot: Snapshot) -> tuple[list[JobInfo], dict[str, JobInfo]]:
        """The session's jobs in key order, and each by the name its tasks give."""
        # Opening over tens of thousands of pods must cost a few dictionary operations a
        # pod: pods are grouped by job in one pass that does nothing else, then each job
        # sorts its own, and every queue's sums are charged up the tree once. Those
        # operations are most of the opening's time (each a likely cache miss in a
        # dictionary of every pod), so a pod's job is found by the job's name
        # (``job_for``), not kept pod by pod, and a job's pods that come one after another,
        # as snapshots list them, find their group without a lookup.
        groups: dict[str, list[Task]] = {}
        last_name = ""
        last: list[Task] = []
        for task in snapshot.tasks:
            name: str = task.job or task.pod.key
            if name == last_name:
                last.append(task)
                continue
            group = groups.get(name)
            if group is None:
                group = groups[name] = [task]
            else:
                group.append(task)
            last_name, last = name, group
        specs = {spec.key: spec for spec in snapshot.jobs}
        session = self.session
        job_named: dict[str, JobInfo] = {}  # by the name its tasks give (``job_for``)
        allocations = session.state.allocations
        mig = session.charges.held
        asked_milli = session.charges.asked
        dra = session.dra
        # Each queue's sums: what its jobs' pods hold and what its jobs' pending pods ask
        # (``cpu``, ``memory``, milli-GPU), charged up the tree once. Summed as
        # ``x = x + y``: the compiled build adds list items in place generically.
        n = len(self.tree)
        held_cpu, held_memory, held_gpu = [0] * n, [0] * n, [0] * n
        asked_cpu, asked_memory, asked_gpu = [0] * n, [0] * n, [0] * n
        # Jobs whose pending pods also ask cards or DRA devices: charged to their queue's
        # demand once the jobs are in their order, as every job's were.
        marked: list[JobInfo] = []
        jobs: list[JobInfo] = []
        for name, group in groups.items():
            first = group[0]
            spec = specs.get(first.job) if first.job else singleton_job(first)
            job = self._new_job(spec or JobSpec(JobKey(name)), found=spec is not None)
            jobs.append(job)
            job_named[name] = job
            running, nodes, pending = job.running, job.running_nodes, job.pending
            cpu = memory = gpu = 0
            carded = False  # a pod names a card: read below, once the job's pods are sorted
            for task in group:
                pod = task.pod
                if NAME_ANNOTATION in pod.annotations:
                    carded = True
                alloc = allocations.get(pod.key)
                if alloc is None:
                    pending.append(task)
                    continue
                running.append(task)
                nodes.append(alloc.node)
                cpu += alloc.cpu_milli
                memory += alloc.memory_mib
                gpu += mig(alloc) if alloc.mig_count else alloc.gpu_milli * len(alloc.gpus)
                if dra is not None and dra.has(pod.key):
                    milli, cards = dra.count(pod.key)
                    gpu += milli
                    if cards and job.queue >= 0:
                        self.ledger.charge(job.queue, cards)
            if carded:
                for task in group:
                    if NAME_ANNOTATION in task.pod.annotations:
                        self._read_card(job, task)
            q = job.queue
            if q < 0:
                continue
            if running:
                held_cpu[q] = held_cpu[q] + cpu
                held_memory[q] = held_memory[q] + memory
                held_gpu[q] = held_gpu[q] + gpu
            if not pending:
                continue
            # The pods it may still run (``max_pods`` less ``alive``: none is placed yet).
            top = job.spec.max_member
            whole = not top or top >= len(group)
            asking = pending if whole else pending[: max(top - len(running), 0)]
            cpu = memory = gpu = 0
            # ``Session.asked_milli`` written out: a method call less for each pending pod.
            for task in asking:
                pod = task.pod
                cpu += pod.cpu_milli
                memory += pod.memory_mib
                gpu += asked_milli(pod.gpu)
                if dra is not None:
                    gpu += dra.milli(pod.key)
            asked_cpu[q] = asked_cpu[q] + cpu
            asked_memory[q] = asked_memory[q] + memory
            asked_gpu[q] = asked_gpu[q] + gpu
            if carded or dra is not None:
                marked.append(job)
        ledger = self.ledger
        for q in range(n):
            if held_cpu[q] or held_memory[q] or held_gpu[q]:
                ledger.charge(q, {CPU: held_cpu[q], MEMORY: held_memory[q], GPU: held_gpu[q]})
        self._add_podless(snapshot.jobs, jobs)
        if len(jobs) == len(job_named):
            # In key order, a job's key being the name its tasks give: the names sort as
            # strings, natively, where a key function was called for every job.
            jobs = [job_named[name] for name in sorted(job_named)]
        else:  # jobs without pods besides
            jobs.sort(key=lambda j: j.spec.key)
        if marked:
            marked.sort(key=lambda j: j.spec.key)
            self._ask_cards(marked)
        tree = self.tree
        for q in range(n):
            if not tree.children[q]:  # jobs sit in leaves; parents' demand is their subtree's
                add(
                    ledger.demand[q],
                    {CPU: asked_cpu[q], MEMORY: asked_memory[q], GPU: asked_gpu[q]},
                )
                add(ledger.demand[q], ledger.allocated[q])
        return jobs, job_named

    def _ask_cards(self, jobs: list[JobInfo]) -> None:
        """Charge the demand of ``jobs``' queues with what their pending pods ask of cards
        and DRA devices (milli-cards), beside the base resources counted as the session
        opened."""
        session = self.session
        dra = session.dra
        for job in jobs:
            demand = self.ledger.demand[job.queue]
            for task in job.pending[: max(job.max_pods - job.alive, 0)]:
                pod = task.pod
                if dra is not None and dra.has(pod.key):
                    add(demand, dra.count(pod.key)[1])
                if NAME_ANNOTATION in pod.annotations:
                    card = session.first_card(task)
                    if card is not None:
                        units = counted_units(card, pod.gpu, session.asked_milli(pod))
                        add(demand, {card: units})

    def _add_podless(self, specs: Sequence[JobSpec], jobs: list[JobInfo]) -> None:
        """The jobs whose PodGroup records its admission (``JobSpec.enqueued``), with no pod
        in the session: those not admitted are judged by enqueue without pods (Volcano's
        controller creates them once admitted); those admitted hold their minimum resources
        against their queue, as do the admitted ones with pods, less what these hold."""
        marked = [spec for spec in specs if spec.enqueued is not None]
        if not marked:
            return  # no anchor records admissions: nothing more to walk
        by_key = {job.spec.key: job for job in jobs}
        for spec in marked:
            job = by_key.get(spec.key)
            if job is None:
                job = self._new_job(spec, found=True)
                jobs.append(job)
            if spec.enqueued and spec.min_resources and job.queue >= 0:
                held = self.session.held_total(job.running) if job.running else {}
                hold = {r: a - held.get(r, 0) for r, a in spec.min_resources.items()}
                self.ledger.admit(job.queue, {r: a for r, a in hold.items() if a > 0})

    def _new_job(self, spec: JobSpec, found: bool) -> JobInfo:
        if not found:
            job = JobInfo(spec, self.tree.index.get(spec.queue or DEFAULT_QUEUE, -1))
            job.problem = f"PodGroup {spec.key} does not exist"
            return job
        # Tens of thousands of jobs share a few hundred queues: each queue name is looked
        # up in the tree once a session.
        place = self._places.get(spec.queue)
        if place is None:
            place = self._places[spec.queue] = self._place(spec.queue or DEFAULT_QUEUE)
        queue, problem = place
        job = JobInfo(spec, queue)
        if problem:
            job.problem = problem
        return job

    def _place(self, name: str) -> tuple[int, str]:
        """The queue a job naming queue ``name`` goes to (-1: none) and why not, if not."""
        queue = self.tree.index.get(name, -1)
        if queue < 0:
            return -1, f"queue {name} does not exist or is invalid"
        if not self.tree.is_leaf(queue):
            return -1, f"queue {name} has child queues; jobs go to leaf queues"
        return queue, ""

    def _read_card(self, job: JobInfo, task: Task) -> None:
        """A pending pod's card name must be readable; a running pod holds its first card
        that its node offers."""
        session = self.session
        alloc = session.state.allocations.get(task.pod.key)
        if alloc is None:
            problem = card_problem(task)
            if problem and not job.problem:
                job.problem = problem
            return
        names = task.card_names() if not card_problem(task) else ()
        if job.queue >= 0 and names and task.pod.gpu.count:
            here = session.node_cards(alloc.node)
            card = next((c for c in names if c in here), None)
            if card is not None:
                session.cards[task.pod.key] = card
                units = counted_units(card, task.pod.gpu, session.held_milli(task, alloc))
                self.ledger.charge(job.queue, {card: units})
