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
    levels = topology.domains.levels
    needed = session.callbacks.needed(job)
    target = job.alive + len(needed)
    gpu_free, cpu_free, mem_free = topology.domains.free()
    need = _need(needed)
    measures = [level.sums(gpu_free if need[0] else cpu_free) for level in levels]
    tried = request.levels_to_try(len(levels))
    start = tried[0] if tried else len(levels) - 1
    fill = _fill_order(levels, start, measures)
    tries: list[_Try] = []
    level: LevelDomains | None = None
    for index in tried:
        level = levels[index]
        held = _domains_held(session, job, level)
        if held:
            order = held if len(held) == 1 and held[0] >= 0 else []
            rest: list[int] = []
        else:
            gpu, cpu, mem = level.sums(gpu_free), level.sums(cpu_free), level.sums(mem_free)
            roomy = (gpu >= need[0]) & (cpu >= need[1]) & (mem >= need[2])
            measure = measures[index]
            order = sorted(np.flatnonzero(roomy).tolist(), key=lambda d: (int(measure[d]), d))
            rest = sorted(np.flatnonzero(~roomy).tolist(), key=lambda d: (-int(measure[d]), d))
        tries = []
        for domain in order:
            done = _fill(session, placer, job, domain, _within(levels, start, index, domain, fill))
            if done.kept:
                return True
            tries.append(done)
        if not tries and rest:
            first = rest[0]
            tries.append(
                _fill(session, placer, job, first, _within(levels, start, index, first, fill))
            )
    if request.spreads:
        # No single domain has room: the start level's domains in turn, then any node.
        everywhere = [levels[start].selectors[d] for d in fill] + [()]
        done = _fill(session, placer, job, -1, everywhere)
        if done.kept:
            return True
        if done.why is not None:
            text = (
                f"topology: gang {job.key} fits in no single domain "
                f"({describe(request, topology.levels)}) and across {levels[start].name}s "
                f"{done.held} of its {target} pods fit: {done.why.message}"
            )
            session.note(job, Status(done.why.code, (text,), names.TOPOLOGY, done.why.reason_code))
        return False
    assert level is not None, "a required level is always tried"
    session.note(job, _refusal(job, level, request, topology, tries, target))
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
    tasks = (*job.running, *job.placed)
    return level.holding(a.node for t in tasks if (a := allocations.get(t.pod.key)) is not None)


def _ancestor(levels: Sequence[LevelDomains], start: int, domain: int, index: int) -> int:
    """The domain of level ``index`` (at or above ``start``) holding ``domain`` of ``start``."""
    for at in range(start, index, -1):
        domain = int(levels[at].parent[domain])
    return domain


def _fill_order(levels: Sequence[LevelDomains], start: int, measures: list[IntArray]) -> list[int]:
    """The domains of level ``start``, the roomiest top-level domain's first, and in it the
    roomiest of the next level's first, down to ``start``: filled in this order, a gang
    spans the fewest domains at each level."""

    def key(domain: int) -> tuple[int, ...]:
        out: list[int] = []
        for index in range(start + 1):
            d = _ancestor(levels, start, domain, index)
            out += [-int(measures[index][d]), d]
        return tuple(out)

    return sorted(range(len(levels[start])), key=key) if levels else []


def _within(
    levels: Sequence[LevelDomains], start: int, index: int, domain: int, fill: list[int]
) -> list[Selector]:
    """Where the pods go, in turn, when the gang is tried in ``domain`` of level ``index``:
    the start level's domains inside it in fill order (fewest of them), then the domain
    itself (its nodes without the lower labels)."""
    inside = (
        [d for d in fill if _ancestor(levels, start, d, index) == domain] if index < start else []
    )
    return [levels[start].selectors[d] for d in inside] + [levels[index].selectors[domain]]


def _fill(
    session: Session, placer: Placer, job: JobInfo, domain: int, order: Sequence[Selector]
) -> _Try:
    """Place the gang's pods through one statement, each in the first of ``order`` that
    has room for it from where the last one went; kept only if the gang is then ready."""
    statement = session.statement()
    why: Status | None = None
    at = 0
    for task in list(job.pending):
        if session.callbacks.ready(job):
            break
        while True:
            why = placer.place(statement, job, task, within=order[at])
            if why is None or at == len(order) - 1:
                break
            at += 1  # full for this pod: on to the next domain, never back
        if why is not None:
            break
    held = job.alive
    if session.callbacks.ready(job):
        statement.commit()
        return _Try(domain, True, held, None)
    statement.discard()
    return _Try(domain, False, held, why)


def _pods(count: int) -> str:
    return "its pod" if count == 1 else f"all {count} pods"


def _refusal(
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
