"""What the live loop's session would say of one pending pod, for ``kgpu explain``.

The tiers of an explanation look at the pod alone; the loop places it in a session, with
its PodGroup, its gang and its queue (kgpu's, KAI's or Volcano's). So that explain never
contradicts the loop, the pod's summary is the session's verdict, in the words of the
event the loop puts on the pod: the same Queues and PodGroups read
(:class:`~kgpu.kube.snapshot.session_input.QueueReader`), the same input
(:func:`~kgpu.kube.snapshot.session_input.assemble`) over every pending pod of the
scheduler, as the loop's batch, and the same session runner and profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.actions.session_runner import run_session, session_config
from kgpu.dra.inventory import DraInventory
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot
from kgpu.kube.snapshot.session_input import QueueObjects, QueueReader, assemble
from kgpu.model.pod import PodKey

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class GroupObjects:
    """The objects a session reads beside Nodes and Pods, as listed (any may be empty):
    the Queues and PodGroups of every group the scheduler reads (kgpu's, KAI's, Volcano's)."""

    queues: Iterable[Obj] = ()
    podgroups: Iterable[Obj] = ()
    priority_classes: Iterable[Obj] = ()

    def read(self) -> QueueObjects:
        return QueueReader().read(self.queues, self.podgroups, self.priority_classes)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``node`` where the session places the pod (``nominated``: once its victims are
    gone), else ``message``: why it waits, as its event says."""

    node: str = ""
    nominated: bool = False
    message: str = ""


def session_verdict(
    snap: CacheSnapshot,
    pod: PodKey,
    scheduler: Scheduler,
    profile: Profile,
    objects: QueueObjects,
    dra: DraInventory | None = None,
) -> Verdict | None:
    """The session's verdict on pending ``pod`` (None if it is not among the scheduler's
    pending pods). Runs over ``snap.state`` (and ``dra``, the DRA objects), which keep the
    session's binds and claims: call it last."""
    batch = [p for p in snap.pending if p.spec.key == pod] + [
        p for p in snap.pending if p.spec.key != pod
    ]
    if not batch or batch[0].spec.key != pod:
        return None
    made = assemble(snap, batch, {}, objects)
    made.snapshot.dra = dra
    if pod in made.blocked:
        return Verdict(message=made.blocked[pod][1])
    result = run_session(made.snapshot, scheduler, session_config(profile))
    for bind in result.binds:
        if bind.pod == pod:
            return Verdict(node=str(bind.node))
    for nomination in result.nominations:
        if nomination.pod == pod:
            return Verdict(node=str(nomination.node), nominated=True)
    for pending in result.pending:
        if pending.pod == pod:
            return Verdict(message=pending.message)
    return None
