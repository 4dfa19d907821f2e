"""Victims: which running pods to evict so that a pending pod fits on a node.

Victims come in units, drawn from a pool in victim order (:mod:`kgpu.actions.victim_pool`:
an extra pod of a ready job, or a job's whole gang).

For a pod, each node that holds units is tried: units on it are evicted in order, each
only if the plugins accept it, until the pod fits there (by every filter, and by its
queue's limits). The node needing the fewest victims wins; among equals the one whose
victims come earliest in the order. Nodes are tried in the order of their first unit,
and at most ``MAX_NODES`` of those that could fit at all (of ``MAX_SCANNED`` looked at), as
kube-scheduler samples its preemption candidates: enough for a good choice, bounded on a
large cluster. The search stops early once one victim does and no node further on holds
an earlier unit; once a node was found, a node whose trial could not beat it (see
``_may_win``) still counts as tried but is not tried.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgpu.actions.placement import Option, Placer
from kgpu.actions.victim_pool import Unit, VictimPool
from kgpu.framework.interfaces import FilterPlugin
from kgpu.framework.session import Session
from kgpu.framework.statement import Statement
from kgpu.model.decision import EvictionKind
from kgpu.model.job import JobInfo, Task
from kgpu.model.pod import PodSpec
from kgpu.model.resources import Vector
from kgpu.model.units import MILLI_PER_GPU

MAX_NODES = 8  # nodes tried (trial evictions) per pod
MAX_SCANNED = 24  # nodes whose units are judged per pod


@dataclass(slots=True, init=False)
class _Choice:
    node: int
    units: list[Unit]
    victims: list[list[Task]]  # the pods of each unit
    cost: tuple[int, int, int]
    # The trial that found it, its evictions still in force until the search reads the
    # state again (``undo``), and its nodes' clocks before it.
    trial: Statement | None
    stamps: dict[int, int]

    # Written out, not generated: a generated __init__ is Python even in the compiled build.
    def __init__(
        self,
        node: int,
        units: list[Unit],
        victims: list[list[Task]],
        cost: tuple[int, int, int],
        trial: Statement,
        stamps: dict[int, int],
    ) -> None:
        self.node = node
        self.units = units
        self.victims = victims
        self.cost = cost
        self.trial = trial
        self.stamps = stamps

    def undo(self, session: Session) -> None:
        """Put the trial's victims back, every node as it was (a no-op once done)."""
        trial = self.trial
        if trial is None:
            return
        self.trial = None
        _undo(session, trial, self.stamps)


def _undo(session: Session, trial: Statement, stamps: dict[int, int]) -> None:
    """Discard a trial of victims, whose nodes' clocks were ``stamps`` before it."""
    trial.discard()
    # Every node is as it was: what was worked out of it before stays good. Nothing in the
    # trial brought a shape's cache up to date (``fits`` runs the filters on the node
    # alone), which is what ``restamp`` asks.
    session.state.restamp(stamps)


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
    checks = placer.checks(job, task, card)  # a pod with DRA claims: its queue, node by node
    best: _Choice | None = None
    tried = scanned = 0
    seen: set[int] = set()
    hopeless, state = pool.hopeless(pod, queues), session.state
    # Nodes come in the order of their first unit, found walking the units in order.
    order = pool.order(queues)
    at = 0
    while (first := order.at(at)) is not None:
        at += 1
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
            if best is not None and node in best.stamps:
                best.undo(session)  # its clock is read next
            stamp = state.stamp(node)
            if hopeless.get(node) == stamp:
                continue
            if best is not None:
                best.undo(session)  # the search reads the state as it was from here on
            if not _may_fit(session, pool, pod, node, queues):
                hopeless[node] = stamp
                continue  # not even with every pod the pool holds there gone
            # First the cheap bound with every unit the node offers: most nodes lack room
            # even then and need no judging (half the judgements of a steady session).
            # Then the judges sieve before any trial, as a unit refused now stays refused
            # once others are gone (they only lower what the victims' queues hold), and
            # the bound is asked again of the units they kept.
            offered: list[tuple[Unit, list[Task]]] = []
            everything: list[Task] = []
            for u in pool.on(node):
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
            lead: list[Task] = []  # the pods of the node's first unit kept
            for u, tasks in offered:
                if session.callbacks.victim_ok(job, tasks, reclaim):
                    if not units:
                        lead = tasks
                    units.append(u)
                    held.extend(tasks)
                else:
                    refused.add(u.rank)
            if not units or (
                len(units) < len(offered) and not _could_fit(session, pod, node, held)
            ):
                continue
            tried += 1  # counted whether or not it is tried: the same nodes are reached
            if best is not None and not _may_win(session, pod, node, units[0], lead, best.cost):
                continue
            most = best.cost[0] if best is not None else None
            choice = _try_node(
                session,
                placer,
                job,
                task,
                (pod, vec, checks),
                node,
                units,
                (kind, message),
                most,
            )
            if choice is not None and (best is None or choice.cost < best.cost):
                best = choice
            elif choice is not None:
                choice.undo(session)
    if best is None:
        return False
    trial = best.trial
    if trial is not None:
        # The search ended on the best trial, the state as it left it: its evictions are
        # the ones to make, in the same order and with the same kind and message, so they
        # stand in ``statement`` rather than being undone and made again.
        statement.take(trial)
    else:
        for unit, tasks in zip(best.units, best.victims, strict=True):
            for victim in tasks:
                statement.evict(victim, kind, message, unit.job)
    gpus = placer.fits(pod, best.node, checks)
    assert gpus is not None, "a node freed in trial must fit when freed again"
    statement.allocate(task, best.node, gpus, card, True, job)
    return True


