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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from kgpu.actions.placement import Option, Placer
from kgpu.framework.session import Session
from kgpu.framework.session_scratch import StateKey
from kgpu.framework.statement import Statement
from kgpu.model.decision import EvictionKind
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
        return [self.task] if session.callbacks.ready(job, job.alive - 1) else []


# What a pod of a pool's unit holds on its node: (queue, CPU, memory, milli-GPU, GPUs).
_Held = tuple[int, int, int, int, tuple[int, ...]]

# A victim unit as pools sort it: (-started, pod) of its youngest pod (unique, so nothing
# further is ever compared), its job, the extra pod (None: the whole gang), its nodes.
_Entry = tuple[float, str, JobInfo, Task | None, tuple[int, ...]]


class _Plan(NamedTuple):  # a tuple: made for most running jobs, at a fraction of a dataclass
    """A job's victim units as its pods stood when they were worked out.

    Kept in the session's scratch (``PLANS``) for the pools made later in it: reclaim's
    and each queue's in preempt cover mostly the same jobs. A job's pods leave ``running``
    and join ``placed`` only by committed statements (a discarded one puts everything back
    where it was), and pools are made between statements, so the two counts tell whether
    the job is still as it was.
    """

    running: int
    placed: int
    youngest: Task | None  # what the victim order is asked about; None: no units
    # Made as pools take them, once a job: pools are made up to once a queue a session.
    extras: tuple[_Entry, ...]
    gang: _Entry | None


# Per job, its victim units as last worked out: each later pool redoes only the jobs that
# changed.
PLANS: StateKey[dict[str, _Plan]] = StateKey("victim plans")


def _plan(session: Session, job: JobInfo) -> _Plan:
    """``job``'s units: its extras (pods it stays ready without), youngest first, that are
    past their queue's min-runtime, and its whole gang if every pod is."""
    running, placed = job.running, len(job.placed)
    count = len(running)
    least = session.tree.specs[job.queue].min_runtime_s
    now = session.now
    allocations = session.state.allocations
    if count == 1:  # most jobs: what the general case below gives for one pod, for less
        only = running[0]
        if now - only.started < least:
            return _Plan(1, placed, None, (), None)
        key = only.pod.key
        where = (allocations[key].node,)
        extra = (
            ((-only.started, key, job, only, where),)
            if session.callbacks.ready(job, placed)
            else ()
        )
        return _Plan(1, placed, only, extra, (-only.started, key, job, None, where))
    # The youngest first: by (-started, pod), which are unique, so tasks are never compared.
    order = sorted([(-t.started, t.pod.key, t) for t in running])
    # Pods younger than the min-runtime are never victims: a prefix of ``order``, as
    # ``now - started`` only grows as ``started`` falls.
    young = 0
    while young < count and now - order[young][2].started < least:
        young += 1
    if young == count:
        return _Plan(count, placed, None, (), None)
    ready, alive = session.callbacks.ready, count + placed
    spare = 0
    while spare < count and ready(job, alive - spare - 1):
        spare += 1
    extras = tuple(
        (started, key, job, t, (allocations[key].node,))
        for started, key, t in order[young : young + spare]
    )
    gang = None
    if not young:
        nodes = tuple(sorted({allocations[t.pod.key].node for t in running}))
        gang = (order[0][0], order[0][1], job, None, nodes)
    return _Plan(count, placed, order[0][2], extras, gang)


def _buckets(session: Session, jobs: Iterable[JobInfo]) -> dict[tuple[object, ...], list[_Entry]]:
    """The units the running pods of ``jobs`` form, by (extra?, plugins' key)."""
    plans = session.scratch.get(PLANS)
    if plans is None:
        plans = {}
        session.scratch.set(PLANS, plans)
    head_of = session.callbacks.victim_head
    buckets: dict[tuple[object, ...], list[_Entry]] = {}
    for job in jobs:
        if job.queue < 0 or not job.running:
            continue
        name = job.spec.key
        plan = plans.get(name)
        if plan is None or plan.running != len(job.running) or plan.placed != len(job.placed):
            plan = plans[name] = _plan(session, job)
        if plan.youngest is None:
            continue
        head = head_of(plan.youngest)  # once a job: plugins judge jobs, not pods
        if plan.extras:
            buckets.setdefault((False, *head), []).extend(plan.extras)
        if plan.gang is not None:
            buckets.setdefault((True, *head), []).append(plan.gang)
    return buckets


