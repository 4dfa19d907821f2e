"""Placing a gang that asked for topology: one domain at a time, the tightest first.

The semantics are Kueue's and KAI's topology-aware scheduling (the request is read by
:mod:`kgpu.plugins.session.topology`):

- required level: every pod of the gang in one domain of that level, or none placed. The
  domains are tried best fit first: those whose free room (GPU, CPU, memory, summed over
  their nodes that take pods) covers what the gang still needs, the least free first
  (milli-GPU, or milli-CPU for a gang without GPUs; ties: the domain's path), so that
  large domains stay whole for large gangs. A try places the gang's pods through one
  statement with the pods pinned to the domain (a node selector of the domain's labels,
  which the profile's NodeSelector filter holds them to), kept only if the gang is ready.
- preferred level: the same at that level, then at each level above, up to the required
  one if the gang names both (else the highest); when no single domain has room, the pods
  fill the domains of the preferred level one after another, the roomiest block first and
  in it the roomiest rack first, so the gang spans the fewest domains; nodes outside every
  domain come last.
- a gang with pods already running (a restarted pod) joins their domain, and only it.

A gang that no domain of its required level can hold waits with a reason that names the
level and the domain that came nearest, with how many of the gang's pods it held and what
stopped the next one ("topology: no rack has room for all 8 pods of gang ml/train
(required level rack); nearest rack r3 holds 6 of 8: ..."). When no domain passes the
first test of room, the roomiest is tried all the same, to say how near it comes.

The pods of a ready gang that asked for a required level (an elastic job's extras) stay in
its domain (``extra_within``). Preempt and reclaim do not take room for a gang with a
required level (``holds_to_domain``), as Volcano's network-topology scheduling does not: a
gang places by topology in free room only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from kgpu.actions.placement import Placer
from kgpu.framework.session import Session
from kgpu.framework.status import Code, Status
from kgpu.model.job import JobInfo, Task
from kgpu.model.topology_request import TopologyRequest, describe
from kgpu.plugins import names
from kgpu.plugins.session.topology import TOPOLOGY, SessionTopology
from kgpu.state.cluster import IntArray
from kgpu.state.topology_domains import LevelDomains, Selector

NO_DOMAIN: Final = "NoTopologyDomain"


@dataclass(frozen=True, slots=True)
class _Try:
    """One try of a gang in one domain: whether it was kept, how many of the gang's pods
    held (running ones included) and why the next one did not."""

    domain: int
    kept: bool
    held: int
    why: Status | None


def _asked(session: Session, job: JobInfo) -> tuple[SessionTopology, TopologyRequest] | None:
    topology = session.scratch.get(TOPOLOGY)
    if topology is None:
        return None
    request = topology.requests.get(job.key)
    return None if request is None else (topology, request)


def wants_topology(session: Session, job: JobInfo) -> bool:
    """Did ``job`` ask for topology under a profile that declares levels?"""
    return _asked(session, job) is not None


def holds_to_domain(session: Session, job: JobInfo) -> bool:
    """Must all of ``job`` be in one domain (a required level)?"""
    asked = _asked(session, job)
    return asked is not None and asked[1].required is not None


def extra_within(session: Session, job: JobInfo) -> Selector:
    """The labels that keep a further pod of ready ``job`` in its required domain (none
    when it asked for no required level, or its pods are not all in one domain)."""
    asked = _asked(session, job)
    if asked is None or asked[1].required is None:
        return ()
    level = asked[0].domains.levels[asked[1].required]
    held = _domains_held(session, job, level)
    return level.selectors[held[0]] if len(held) == 1 and held[0] >= 0 else ()


def place_in_domains(session: Session, placer: Placer, job: JobInfo) -> bool:
    """Place pods of ``job`` until it is ready, within one domain as it asked; all or none."""
    asked = _asked(session, job)
    assert asked is not None, "only a job that asked for topology is placed by topology"
    topology, request = asked
    domains = topology.domains
    needed = session.callbacks.needed(job)
    target = job.alive + len(needed)
    gpu_free, cpu_free, mem_free = domains.free()
    need = _need(needed)
    tries: list[_Try] = []
    level: LevelDomains | None = None
    for index in request.levels_to_try(len(domains.levels)):
        level = domains.levels[index]
        room = (level.sums(gpu_free), level.sums(cpu_free), level.sums(mem_free))
        measure = room[0] if need[0] else room[1]
        held = _domains_held(session, job, level)
        if held:
            order = held if len(held) == 1 and held[0] >= 0 else []
            rest: list[int] = []
        else:
            roomy = (room[0] >= need[0]) & (room[1] >= need[1]) & (room[2] >= need[2])
            order = sorted(np.flatnonzero(roomy).tolist(), key=lambda d: (int(measure[d]), d))
            rest = sorted(np.flatnonzero(~roomy).tolist(), key=lambda d: (-int(measure[d]), d))
        tries = []
        for domain in order:
            done = _try(session, placer, job, domain, level.selectors[domain])
            if done.kept:
                return True
            tries.append(done)
        if not tries and rest:
            tries.append(_try(session, placer, job, rest[0], level.selectors[rest[0]]))
    if request.spreads:
        return _spread(session, placer, job, topology, request, target)
    assert level is not None, "a required level is always tried"
    session.note(job, _refusal(session, job, level, request, topology, tries, target))
    return False


def _need(tasks: Sequence[Task]) -> tuple[int, int, int]:
    """Milli-GPU, milli-CPU and MiB the gang still needs."""
    return (
        sum(t.pod.gpu.total_milli for t in tasks),
        sum(t.pod.cpu_milli for t in tasks),
        sum(t.pod.memory_mib for t in tasks),
    )


def _domains_held(session: Session, job: JobInfo, level: LevelDomains) -> list[int]:
    """The domains of ``level`` holding the job's running or placed pods (-1: a node in
    none), sorted; empty when it holds none."""
    allocations = session.state.allocations
    found: set[int] = set()
    for task in (*job.running, *job.placed):
        alloc = allocations.get(task.pod.key)
        if alloc is not None:
            found.add(int(level.of_node[alloc.node]))
    return sorted(found)


def _try(session: Session, placer: Placer, job: JobInfo, domain: int, within: Selector) -> _Try:
    statement = session.statement()
    why: Status | None = None
    for task in list(job.pending):
        if session.callbacks.ready(job):
            break
        why = placer.place(statement, job, task, within=within)
        if why is not None:
            break
    held = job.alive
    if session.callbacks.ready(job):
        statement.commit()
        return _Try(domain, True, held, None)
    statement.discard()
    return _Try(domain, False, held, why)


def _spread_order(topology: SessionTopology, start: int, measures: list[IntArray]) -> list[int]:
    """The domains of level ``start``, the roomiest top-level domain's first, and in it the
    roomiest of the next level's first, down to ``start``: filled in this order, the gang
    spans the fewest domains at each level."""
    levels = topology.domains.levels

    def key(domain: int) -> tuple[int, ...]:
        chain: list[tuple[int, int]] = []  # (level, domain), from ``start`` up to the top
        d = domain
        for index in range(start, -1, -1):
            chain.append((index, d))
            d = int(levels[index].parent[d])
        return tuple(v for index, d in reversed(chain) for v in (-int(measures[index][d]), d))

    return sorted(range(len(levels[start])), key=key)


def _spread(
    session: Session,
    placer: Placer,
    job: JobInfo,
    topology: SessionTopology,
    request: TopologyRequest,
    target: int,
) -> bool:
    """No single domain has room: fill the preferred level's domains in turn, then any node."""
    levels = topology.domains.levels
    start = request.preferred if request.preferred is not None else 0
    gpu_free, cpu_free, _ = topology.domains.free()
    per_node = gpu_free if _need(session.callbacks.needed(job))[0] else cpu_free
    measures = [level.sums(per_node) for level in levels]
    order = [levels[start].selectors[d] for d in _spread_order(topology, start, measures)]
    statement = session.statement()
    why: Status | None = None
    at = 0
    for task in list(job.pending):
        if session.callbacks.ready(job):
            break
        while True:
            within = order[at] if at < len(order) else ()
            why = placer.place(statement, job, task, within=within)
            if why is None or at >= len(order):
                break
            at += 1  # this domain is full for the gang: on to the next
        if why is not None:
            break
    if session.callbacks.ready(job):
        statement.commit()
        return True
    held = job.alive
    statement.discard()
    if why is not None:
        name = levels[start].name
        text = (
            f"topology: gang {job.key} fits in no single domain ({describe(request, topology.levels)}) "
            f"and across {name}s {held} of its {target} pods fit: {why.message}"
        )
        session.note(job, Status(why.code, (text,), names.TOPOLOGY, why.reason_code))
    return False


def _pods(count: int) -> str:
    return "its pod" if count == 1 else f"all {count} pods"


def _refusal(
    session: Session,
    job: JobInfo,
    level: LevelDomains,
    request: TopologyRequest,
    topology: SessionTopology,
    tries: list[_Try],
    target: int,
) -> Status:
    """Why the gang waits: the level that failed, and the domain that came nearest."""
    asked = describe(request, topology.levels)
    name = level.name
    if not len(level):
        text = (
            f"topology: no node has the label {level.label} of level {name}, so no {name} "
            f"can hold gang {job.key} ({asked})"
        )
    elif not tries:
        text = (
            f"topology: the running pods of gang {job.key} are on nodes of more than one "
            f"{name}, or of none, so the others have no {name} to join ({asked})"
        )
    else:
        nearest = max(tries, key=lambda t: t.held)  # the first of equals: the tightest
        text = (
            f"topology: no {name} has room for {_pods(target)} of gang {job.key} ({asked}); "
            f"nearest {name} {level.names[nearest.domain]} holds {nearest.held} of {target}"
        )
        if nearest.why is not None:
            text += f": {nearest.why.message}"
    return Status(Code.UNSCHEDULABLE, (text,), names.TOPOLOGY, NO_DOMAIN)
