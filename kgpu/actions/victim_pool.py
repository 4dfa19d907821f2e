"""Victim units and the pools an action draws them from, in victim order.

Victims come in units. An extra pod of a ready job (one it stays ready without) is a unit
of its own; the rest of a job is one unit, its whole gang, because evicting part of a gang
leaves the other part holding resources it cannot use. Units are ordered extras first,
then by the session's victim order (the most over-served queue first for reclaim, the
lowest priority first, the youngest first). Pods younger than their queue's min-runtime
are in no unit. Which units to evict for a pod, and where, is :mod:`kgpu.actions.victims`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from kgpu.framework.session import Session
from kgpu.framework.session_scratch import StateKey
from kgpu.model.job import JobInfo, Task
from kgpu.model.pod import PodSpec


@dataclass(slots=True, init=False)
class Unit:
    job: JobInfo
    task: Task | None  # an extra pod; None: the job's whole gang
    rank: int
    nodes: tuple[int, ...]  # where its pods ran when the pool was made

    # Written out, not generated: a generated __init__ is Python even in the compiled
    # build (mypyc compiles only what the source spells), and pools make tens of thousands.
    def __init__(
        self, job: JobInfo, task: Task | None, rank: int = 0, nodes: tuple[int, ...] = ()
    ) -> None:
        self.job = job
        self.task = task
        self.rank = rank
        self.nodes = nodes

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


class _Plan:
    """A job's victim units as its pods stood when they were worked out.

    Kept in the session's scratch (``PLANS``) for the pools made later in it: reclaim's
    and each queue's in preempt cover mostly the same jobs. A job's pods leave ``running``
    and join ``placed`` only by committed statements (a discarded one puts everything back
    where it was), and pools are made between statements, so the two counts tell whether
    the job is still as it was.
    """

    # Made for most running jobs: slots and an __init__ written out (a NamedTuple's or a
    # dataclass's is Python even in the compiled build), at a fraction of their cost.
    __slots__ = ("extras", "gang", "placed", "running", "youngest")

    def __init__(
        self,
        running: int,
        placed: int,
        youngest: Task | None,
        extras: tuple[_Entry, ...],
        gang: _Entry | None,
    ) -> None:
        self.running = running
        self.placed = placed
        self.youngest = youngest  # what the victim order is asked about; None: no units
        # Made as pools take them, once a job: pools are made up to once a queue a session.
        self.extras = extras
        self.gang = gang


class _Plans:
    """Per job, its victim units as last worked out (each later pool redoes only the jobs
    that changed), and each queue's min-runtime, read once a session: the queue tree is
    plain Python even in the compiled build, and a plan read it twice an attribute."""

    __slots__ = ("by_job", "least")

    def __init__(self, session: Session) -> None:
        self.by_job: dict[str, _Plan] = {}
        self.least: list[float] = [spec.min_runtime_s for spec in session.tree.specs]


PLANS: StateKey[_Plans] = StateKey("victim plans")


def _plan(session: Session, job: JobInfo, least: float) -> _Plan:
    """``job``'s units: its extras (pods it stays ready without), youngest first, that are
    past its queue's min-runtime ``least``, and its whole gang if every pod is."""
    running, placed = job.running, len(job.placed)
    count = len(running)
    now = session.now
    # Each pod's node as the session keeps it beside the job's pods (not a lookup among
    # every pod's allocation: most of a plan's cost, in cache misses, at 50,000 pods).
    nodes = job.running_nodes
    if count == 1:  # most jobs: what the general case below gives for one pod, for less
        only = running[0]
        if now - only.started < least:
            return _Plan(1, placed, None, (), None)
        key = only.pod.key
        where = (nodes[0],)
        extra = (
            ((-only.started, key, job, only, where),)
            if session.callbacks.ready(job, placed)
            else ()
        )
        return _Plan(1, placed, only, extra, (-only.started, key, job, None, where))
    # Asked through the callbacks each time, not a bound method kept: that one would be a
    # generic call in the compiled build.
    callbacks, alive = session.callbacks, count + placed
    spare = 0
    while spare < count and callbacks.ready(job, alive - spare - 1):
        spare += 1
    if not spare:  # most gangs: no extras, only the youngest pod and the nodes matter
        return _gang_plan(session, job, placed, least)
    # The youngest first: by (-started, pod), which are unique, so the indices that follow
    # are never compared.
    order = sorted([(-t.started, t.pod.key, i) for i, t in enumerate(running)])
    # Pods younger than the min-runtime are never victims: a prefix of ``order``, as
    # ``now - started`` only grows as ``started`` falls.
    young = 0
    while young < count and now - running[order[young][2]].started < least:
        young += 1
    if young == count:
        return _Plan(count, placed, None, (), None)
    extras = tuple(
        (started, key, job, running[i], (nodes[i],))
        for started, key, i in order[young : young + spare]
    )
    gang = None
    if not young:
        gang = (order[0][0], order[0][1], job, None, _distinct(nodes))
    return _Plan(count, placed, running[order[0][2]], extras, gang)


