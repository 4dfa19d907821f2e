"""Queue and PodGroup ``status`` after each session, written only when it changed.

Queue status (every Queue object, readable or not):

- ``allocated``, ``deserved``, ``fairShare``: ``cpu``, ``memory`` and ``gpu`` as quantities
  (``"1500m"``, ``"64Gi"``, ``"2"``); allocated counts the pods running and those the session
  just placed, fair share is what the session computed as it opened;
- ``cards``: per card name, whole cards ``deserved``, ``allocated`` (rounded up: half a card
  held counts one), ``request`` (held plus asked, rounded up) and ``capacity`` (the queue's
  card limit, else what the cluster's nodes offer of that card);
- condition ``Valid``: False with the reason when the Queue cannot be used (its jobs wait).

PodGroup status (each PodGroup with pods in the session; a Volcano PodGroup's without
``scheduled``, which Volcano's status has not; a Volcano Queue's status is left to Volcano's
queue controller):

- ``phase``: Running once ``minMember`` pods are bound or placed, Inqueue when admitted but
  not yet placed, Pending otherwise (turned down at enqueue, or invalid);
- ``scheduled``: pods bound or placed; ``running``: pods whose phase is Running;
- conditions ``Scheduled`` (True once the gang is placed) and ``Unschedulable`` (True with
  the reason code and message of the first pod still waiting, while the gang is not placed).

Both are read off the session's result, as data (``SessionResult.queues`` and ``.jobs``,
the figures of the jobs that have a PodGroup object), never off a live session.

The API server is slow, so a status is patched only when it differs from what the cache
shows, and not again while the cache has not caught up with our own write. Only the leader
calls this; a write that fails is logged and tried again next session.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kgpu.framework.session_result import JobFigures, QueueFigures, SessionResult
from kgpu.kube.anchors.volcano import VOLCANO_PODGROUPS
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.event_recorder import now_rfc3339
from kgpu.kube.api.resource_types import PODGROUPS, QUEUES, Resource, meta, resource_version, uid
from kgpu.kube.objects.queue_podgroup import quantity_text
from kgpu.kube.snapshot.session_input import QueueObjects
from kgpu.model.job import JobKey
from kgpu.model.resources import BASE, MILLI, Vector

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
Submit = Callable[[Callable[[], None]], object]


def queue_status(figures: QueueFigures | None, problem: str) -> dict[str, Any]:
    if figures is None:
        valid = {"type": "Valid", "status": "False", "reason": "InvalidQueue", "message": problem}
        return {"conditions": [valid]}

    def quantities(vec: Vector) -> dict[str, str]:
        return {r: quantity_text(r, vec.get(r, 0)) for r in BASE}

    return {
        "allocated": quantities(figures.allocated),
        "deserved": quantities(figures.deserved),
        "fairShare": quantities(figures.fair),
        "cards": {
            name: {
                "deserved": c.deserved // MILLI,
                "allocated": math.ceil(c.allocated / MILLI),
                "request": math.ceil(c.request / MILLI),
                "capacity": c.capacity // MILLI,
            }
            for name, c in figures.cards.items()
        },
        "conditions": [{"type": "Valid", "status": "True", "reason": "Valid", "message": "in use"}],
    }


def podgroup_statuses(jobs: Iterable[JobFigures], pod_phases: Mapping[str, str]) -> dict[str, Any]:
    """Status per job key of ``jobs`` (``pod_phases``: pod key → phase)."""
    out: dict[str, Any] = {}
    for job in jobs:
        scheduled = job.scheduled
        running = sum(1 for key in job.running if pod_phases.get(key) == "Running")
        ready = scheduled >= job.min_member
        if ready:
            phase = "Running"
        elif job.admitted:
            phase = "Inqueue"
        else:
            phase = "Pending"
        text = f"{scheduled} of {job.min_member} pods scheduled"
        conditions = [
            {
                "type": "Scheduled",
                "status": "True" if ready else "False",
                "reason": "Scheduled" if ready else "NotEnoughPods",
                "message": text,
            }
        ]
        first = job.waiting
        if ready or first is None:
            stuck = {"status": "False", "reason": "Scheduled", "message": text}
        else:
            code = first.reason_code or "Unschedulable"
            stuck = {"status": "True", "reason": code, "message": first.message}
        conditions.append({"type": "Unschedulable", **stuck})
        out[job.key] = {
            "phase": phase,
            "scheduled": scheduled,
            "running": running,
            "conditions": conditions,
        }
    return out


def _untimed(status: object) -> object:
    """A status without condition times: what decides whether it changed."""
    if not isinstance(status, Mapping):
        return {}
    out = dict(status)
    conditions = out.get("conditions")
    if isinstance(conditions, list):
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in conditions
            if isinstance(c, Mapping)
        ]
    return out


def _timed(new: Mapping[str, Any], old: object) -> dict[str, Any]:
    """``new`` with each condition's lastTransitionTime: kept from ``old`` when its status
    did not change, now when it did."""
    before = {}
    if isinstance(old, Mapping) and isinstance(old.get("conditions"), list):
        before = {c.get("type"): c for c in old["conditions"] if isinstance(c, Mapping)}
    stamp = now_rfc3339()
    conditions = []
    for condition in new.get("conditions", []):
        was = before.get(condition["type"])
        same = isinstance(was, Mapping) and was.get("status") == condition["status"]
        time = was.get("lastTransitionTime") if same and isinstance(was, Mapping) else None
        conditions.append({**condition, "lastTransitionTime": time or stamp})
    return {**new, "conditions": conditions}


def merge_replacing(old: object, new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that turns ``old`` into ``new``: keys gone from a map are nulled."""
    patch: dict[str, Any] = dict(new)
    if isinstance(old, Mapping):
        for key, value in old.items():
            if key not in new:
                patch[key] = None
            elif isinstance(value, Mapping) and isinstance(new[key], Mapping):
                patch[key] = merge_replacing(value, new[key])
    return patch