class VictimPool:
    """Victim units with the nodes they hold, worked out once for an action.

    Units whose pods were evicted since simply have no pods left; the order is the one of
    the action's start (the plugins still judge every unit on the accounts of the moment).
    """

    def __init__(self, session: Session, jobs: Iterable[JobInfo]) -> None:
        # The victim order: extras first, then the plugins' order, then the youngest first.
        # A pool covers up to every running pod of a large cluster, and its sort was most
        # of its cost: units are put in buckets of one (extra?, plugins' key), which many
        # jobs share (the shipped plugins' keys are a queue's ratio and a priority), the
        # buckets sorted, and in each the units by (-started, pod): the same order as one
        # sort by the whole key, as keys are unique, for a comparison of two numbers and a
        # string a unit. Each unit is made once its rank is known.
        buckets = _buckets(session, jobs)
        self.units: list[Unit] = []
        self.by_node: dict[int, list[Unit]] = {}
        self.by_queue: dict[int, list[Unit]] = {}
        # Per node: its clock, and what the pods of the pool's units hold there (``held``).
        self._held: dict[int, tuple[int, list[_Held]]] = {}
        # Per request and victims' queues: the nodes ``_may_fit`` turned down, with their
        # clocks then (``hopeless``).
        self._hopeless: dict[tuple[object, ...], dict[int, int]] = {}
        units, by_node, by_queue = self.units, self.by_node, self.by_queue
        for order in sorted(buckets):
            bucket = buckets[order]
            bucket.sort()  # by (-started, pod): unique, so nothing further is compared
            for _, _, job, task, nodes in bucket:
                unit = Unit(job, task, len(units), nodes)
                units.append(unit)
                for node in nodes:
                    found = by_node.get(node)
                    if found is None:
                        by_node[node] = [unit]
                    else:
                        found.append(unit)
                found = by_queue.get(job.queue)
                if found is None:
                    by_queue[job.queue] = [unit]
                else:
                    found.append(unit)

    def held(self, session: Session, node: int) -> list[_Held]:
        """What the pods of this pool's units hold on ``node`` now, worked out again only
        once something on the node was allocated or released (its clock moved): a pod's
        searches look at the same first nodes, and most of them find no room there."""
        clock = int(session.state.node_clock[node])
        found = self._held.get(node)
        if found is not None and found[0] == clock:
            return found[1]
        allocations = session.state.allocations
        counted: set[str] = set()  # a pod in two units (an extra, and its job's gang)
        out: list[_Held] = []
        for unit in self.by_node[node]:
            for task in unit.job.running if unit.task is None else (unit.task,):
                key = task.pod.key
                alloc = allocations.get(key)
                if alloc is None or alloc.node != node or key in counted:
                    continue
                counted.add(key)
                out.append(
                    (unit.job.queue, alloc.cpu_milli, alloc.memory_mib, alloc.gpu_milli, alloc.gpus)
                )
        self._held[node] = (clock, out)
        return out

    def hopeless(self, pod: PodSpec, queues: set[int] | None) -> dict[int, int]:
        """The nodes where even every pod of the pool's units (of ``queues``) gone would
        leave no room for ``pod``, each with its clock when that was found: the answer
        holds for as long as nothing on the node is allocated or released."""
        gpu = pod.gpu
        key = (
            pod.cpu_milli,
            pod.memory_mib,
            gpu.count,
            gpu.is_shared,
            gpu.milli,
            None if queues is None else frozenset(queues),
        )
        found = self._hopeless.get(key)
        if found is None:
            found = self._hopeless[key] = {}
        return found

    def stream(self, queues: set[int] | None) -> Iterable[Unit]:
        """The units of ``queues`` (all if None), in victim order."""
        if queues is None:
            return self.units
        lists = [self.by_queue[q] for q in sorted(queues) if q in self.by_queue]
        return heapq.merge(*lists, key=lambda unit: unit.rank)


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
    kind = EvictionKind.RECLAIMED if reclaim else EvictionKind.PREEMPTED
    pod, card = option
    vec = session.vector(task, card)
    best: _Choice | None = None
    tried = scanned = 0
    seen: set[int] = set()
    hopeless, clocks = pool.hopeless(pod, queues), session.state.node_clock
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
            scanned += 1
            if hopeless.get(node) == clocks[node]:
                continue
            if not _may_fit(session, pool, pod, node, queues):
                hopeless[node] = int(clocks[node])
                continue  # not even with every pod the pool holds there gone
            # First the cheap bound with every unit the node offers: most nodes lack room
            # even then and need no judging (half the judgements of a steady session).
            # Then the judges sieve before any trial, as a unit refused now stays refused
            # once others are gone (they only lower what the victims' queues hold), and
            # the bound is asked again of the units they kept.
            offered: list[tuple[Unit, list[Task]]] = []
            everything: list[Task] = []
            for u in pool.by_node[node]:
                if (
                    u.job is job
                    or u.rank in refused
                    or (queues is not None and u.job.queue not in queues)
                ):
                    continue
                tasks = u.tasks(session)
                if tasks:
                    offered.append((u, tasks))
                    everything.extend(tasks)
            if not offered or not _could_fit(session, pod, node, everything):
                continue
            units: list[Unit] = []
            held: list[Task] = []
            for u, tasks in offered:
                if session.callbacks.victim_ok(job, tasks, reclaim):
                    units.append(u)
                    held.extend(tasks)
                else:
                    refused.add(u.rank)
            if not units or (
                len(units) < len(offered) and not _could_fit(session, pod, node, held)
            ):
                continue
            tried += 1
            most = best.cost[0] if best is not None else None
            choice = _try_node(session, placer, job, task, pod, vec, node, units, reclaim, most)
            if choice is not None and (best is None or choice.cost < best.cost):
                best = choice
    if best is None:
        return False
    for tasks in best.victims:
        for victim in tasks:
            statement.evict(victim, kind, message)
    gpus = placer.fits(pod, best.node)
    assert gpus is not None, "a node freed in trial must fit when freed again"
    statement.allocate(task, best.node, gpus, card, pipeline=True)
    return True


