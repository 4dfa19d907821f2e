"""Victims: which running pods to evict so that a pending pod fits on a node.

Victims come in units. An extra pod of a ready job (one it stays ready without) is a unit
of its own; the rest of a job is one unit, its whole gang, because evicting part of a gang
leaves the other part holding resources it cannot use. Units are ordered extras first,
then by the session's victim order (the most over-served queue first for reclaim, the
lowest priority first, the youngest first).

For a pod, each node that holds units is tried: units on it are evicted in order, each
only if the plugins accept it, until the pod fits there (by every filter, and by its
queue's limits). The node needing the fewest victims wins; among equals the one whose
victims come earliest in the order. Nodes are tried in the order of their first unit,
and at most ``MAX_NODES`` of those that could fit at all (of ``MAX_SCANNED`` looked at), as
kube-scheduler samples its preemption candidates: enough for a good choice, bounded on a
large cluster. The search
stops early once one victim does and no node further on holds an earlier unit.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kgpu.actions.placement import Option, Placer
from kgpu.framework.session import Session
from kgpu.framework.statement import Statement
from kgpu.model.job import JobInfo, Task
from kgpu.model.pod import PodSpec
from kgpu.model.resources import Vector
from kgpu.model.units import MILLI_PER_GPU

MAX_NODES = 8  # nodes tried (trial evictions) per pod
MAX_SCANNED = 24  # nodes whose units are judged per pod


@dataclass(slots=True)
class Unit:
    job: JobInfo
    task: Task | None  # an extra pod; None: the job's whole gang
    rank: int = 0
    nodes: tuple[int, ...] = ()  # where its pods ran when the pool was made

    def tasks(self, session: Session) -> list[Task]:
        """The pods evicting this unit takes now (none if they are gone already)."""
        job = self.job
        if self.task is None:
            return list(job.running)
        if self.task.pod.key not in session.state.allocations:
            return []
        # An extra stays one only while the job is still ready without it.
        return [self.task] if session.ready(job, job.alive - 1) else []


def _youngest_first(task: Task) -> tuple[float, str]:
    return -task.started, task.pod.key


def victim_units(session: Session, candidates: Sequence[Task]) -> list[Unit]:
    """The units ``candidates`` (running pods of their jobs that may be victims) form, in
    victim order."""
    # A pool covers most running pods of a large cluster: the loops below are written for
    # speed (locals, one dictionary entry per job, no sort of a job of one pod).
    job_of, ready, victim_head = session.job_of, session.ready, session.victim_head
    by_job: dict[str, tuple[JobInfo, set[str]]] = {}
    for task in candidates:
        key = task.pod.key
        job = job_of[key]
        entry = by_job.get(job.key)
        if entry is None:
            by_job[job.key] = (job, {key})
        else:
            entry[1].add(key)
    units: list[tuple[tuple[object, ...], Unit]] = []
    for name in sorted(by_job):
        job, eligible = by_job[name]
        running = job.running
        count = len(running)
        if not count:
            continue
        alive = job.alive
        spare = 0
        while spare < count and ready(job, alive - spare - 1):
            spare += 1
        youngest = sorted(running, key=_youngest_first) if count > 1 else running
        first = youngest[0]
        head = victim_head(first)  # once a job: plugins judge jobs, not pods
        if spare:
            for task in [t for t in youngest if t.pod.key in eligible][:spare]:
                units.append(((False, head, -task.started, task.pod.key), Unit(job, task)))
        if len(eligible) >= count and all(t.pod.key in eligible for t in running):
            units.append(((True, head, -first.started, first.pod.key), Unit(job, None)))
    units.sort(key=lambda pair: pair[0])
    out = []
    for rank, (_, unit) in enumerate(units):
        unit.rank = rank
        out.append(unit)
    return out


class VictimPool:
    """Victim units with the nodes they hold, worked out once for an action.

    Units whose pods were evicted since simply have no pods left; the order is the one of
    the action's start (the plugins still judge every unit on the accounts of the moment).
    """

    def __init__(self, session: Session, candidates: Sequence[Task]) -> None:
        self.units = victim_units(session, candidates)
        self.by_node: dict[int, list[Unit]] = {}
        self.by_queue: dict[int, list[Unit]] = {}
        allocations = session.state.allocations
        for unit in self.units:
            # What ``unit.tasks`` gives as the units were just made: the extra pod, or all
            # the job's running pods.
            if unit.task is not None:
                unit.nodes = (allocations[unit.task.pod.key].node,)
            else:
                running = unit.job.running
                nodes = {allocations[t.pod.key].node for t in running}
                unit.nodes = tuple(sorted(nodes)) if len(nodes) > 1 else tuple(nodes)
            for node in unit.nodes:
                self.by_node.setdefault(node, []).append(unit)
            self.by_queue.setdefault(unit.job.queue, []).append(unit)

    def stream(self, queues: set[int] | None) -> Iterable[Unit]:
        """The units of ``queues`` (all if None), in victim order."""
        if queues is None:
            return self.units
        lists = [self.by_queue[q] for q in sorted(queues) if q in self.by_queue]
        return heapq.merge(*lists, key=lambda unit: unit.rank)


def old_enough(session: Session, task: Task) -> bool:
    """A pod younger than its queue's min-runtime is never a victim."""
    queue = session.job_of[task.pod.key].queue
    return queue >= 0 and session.now - task.started >= session.tree.specs[queue].min_runtime_s


