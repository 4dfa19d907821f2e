"""Carrying out a session's evictions: the victim pods are deleted, each with an event.

Preempt (inside a queue) and reclaim (across queues) decide victims as data
(:class:`kgpu.model.decision.Evict`); here each victim pod is deleted through the API, with
its uid as a precondition so that a pod deleted and created again under the same name is
never the one removed, and a Warning event (reason ``Preempted`` or ``Reclaimed``, the
message naming the preemptor and its queue) is recorded on it first.

Only the leader deletes, and it asks again just before each call, as binders do. A victim
already gone (404) or replaced (409) is fine: it no longer holds what it held. Any other
failure is logged; the session after the next cluster change decides again.

The pods the victims make room for (the session's nominations) are not bound now: they
wait until the cluster changes (a victim's deletion is such a change) and are then placed
by the session like any other pod.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.event_recorder import WARNING, EventRecorder
from kgpu.kube.api.resource_types import PODS, meta, uid
from kgpu.model.decision import Evict, Nomination

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
Submit = Callable[[Callable[[], None]], object]


def delete_options(pod: Obj) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid(pod)}}


def waiting_message(nomination: Nomination, evictions: Sequence[Evict]) -> str:
    """What a nominated pod waits for: its victims on its node to go."""
    victims = sorted(e.pod for e in evictions if e.node == nomination.node)
    shown = ", ".join(victims[:5]) + (f" and {len(victims) - 5} more" if len(victims) > 5 else "")
    return f"waiting for {len(victims)} pod(s) to leave node {nomination.node}: {shown}"


class Evictor:
    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        submit: Submit,
        is_leader: Callable[[], bool],
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.submit = submit
        self.is_leader = is_leader
        self.deleted = 0

    def evict(self, evictions: Sequence[Evict], pods: Callable[[str], Obj | None]) -> int:
        """Hand each victim's deletion to ``submit``; how many were handed over."""
        handed = 0
        for evict in evictions:
            obj = pods(evict.pod)
            if obj is None:
                continue  # gone already
            self.submit(partial(self._delete, obj, evict))
            handed += 1
        return handed

    def _delete(self, obj: Obj, evict: Evict) -> None:
        if not self.is_leader():
            log.info("%s: not evicted, no longer the leader", evict.pod)
            return
        m = meta(obj)
        namespace, name = str(m.get("namespace") or "default"), str(m.get("name"))
        self.recorder.emit(obj, WARNING, evict.reason, evict.message)
        try:
            self.client.request("DELETE", PODS.path(namespace, name), body=delete_options(obj))
        except (NotFound, Conflict):
            return  # gone, or replaced by a pod of the same name: nothing to take back
        except KubeError as exc:
            log.warning("%s: eviction (%s) failed: %s", evict.pod, evict.message, exc)
            return
        self.deleted += 1
        log.info("%s: %s", evict.pod, evict.message)