class StatusWriter:
    """Patches ``status`` through the status subresource, on ``submit``'s threads."""

    def __init__(self, client: KubeClient, submit: Submit) -> None:
        self.client = client
        self.submit = submit
        self._lock = threading.Lock()
        # uid -> (status written, resourceVersion the cache showed when we wrote it)
        self._written: dict[str, tuple[object, str]] = {}
        self._inflight: set[str] = set()
        self.writes = 0
        self.failures = 0
        # A write failed, or waited for an older one: the next session runs even if idle.
        self.retry = False

    def write(self, result: SessionResult, objects: QueueObjects, pods: Mapping[str, Obj]) -> None:
        """Queue status from ``result.queues``; PodGroup status from ``result.jobs`` (the
        session's figures of the jobs with a PodGroup object: ``report_jobs``)."""
        figures = {f.name: f for f in result.queues}
        for name, obj in objects.queue_objs.items():
            if not _ours(obj):
                continue  # an anchor's Queue: its own controller writes its status
            problem = objects.invalid.get(name, f"Queue {name} is not usable")
            self._maybe(QUEUES, obj, queue_status(figures.get(name), problem))
        groups = objects.podgroup_objs
        # Volcano's PodGroups get their phase as Volcano's scheduler would write it, since
        # Volcano's tools read it; KAI's are left to KAI's.
        jobs = [
            job
            for job in result.jobs
            if job.key in groups and (_ours(groups[job.key]) or job.key in objects.volcano)
        ]
        phases: dict[str, str] = {
            key: _phase(pod)
            for job in jobs
            for key in job.running
            if (pod := pods.get(key)) is not None
        }
        for key, status in podgroup_statuses(jobs, phases).items():
            if key in objects.volcano:
                # Volcano's PodGroupStatus has no "scheduled": its CRD would prune it, and
                # the status would differ from ours, and be written, every session.
                status = {k: v for k, v in status.items() if k != "scheduled"}
                self._maybe(VOLCANO_PODGROUPS, groups[JobKey(key)], status)
                continue
            self._maybe(PODGROUPS, groups[JobKey(key)], status)
        self._forget(
            {uid(o) for o in (*objects.queue_objs.values(), *objects.podgroup_objs.values())}
        )

    def _maybe(self, resource: Resource, obj: Obj, status: dict[str, Any]) -> None:
        key, version = uid(obj), resource_version(obj)
        wanted = _untimed(status)
        if _untimed(obj.get("status")) == wanted:
            with self._lock:
                self._written.pop(key, None)
            return
        with self._lock:
            if key in self._inflight:
                self.retry = True  # an older status is on its way: look again next session
                return
            if self._written.get(key) == (wanted, version):
                return  # ours is written; the cache has not shown it yet
            self._inflight.add(key)
        patch = {"status": merge_replacing(obj.get("status"), _timed(status, obj.get("status")))}
        self.submit(lambda: self._send(resource, obj, patch, wanted))

    def _send(self, resource: Resource, obj: Obj, patch: Mapping[str, Any], wanted: object) -> None:
        m = meta(obj)
        key, version = uid(obj), resource_version(obj)
        namespace = str(m["namespace"]) if m.get("namespace") else None
        try:
            self.client.patch(resource, str(m.get("name")), patch, namespace, "status")
        except KubeError as exc:
            log.warning("%s %s: status not written (tried again next session): %s",
                        resource.kind, m.get("name"), exc)  # fmt: skip
            with self._lock:
                self.failures += 1
                self.retry = True
                self._written.pop(key, None)
                self._inflight.discard(key)
            return
        with self._lock:
            self.writes += 1
            self._written[key] = (wanted, version)
            self._inflight.discard(key)

    def _forget(self, live: set[str]) -> None:
        with self._lock:
            for key in [k for k in self._written if k not in live]:
                del self._written[key]


def _phase(obj: Obj) -> str:
    status = obj.get("status")
    return str(status.get("phase") or "") if isinstance(status, Mapping) else ""


def _ours(obj: Obj) -> bool:
    """Whether kgpu writes the object's status: its own kind (``kgpu.io``), not an anchor's
    (KAI's Queues and PodGroups are read only; their owner writes their status)."""
    version = obj.get("apiVersion")
    return not isinstance(version, str) or version.startswith("kgpu.io/")