def old_pods(session: Session, jobs: Iterable[JobInfo]) -> list[Task]:
    """The running pods of ``jobs`` that ``old_enough`` lets be victims (job by job)."""
    now, specs = session.now, session.tree.specs
    out: list[Task] = []
    for job in jobs:
        if job.queue >= 0 and job.running:
            least = specs[job.queue].min_runtime_s
            out.extend([t for t in job.running if now - t.started >= least])
    return out


@dataclass(slots=True)
class _Choice:
    node: int
    victims: list[list[Task]]
    cost: tuple[int, int, int]


def make_room(
    session: Session,
    placer: Placer,
    statement: Statement,
    job: JobInfo,
    task: Task,
    option: Option,
    pool: VictimPool,
    reclaim: bool,
    message: str,
    queues: set[int] | None = None,
    refused: set[int] | None = None,
) -> bool:
    """Evict the fewest units that let ``task`` (as ``option``) fit a node, and nominate it
    there, all through ``statement``; False (and nothing done) if no node can be freed.
    ``queues`` (if given) are the only queues victims may come from; ``refused`` collects
    the ranks of units the judges turned down, which stay turned down for the statement."""
    refused = set() if refused is None else refused
    pod, card = option
    vec = session.vector(task, card)
    best: _Choice | None = None
    tried = scanned = 0
    seen: set[int] = set()
    # Nodes come in the order of their first unit, found walking the units in order.
    for first in pool.stream(queues):
        if tried >= MAX_NODES or scanned >= MAX_SCANNED:
            break
        if best is not None and best.cost[0] == 1 and first.rank >= best.cost[1]:
            break  # one victim does, and no node further on holds an earlier unit
        if first.job is job:
            continue
        for node in first.nodes:
            if node in seen:
                continue
            seen.add(node)
            units = [
                u
                for u in pool.by_node[node]
                if u.job is not job and (queues is None or u.job.queue in queues)
            ]
            scanned += 1
            # A unit refused now stays refused once others are gone (they only lower what
            # the victims' queues hold), so the judges sieve before any trial.
            kept = []
            for u in units:
                if u.rank in refused:
                    continue
                if _judged(session, job, u, reclaim):
                    kept.append(u)
                else:
                    refused.add(u.rank)
            units = kept
            if not units or not _could_fit(session, pod, node, units):
                continue
            tried += 1
            choice = _try_node(session, placer, job, task, pod, vec, node, units, reclaim)
            if choice is not None and (best is None or choice.cost < best.cost):
                best = choice
    if best is None:
        return False
    for tasks in best.victims:
        for victim in tasks:
            statement.evict(victim, message)
    gpus = placer.fits(pod, best.node)
    assert gpus is not None, "a node freed in trial must fit when freed again"
    statement.allocate(task, best.node, gpus, card, pipeline=True)
    return True


def _judged(session: Session, job: JobInfo, unit: Unit, reclaim: bool) -> bool:
    tasks = unit.tasks(session)
    return bool(tasks) and session.victim_ok(job, tasks, reclaim)


def _could_fit(session: Session, pod: PodSpec, node: int, units: list[Unit]) -> bool:
    """A cheap bound: the node's free room plus everything its units hold is enough, GPU by
    GPU (a whole-GPU pod needs GPUs that would be wholly free)."""
    state = session.state
    cpu = int(state.cpu_free[node])
    mem = int(state.mem_free[node])
    slots = int(state.max_pods[node] - state.pods[node])
    gpus: list[int] = state.gpu_free[node].tolist()
    for unit in units:
        for t in unit.tasks(session):
            alloc = state.allocations[t.pod.key]
            if alloc.node == node:
                cpu += alloc.cpu_milli
                mem += alloc.memory_mib
                slots += 1
                for g in alloc.gpus:
                    gpus[g] += alloc.gpu_milli
    if cpu < pod.cpu_milli or mem < pod.memory_mib or slots < 1:
        return False
    want = pod.gpu
    if want.count == 0:
        return True
    if want.is_shared:
        return max(gpus) >= want.milli
    return gpus.count(MILLI_PER_GPU) >= want.count


def _try_node(
    session: Session,
    placer: Placer,
    job: JobInfo,
    task: Task,
    pod: PodSpec,
    vec: Vector,
    node: int,
    units: list[Unit],
    reclaim: bool,
) -> _Choice | None:
    trial = session.statement()
    victims: list[list[Task]] = []
    ranks: list[int] = []
    fits = False
    for unit in units:
        tasks = unit.tasks(session)
        if not tasks or not session.victim_ok(job, tasks, reclaim):
            continue
        for victim in tasks:
            trial.evict(victim, "")
        victims.append(tasks)
        ranks.append(unit.rank)
        if placer.fits(pod, node) is not None and session.check_allocatable(job, task, vec) is None:
            fits = True
            break
    trial.discard()
    if not fits:
        return None
    count = sum(len(tasks) for tasks in victims)
    return _Choice(node, victims, (count, max(ranks), sum(ranks)))