def _may_win(
    session: Session,
    pod: PodSpec,
    node: int,
    lead: Unit,
    tasks: list[Task],
    best: tuple[int, int, int],
) -> bool:
    """Whether a trial on ``node`` could beat the ``best`` cost so far. A trial evicts the
    node's first unit (``lead``, whose pods are ``tasks``) before anything else, as it
    was just judged on the state of the moment, and stops adding units once it holds as
    many victims as the best: a first unit of more victims cannot win, and one of as many
    wins only alone, if it fits by the cheap bound and its rank comes first. (The trials
    skipped would have changed nothing: one is undone whatever it finds.)"""
    count = len(tasks)
    if count < best[0]:
        return True
    if count > best[0]:
        return False
    return (count, lead.rank, lead.rank) < best and _could_fit(session, pod, node, tasks)


def _may_fit(
    session: Session, pool: VictimPool, pod: PodSpec, node: int, queues: set[int] | None
) -> bool:
    """A cheaper, looser bound than ``_could_fit``: the node's free room plus what every
    pod of the pool's units (of ``queues``) holds there, whether or not its unit may go."""
    state = session.state
    cpu, mem, slots = state.room(node)
    gpus: list[int] | None = state.gpu_row(node) if pod.gpu.count else None
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
    cpu, mem, slots = state.room(node)
    gpus: list[int] = state.gpu_row(node)
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
    asked: tuple[PodSpec, Vector, tuple[FilterPlugin, ...]],
    node: int,
    units: list[Unit],
    why: tuple[EvictionKind, str],
    most: int | None,
) -> _Choice | None:
    """The victims that let ``task`` fit ``node``, evicting ``units`` in order; None if
    they do not, or if it would take more than ``most`` victims (the best node's count:
    this node can then no longer beat it). ``asked``: the pod as the option it is tried
    as, its vector and its cycle's added filters (``Placer.checks``); ``why``: the kind
    and message of the evictions. A choice comes with its trial's evictions in force (the
    caller undoes them, or keeps them if the search ends on it); None, with none."""
    pod, vec, checks = asked
    kind, message = why
    reclaim = kind == EvictionKind.RECLAIMED
    trial = session.statement()
    state = session.state
    allocations = state.allocations
    stamps: dict[int, int] = {}  # the victims' nodes' clocks before the trial
    victims: list[list[Task]] = []
    chosen: list[Unit] = []
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
            where = allocations[victim.pod.key].node
            if where not in stamps:
                stamps[where] = state.stamp(where)
            trial.evict(victim, kind, message, unit.job)
        victims.append(tasks)
        chosen.append(unit)
        ranks.append(unit.rank)
        count += len(tasks)
        if (
            placer.fits(pod, node, checks) is not None
            and session.check_allocatable(job, task, vec) is None
        ):
            fits = True
            break
    if not fits:
        _undo(session, trial, stamps)
        return None
    return _Choice(node, chosen, victims, (count, max(ranks), sum(ranks)), trial, stamps)