def _may_fit(
    session: Session, pool: VictimPool, pod: PodSpec, node: int, queues: set[int] | None
) -> bool:
    """A cheaper, looser bound than ``_could_fit``: the node's free room plus what every
    pod of the pool's units (of ``queues``) holds there, whether or not its unit may go."""
    state = session.state
    cpu = int(state.cpu_free[node])
    mem = int(state.mem_free[node])
    slots = int(state.max_pods[node] - state.pods[node])
    want = pod.gpu
    gpus: list[int] | None = state.gpu_free[node].tolist() if want.count else None
    for queue, held_cpu, held_mem, milli, held_gpus in pool.held(session, node):
        if queues is not None and queue not in queues:
            continue
        cpu += held_cpu
        mem += held_mem
        slots += 1
        if gpus is not None:
            for g in held_gpus:
                gpus[g] += milli
    return _enough(pod, cpu, mem, slots, gpus)


def _could_fit(session: Session, pod: PodSpec, node: int, victims: list[Task]) -> bool:
    """A cheap bound: the node's free room plus everything ``victims`` (the pods of its
    units) hold on it is enough, GPU by GPU (a whole-GPU pod needs GPUs that would be
    wholly free). A pod listed twice (an extra is in its job's gang unit too) counts once:
    counted twice, its GPU would show more than whole and never wholly free."""
    state = session.state
    cpu = int(state.cpu_free[node])
    mem = int(state.mem_free[node])
    slots = int(state.max_pods[node] - state.pods[node])
    gpus: list[int] = state.gpu_free[node].tolist()
    allocations = state.allocations
    counted: set[str] = set()
    for t in victims:
        key = t.pod.key
        if key in counted:
            continue
        counted.add(key)
        alloc = allocations[key]
        if alloc.node == node:
            cpu += alloc.cpu_milli
            mem += alloc.memory_mib
            slots += 1
            for g in alloc.gpus:
                gpus[g] += alloc.gpu_milli
    return _enough(pod, cpu, mem, slots, gpus)


def _enough(pod: PodSpec, cpu: int, mem: int, slots: int, gpus: list[int] | None) -> bool:
    """Room for ``pod`` in that much CPU, memory, pod slots and free milli per GPU (a
    whole-GPU pod needs GPUs wholly free); ``gpus`` may be None for a pod without GPUs."""
    if cpu < pod.cpu_milli or mem < pod.memory_mib or slots < 1:
        return False
    want = pod.gpu
    if want.count == 0 or gpus is None:
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
    most: int | None,
) -> _Choice | None:
    """The victims that let ``task`` fit ``node``, evicting ``units`` in order; None if
    they do not, or if it would take more than ``most`` victims (the best node's count:
    this node can then no longer beat it)."""
    trial = session.statement()
    victims: list[list[Task]] = []
    ranks: list[int] = []
    fits = False
    count = 0
    for unit in units:
        if most is not None and count >= most:
            break
        tasks = unit.tasks(session)
        # Until the first eviction the state is the one ``units`` were judged and kept on.
        if not tasks or (trial.ops and not session.callbacks.victim_ok(job, tasks, reclaim)):
            continue
        for victim in tasks:
            trial.evict(victim, EvictionKind.PREEMPTED, "")  # undone: the kind is never read
        victims.append(tasks)
        ranks.append(unit.rank)
        count += len(tasks)
        if placer.fits(pod, node) is not None and session.check_allocatable(job, task, vec) is None:
            fits = True
            break
    trial.discard()
    if not fits:
        return None
    return _Choice(node, victims, (count, max(ranks), sum(ranks)))
