"""The one session runner: a snapshot in, plugins and actions named by configuration, data out.

    result = run_session(snapshot, scheduler, SessionConfig(actions=("allocate",)))

The live loop, the simulators and the benchmarks all run sessions through ``run_session``
and read only its :class:`~kgpu.framework.session_result.SessionResult`: binds with their
devices, evictions with their kind, nominations, pending pods with reasons, events, the
queues' figures, the figures of the jobs named in ``report_jobs`` (the live loop's
PodGroups) and how long each step took. No caller holds the live session.

The configuration comes from a profile's ``pluginArgs`` under ``session``::

    pluginArgs:
      session:
        actions: [enqueue, allocate, backfill, reclaim, preempt]
        plugins: [proportion, priority, gang, capacity-card]
      capacity-card: {cardUnlimitedCpuMemory: true}

Actions run in the order given. Plugins are asked in the order given: for victims, list
``proportion`` before ``priority`` so that the most over-served queue gives first.
"""

from __future__ import annotations

import time
from collections.abc import Container, Mapping
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict

from kgpu.actions.allocate import Allocate
from kgpu.actions.backfill import Backfill
from kgpu.actions.enqueue import Enqueue
from kgpu.actions.preempt import Preempt
from kgpu.actions.reclaim import Reclaim
from kgpu.framework.gc_pause import collector_paused
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.framework.session import Action, Session
from kgpu.framework.session_result import SessionResult, job_figures, queue_figures
from kgpu.framework.session_snapshot import Snapshot
from kgpu.framework.topology_config import Topology
from kgpu.model.queue import guarantee_ceilings
from kgpu.plugins import names
from kgpu.plugins.registry import build_session_plugins
from kgpu.plugins.session.proportion import capacity
from kgpu.plugins.session.topology import TopologyPlugin

ACTIONS: Mapping[str, type[Action]] = {
    "enqueue": Enqueue,
    "allocate": Allocate,
    "backfill": Backfill,
    "reclaim": Reclaim,
    "preempt": Preempt,
}
DEFAULT_ACTIONS = ("enqueue", "allocate", "backfill", "reclaim", "preempt")
DEFAULT_PLUGINS = (names.PROPORTION, names.PRIORITY, names.GANG, names.CAPACITY_CARD)


class SessionConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    actions: tuple[str, ...] = DEFAULT_ACTIONS
    plugins: tuple[str, ...] = DEFAULT_PLUGINS
    plugin_args: dict[str, dict[str, Any]] = {}
    # The profile's topology levels; with any, the topology plugin joins every session.
    topology: Topology = Topology()

    def model_post_init(self, context: Any, /) -> None:
        unknown = [a for a in self.actions if a not in ACTIONS]
        if unknown:
            raise ValueError(
                f"unknown session actions {unknown}; known actions: {', '.join(ACTIONS)}"
            )


def topology_problem(profile: Profile) -> str | None:
    """Why the profile's topology levels cannot be used with its filters, if so."""
    if profile.topology.levels and names.NODE_SELECTOR not in profile.filters:
        return (
            f"profile {profile.name!r} declares topology levels but does not list the "
            f"{names.NODE_SELECTOR} filter, which holds a gang's pods to a domain"
        )
    return None


def session_config(profile: Profile) -> SessionConfig:
    """The session part of a profile (its ``pluginArgs.session``), defaults where absent."""
    args = dict(profile.plugin_args.get("session", {}))
    problem = topology_problem(profile)
    if problem is not None:
        raise ValueError(problem)
    return SessionConfig(plugin_args=profile.plugin_args, topology=profile.topology, **args)


def open_session(snapshot: Snapshot, scheduler: Scheduler, config: SessionConfig) -> Session:
    plugins = build_session_plugins(config.plugins, config.plugin_args)
    if config.topology.levels:
        plugins.append(TopologyPlugin(config.topology))
    if any(queue.guarantee for queue in snapshot.queues):
        # Volcano's guarantee is lent to no one: the others' limits leave it free. Only
        # Volcano's Queues have one, so no other session changes (or pays for the sum).
        queues = guarantee_ceilings(snapshot.queues, capacity(snapshot.state))
        snapshot = replace(snapshot, queues=queues)
    return Session(snapshot, scheduler, plugins)


def run_session(
    snapshot: Snapshot,
    scheduler: Scheduler,
    config: SessionConfig | None = None,
    report_jobs: Container[str] = (),
) -> SessionResult:
    """Open a session, run the configured actions in order, close it, and return what it
    decided with the queues' figures and those of the jobs in ``report_jobs``. The cycle
    collector is paused throughout: see ``collector_paused``."""
    config = config or SessionConfig()
    with collector_paused():
        started = time.perf_counter()
        seconds: dict[str, float] = {}
        session = open_session(snapshot, scheduler, config)
        mark = time.perf_counter()
        seconds["open"] = mark - started
        for name in config.actions:
            ACTIONS[name]().execute(session)
            now = time.perf_counter()
            seconds[name], mark = now - mark, now
        result = session.close()
        state = session.state
        result.queues = queue_figures(session.tree, session.ledger, lambda: capacity(state))
        result.jobs = job_figures(session.jobs, result, report_jobs)
        seconds["close"] = time.perf_counter() - mark
        seconds["session"] = time.perf_counter() - started
        result.seconds = seconds
        return result
