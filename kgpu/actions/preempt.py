"""The preempt action: a job takes room from lower-priority jobs of its own queue.

For each queue (in queue order) and each of its jobs still not ready (in job order), the
running pods of the queue's other jobs that have run at least the queue's min-runtime
are the candidates; the ``preemptable`` plugins (priority: strictly lower job priority)
judge each victim unit. The job's pods are placed one by one, each in free room if there
is some and else by evicting the fewest units on the best node (see ``victims``), all in
one statement kept only if the job becomes ready. Its pods are then nominated to their
nodes: they bind in a later session, once the victims are gone.

A queue's victim units are worked out once per action, and only once the judges would let
some waiting job take a pod of the queue; a job that would fail like one that failed
before (see ``Failures``) is not tried again in the action. A queue of hundreds of
similar jobs costs a few attempts, not hundreds.
"""

from __future__ import annotations

from kgpu.actions.allocate import schedulable
from kgpu.actions.placement import Placer, placer_of
from kgpu.actions.topology_placement import holds_to_domain
from kgpu.actions.victim_pool import VictimPool
from kgpu.actions.victims import make_room
from kgpu.framework.session import Session
from kgpu.model.card import NAME_ANNOTATION
from kgpu.model.job import JobInfo, Task
from kgpu.model.pod import PodSpec


def take_room(
    session: Session,
    placer: Placer,
    job: JobInfo,
    pool: VictimPool,
    reclaim: bool,
    message: str,
    queues: set[int] | None = None,
) -> bool:
    """Place ``job``'s pods until it is ready, evicting units of ``pool`` as needed; all or
    nothing."""
    statement = session.statement()
    refused: set[int] = set()
    for task in list(job.pending):
        if session.callbacks.ready(job):
            break
        placed = False
        for option in placer.options(task):
            pod, card = option
            vec = session.vector(task, card)
            if session.check_allocatable(job, task, vec) is None:
                outcome = placer.free_room(pod, placer.checks(job, task, card))
                if outcome is not None:
                    statement.allocate(task, outcome.node, outcome.gpus, card, True, job)
                    placed = True
                    break
            if make_room(
                session,
                placer,
                statement,
                job,
                task,
                option,
                pool,
                reclaim,
                message,
                queues,
                refused,
            ):
                placed = True
                break
        if not placed:
            break
    if session.callbacks.ready(job):
        statement.commit()
        return True
    statement.discard()
    return False


def may_take_room(session: Session, job: JobInfo) -> bool:
    """A job preempt and reclaim may evict for: schedulable, not ready yet, and none of the
    victims of its earlier evictions still leaving; not one that must stay in one topology
    domain (``topology_placement``: such a gang places in free room only)."""
    return (
        schedulable(session, job)
        and not session.callbacks.ready(job)
        and session.may_evict(job)
        and not holds_to_domain(session, job)
    )


class Failures:
    """Jobs that could not take room in this action, and a test that a job would fail too.

    Taking room only shrinks what is left to take, so a job fails like one that failed
    before when it is of the same queue and priority, has the same placement constraints
    and asks at least as much: for a job of one pod, as much CPU, memory and GPU (of the
    same kind: a share, or whole GPUs); for a gang, pods of the very same shapes.
    """

    def __init__(self) -> None:
        self._alike: set[tuple[object, ...]] = set()
        self._smaller: dict[tuple[object, ...], list[tuple[int, int, int]]] = {}
        # The queues with a failure: a job of another is known to fail in none of its
        # ways, which spares working out its sizes (half the jobs a steady session asks of).
        self._queues: set[int] = set()

    @staticmethod
    def _sizes(job: JobInfo, queue: int, pods: list[Task]) -> tuple[object, ...]:
        return (queue, job.spec.priority, tuple([_shape(t.pod) for t in pods]))

    @staticmethod
    def _single(
        job: JobInfo, queue: int, pods: list[Task]
    ) -> tuple[tuple[object, ...], tuple[int, int, int]] | None:
        if len(pods) != 1:
            return None
        pod = pods[0].pod
        gpu = pod.gpu
        kind: object = "share" if gpu.is_shared else "whole"
        if gpu.count and not gpu.milli:
            # Memory-only, MPS and MIG requests take a share that depends on the GPU: only
            # the very same request compares.
            kind = (gpu.kind, gpu.memory_mib, gpu.replicas, gpu.mig_profile, gpu.count)
        key = (
            queue,
            job.spec.priority,
            kind,
            pod.node_selector,
            pod.tolerations,
            pod.gpu.models,
            pod.annotations.get(NAME_ANNOTATION),
        )
        return key, (pod.cpu_milli, pod.memory_mib, gpu.total_milli)

    def known(self, session: Session, job: JobInfo, queue: int) -> bool:
        if queue not in self._queues:
            return False
        pods = session.callbacks.needed(job)  # asked once: a loop over the job's pods
        if session.dra is not None and any(session.has_claims(t.pod) for t in pods):
            return False  # what DRA claims fit is not told by sizes
        if self._sizes(job, queue, pods) in self._alike:
            return True
        single = self._single(job, queue, pods)
        if single is None:
            return False
        key, size = single
        return any(
            all(a <= b for a, b in zip(small, size, strict=True))
            for small in self._smaller.get(key, ())
        )

    def add(self, session: Session, job: JobInfo, queue: int) -> None:
        pods = session.callbacks.needed(job)
        if session.dra is not None and any(session.has_claims(t.pod) for t in pods):
            return
        self._alike.add(self._sizes(job, queue, pods))
        self._queues.add(queue)
        single = self._single(job, queue, pods)
        if single is not None:
            self._smaller.setdefault(single[0], []).append(single[1])


