"""A whole session from a snapshot: plugins and actions named by configuration.

    result = run_session(snapshot, scheduler, SessionConfig(actions=("allocate",)))

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

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from kgpu.actions.allocate import Allocate
from kgpu.actions.backfill import Backfill
from kgpu.actions.enqueue import Enqueue
from kgpu.actions.preempt import Preempt
from kgpu.actions.reclaim import Reclaim
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.framework.session import Action, Session, SessionResult, Snapshot, collector_paused
from kgpu.plugins import names
from kgpu.plugins.registry import build_session_plugins

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

    def model_post_init(self, context: Any, /) -> None:
        unknown = [a for a in self.actions if a not in ACTIONS]
        if unknown:
            raise ValueError(
                f"unknown session actions {unknown}; known actions: {', '.join(ACTIONS)}"
            )


def session_config(profile: Profile) -> SessionConfig:
    """The session part of a profile (its ``pluginArgs.session``), defaults where absent."""
    args = dict(profile.plugin_args.get("session", {}))
    return SessionConfig(plugin_args=profile.plugin_args, **args)


def open_session(snapshot: Snapshot, scheduler: Scheduler, config: SessionConfig) -> Session:
    plugins = build_session_plugins(config.plugins, config.plugin_args)
    return Session(snapshot, scheduler, plugins)


def run_session(
    snapshot: Snapshot, scheduler: Scheduler, config: SessionConfig | None = None
) -> SessionResult:
    """Open a session, run the configured actions in order, close it (with the cycle
    collector paused throughout: see ``collector_paused``)."""
    config = config or SessionConfig()
    with collector_paused():
        session = open_session(snapshot, scheduler, config)
        for name in config.actions:
            ACTIONS[name]().execute(session)
        return session.close()