def _gang_plan(session: Session, job: JobInfo, placed: int, least: float) -> _Plan:
    """The plan of a job of several pods and no extras: its gang, if every pod is past the
    min-runtime ``least``, else no unit. The youngest pod (the latest start, the least
    pod key among equals: the first by (-started, pod)) is found in one pass, not a sort:
    it alone is past ``least`` only if every pod is."""
    running = job.running
    youngest = running[0]
    started, key = youngest.started, youngest.pod.key
    for task in running:
        if task.started > started or (task.started == started and task.pod.key < key):
            youngest, started, key = task, task.started, task.pod.key
    if session.now - started < least:
        return _Plan(len(running), placed, None, (), None)  # no unit: nothing to judge
    gang = (-started, key, job, None, _distinct(job.running_nodes))
    return _Plan(len(running), placed, youngest, (), gang)


def _distinct(nodes: list[int]) -> tuple[int, ...]:
    """``nodes`` ascending, each once: a gang's pods mostly share a node or two, and a sort
    of a few ints and a pass cost less than a set made for them."""
    ordered = sorted(nodes)
    out = [ordered[0]]
    for node in ordered:
        if node != out[-1]:
            out.append(node)
    return tuple(out)


def _buckets(
    session: Session, jobs: Iterable[JobInfo]
) -> tuple[dict[tuple[object, ...], list[_Entry]], dict[tuple[object, ...], list[_Entry]]]:
    """The units the running pods of ``jobs`` form, by the plugins' key: the extras', and
    the gangs'. (Two tables, not one keyed by (extra?, *key): a tuple less to make and hash
    a job, for the same order, extras first.)"""
    kept = session.scratch.get(PLANS)
    if kept is None:
        kept = _Plans(session)
        session.scratch.set(PLANS, kept)
    plans, least = kept.by_job, kept.least
    callbacks = session.callbacks
    extras: dict[tuple[object, ...], list[_Entry]] = {}
    gangs: dict[tuple[object, ...], list[_Entry]] = {}
    # The head of the job before, and its buckets: jobs come mostly by queue, and next to
    # each other mostly share a head, which compares for less than it hashes into both
    # tables again.
    last: tuple[object, ...] | None = None
    into_extras: list[_Entry] | None = None
    into_gangs: list[_Entry] | None = None
    for job in jobs:
        if job.queue < 0 or not job.running:
            continue
        name = job.spec.key
        plan = plans.get(name)
        if plan is None or plan.running != len(job.running) or plan.placed != len(job.placed):
            plan = plans[name] = _plan(session, job, least[job.queue])
        if plan.youngest is None:
            continue
        # Once a job (plugins judge jobs, not pods), through the callbacks: a bound method
        # kept would be a generic call in the compiled build.
        head = callbacks.victim_head(job, plan.youngest)
        if last is None or head != last:
            last = head
            into_extras = extras.get(head)
            into_gangs = gangs.get(head)
        if plan.extras:
            if into_extras is None:
                into_extras = extras[head] = list(plan.extras)
            else:
                into_extras.extend(plan.extras)
        if plan.gang is not None:
            if into_gangs is None:
                into_gangs = gangs[head] = [plan.gang]
            else:
                into_gangs.append(plan.gang)
    return extras, gangs


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
        extras, gangs = _buckets(session, jobs)
        self.units: list[Unit] = []
        # The units on each node, in victim order (``on``): a list by node, not a table,
        # as a table would box each node's index to look it up, once per unit and node.
        self._by_node: list[list[Unit] | None] = [None] * len(session.state)
        self._by_queue: dict[int, list[Unit]] | None = None  # made when first asked
        # Per node: its clock, and what the pods of the pool's units hold there (``held``).
        self._held: dict[int, tuple[int, list[_Held]]] = {}
        # Per request and victims' queues: the nodes ``_may_fit`` turned down, with their
        # clocks then (``hopeless``).
        self._hopeless: dict[tuple[object, ...], dict[int, int]] = {}
        # Per set of victims' queues, their units in order as far as searches read (``order``).
        self._orders: dict[frozenset[int], Order] = {}
        units, by_node = self.units, self._by_node
        for buckets in (extras, gangs):
            for head in sorted(buckets):
                bucket = buckets[head]
                bucket.sort()  # by (-started, pod): unique, so nothing further is compared
                for entry in bucket:  # read by index: unpacking would box its time again
                    nodes = entry[4]
                    unit = Unit(entry[2], entry[3], len(units), nodes)
                    units.append(unit)
                    for node in nodes:
                        found = by_node[node]
                        if found is None:
                            by_node[node] = [unit]
                        else:
                            found.append(unit)
        self._all = Order(units, [])

    def on(self, node: int) -> list[Unit]:
        """The units whose pods ran on ``node`` when the pool was made, in victim order."""
        found = self._by_node[node]
        return [] if found is None else found

    @property
    def by_queue(self) -> dict[int, list[Unit]]:
        """The units by their job's queue, each list in victim order: made once asked, as
        only reclaim asks (preempt's pools, one a queue, are of one queue each)."""
        if self._by_queue is None:
            by_queue: dict[int, list[Unit]] = {}
            for unit in self.units:
                found = by_queue.get(unit.job.queue)
                if found is None:
                    by_queue[unit.job.queue] = [unit]
                else:
                    found.append(unit)
            self._by_queue = by_queue
        return self._by_queue

    def held(self, session: Session, node: int) -> list[_Held]:
        """What the pods of this pool's units hold on ``node`` now, worked out again only
        once something on the node was allocated or released (its clock moved): a pod's
        searches look at the same first nodes, and most of them find no room there."""
        clock = session.state.stamp(node)
        found = self._held.get(node)
        if found is not None and found[0] == clock:
            return found[1]
        allocations = session.state.allocations
        counted: set[str] = set()  # a pod in two units (an extra, and its job's gang)
        out: list[_Held] = []
        for unit in self.on(node):
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

    def order(self, queues: set[int] | None) -> Order:
        """The units of ``queues`` (all if None), in victim order, as far as read. Kept for
        the pool's life by the set of queues: reclaim's jobs of one queue mostly ask the
        same, and a search reads only the first few units of each."""
        if queues is None:
            return self._all
        key = frozenset(queues)
        found = self._orders.get(key)
        if found is None:
            found = self._orders[key] = Order(
                [], [self.by_queue[q] for q in sorted(queues) if q in self.by_queue]
            )
        return found


class Order:
    """Units of some queues in rank order, merged from each queue's list (in rank order)
    as far as read: ``heapq.merge``'s work, compiled with the rest, and read again by later
    searches for the price of an index (a fresh merge of some ten queues cost more than
    the few units a search reads)."""

    __slots__ = ("_at", "_heap", "_lists", "units")

    def __init__(self, units: list[Unit], lists: list[list[Unit]]) -> None:
        self.units = units  # merged so far
        self._lists = lists
        self._heap = [(found[0].rank, i) for i, found in enumerate(lists) if found]
        heapq.heapify(self._heap)
        self._at = [0] * len(lists)

    def at(self, index: int) -> Unit | None:
        """The unit at ``index`` in rank order (read in turn: at most one past those read
        before), or None past the last."""
        units = self.units
        if index < len(units):
            return units[index]
        heap = self._heap
        if not heap:
            return None
        i = heap[0][1]
        found = self._lists[i]
        here = self._at[i]
        unit = found[here]
        here += 1
        self._at[i] = here
        if here < len(found):
            heapq.heapreplace(heap, (found[here].rank, i))
        else:
            heapq.heappop(heap)
        units.append(unit)
        return unit