def _shape(pod: PodSpec) -> tuple[object, ...]:
    return (pod.shape, pod.annotations.get(NAME_ANNOTATION))


class Preempt:
    name = "preempt"

    def execute(self, session: Session) -> None:
        if not session.callbacks.preempts():
            return
        placer = placer_of(session)
        # Per queue, its jobs that hold pods (the victims and givers: a job gains none in
        # the action, as pods placed join ``placed``) and those with pods waiting (the
        # only ones that may take room), each in session order. A queue's jobs change only
        # while it is served (its jobs evict only its own), so what is read of them here
        # is as it will be then.
        holding: dict[int, list[JobInfo]] = {}
        asking: dict[int, list[JobInfo]] = {}
        for job in session.jobs:
            queue = job.queue
            if queue < 0:
                continue
            if job.running:
                holding.setdefault(queue, []).append(job)
            if job.pending:
                asking.setdefault(queue, []).append(job)
        failures = Failures()
        hopeless: set[tuple[int, int]] = set()
        for queue in sorted(asking, key=session.callbacks.queue_key):
            jobs = holding.get(queue, [])
            pool: VictimPool | None = None
            giver: JobInfo | None = None
            least = session.tree.specs[queue].min_runtime_s
            waiting = [j for j in asking[queue] if may_take_room(session, j)]
            for job in sorted(waiting, key=session.callbacks.job_key):
                if (queue, job.spec.priority) in hopeless or failures.known(session, job, queue):
                    continue
                giver = _giver(session, job, jobs, giver, least)
                if giver is None:
                    hopeless.add((queue, job.spec.priority))
                    continue
                if pool is None:
                    pool = VictimPool(session, jobs)
                name = session.tree.name(queue)
                message = f"preempted by {job.key} (priority {job.spec.priority}) in queue {name}"
                if not take_room(session, placer, job, pool, False, message):
                    failures.add(session, job, queue)


def _giver(
    session: Session, job: JobInfo, jobs: list[JobInfo], last: JobInfo | None, least: float
) -> JobInfo | None:
    """A running job of ``jobs`` (``job``'s queue, whose min-runtime is ``least``), not
    ``job``, that the judges would let ``job`` take a pod of, or None if there is none:
    then preempting is hopeless for ``job``.

    Asked about one pod of each job, stopping at the first yes: the shipped judges look at
    jobs (their priority), not at single pods, so a no for every job is a no for all. The
    giver found for the queue's job before (``last``) is asked first: it mostly still
    gives, and a queue's waiting jobs then cost one question each, not a walk of the queue.
    """
    if last is not None and _gives(session, job, last, least):
        return last
    for other in jobs:  # a walk of the whole queue when hopeless: kept to a few operations
        if _gives(session, job, other, least):
            return other
    return None


def _gives(session: Session, job: JobInfo, other: JobInfo, least: float) -> bool:
    """Would the judges let ``job`` take the first running pod of ``other``, if it is past
    its queue's min-runtime (a pod younger than that is never a victim)?"""
    if other is job or not other.running:
        return False
    pod = other.running[0]
    return session.now - pod.started >= least and session.callbacks.victim_ok(
        job, [pod], reclaim=False
    )
