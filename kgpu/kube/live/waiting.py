"""Which of our pending pods a session may take, and why the others wait.

A pod waits for one of two reasons:

- ``BackingOff``: its bind failed (409, 5xx, a changed pod); it waits ``backoff_initial``
  seconds, doubling with each failure in a row up to ``backoff_max``, whatever changes.
- Unschedulable (the reason code of the filter that rejected it, ``Preempting`` while its
  victims leave, ``InvalidPodGroup``, ``InvalidRequest``): it waits until the pod itself
  changes (a new resourceVersion), the cluster changes (the loop's generation: a node, a
  deletion, a Queue), or ``unschedulable_retry`` passes, whichever comes first; a pod of a
  PodGroup also until another pod of that PodGroup arrives. A gang is short of pods while
  its controller creates them one by one (Volcano's job controller, a JobSet...): each
  arrival tries the gang again, so the last pod does not wait out the retry.

A preemptor (``Preempting``) is retried like any other pod, but while a pod on the node
it was nominated for is still terminating it may be placed and evict no one
(``victims_leaving``), as kube-scheduler's ``PodEligibleToPreemptOthers`` rules. Its
victims hold their resources until they are gone (a grace period, often 30 s); free to
preempt meanwhile, it would find no room and evict more pods than it needs.

Each wait says why with a FailedScheduling event, repeated while unchanged at most every
``event_repeat`` seconds; the pending-pods gauge counts pods by that reason. The book is
guarded by the loop's lock, which the caller passes in: binds settle pods from the client's
call thread.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kgpu.kube.api.event_recorder import WARNING, EventRecorder
from kgpu.kube.api.resource_types import object_key, resource_version, uid
from kgpu.kube.live.metrics import SchedulerMetrics
from kgpu.kube.objects.queue_podgroup import pod_group_of
from kgpu.kube.snapshot.cache_snapshot import Assumed, CacheSnapshot, PendingPod
from kgpu.model.job import JobKey
from kgpu.model.pod import PodKey

PREEMPTING: Final = "Preempting"


@dataclass(slots=True)
class Waiting:
    """Why a pod is held back, and until when."""

    uid: str
    reason: str
    message: str
    retry_at: float
    version: str = ""  # unschedulable: retried early if the pod changes...
    generation: int = -1  # ...or the cluster does
    attempts: int = 0
    event_at: float = float("-inf")
    node: str = ""  # Preempting: the node its victims are leaving


@dataclass(frozen=True, slots=True)
class WaitTimes:
    backoff_initial: float
    backoff_max: float
    unschedulable_retry: float
    event_repeat: float


class WaitingBook:
    def __init__(
        self,
        times: WaitTimes,
        lock: threading.Lock,
        recorder: EventRecorder,
        metrics: SchedulerMetrics,
    ) -> None:
        self.times = times
        self._lock = lock
        self.recorder = recorder
        self.metrics = metrics
        self.waiting: dict[PodKey, Waiting] = {}
        self._first_seen: dict[PodKey, float] = {}

    def prune(self, live: Mapping[str, object]) -> None:
        """Forget pods gone from the cache (lock held)."""
        for table in (self.waiting, self._first_seen):
            for key in [k for k in table if k not in live]:
                del table[key]

    def ready(self, snap: CacheSnapshot, generation: int, now: float) -> list[PendingPod]:
        """The snapshot's pending pods not held back; says why the unreadable ones wait."""
        ready: list[PendingPod] = []
        held: list[PendingPod] = []
        arrived: set[JobKey] = set()  # PodGroups with a pod not tried before
        for obj, error in snap.unreadable:
            self.unschedulable(obj, "InvalidRequest", str(error), generation, now, count=True)
        with self._lock:
            for pod in snap.pending:
                key = pod.spec.key
                self._first_seen.setdefault(key, now)
                waiting = self.waiting.get(key)
                if held_back(waiting, pod.obj, generation, now):
                    held.append(pod)
                    continue
                ready.append(pod)
                if waiting is None and (group := pod_group_of(pod.spec)):
                    arrived.add(group)
            if arrived:
                ready += [
                    pod
                    for pod in held
                    if self.waiting[pod.spec.key].reason != "BackingOff"
                    and pod_group_of(pod.spec) in arrived
                ]
        return ready

    def victims_leaving(
        self, batch: Sequence[PendingPod], terminating: Collection[str]
    ) -> dict[PodKey, Waiting]:
        """The preemptors of ``batch`` whose nominated node still has a pod terminating,
        with what they wait for."""
        out: dict[PodKey, Waiting] = {}
        with self._lock:
            for pod in batch:
                waiting = self.waiting.get(pod.spec.key)
                if (
                    waiting is not None
                    and waiting.reason == PREEMPTING
                    and waiting.node in terminating
                    and waiting.uid == uid(pod.obj)
                ):
                    out[pod.spec.key] = waiting
        return out

    def unschedulable(
        self,
        obj: Mapping[str, Any],
        reason: str,
        message: str,
        generation: int,
        now: float,
        *,
        count: bool = False,
        node: str = "",
        event_reason: str = "FailedScheduling",
    ) -> None:
        """``event_reason``: the event's reason (a pod of a Volcano queue is told the
        capacity-card plugin's, such as InsufficientScalarQuota)."""
        key = PodKey(object_key(obj))
        version = resource_version(obj)
        with self._lock:
            old = self.waiting.get(key)
            same = old is not None and old.uid == uid(obj) and old.message == message
            if count and same and old is not None and old.version == version:
                return  # an unreadable pod: said once per version is enough
            waiting = Waiting(
                uid(obj),
                reason,
                message,
                now + self.times.unschedulable_retry,
                version,
                generation,
                node=node,
            )
            if same and old is not None:
                waiting.event_at = old.event_at
            speak = now - waiting.event_at >= self.times.event_repeat
            if speak:
                waiting.event_at = now
            self.waiting[key] = waiting
        if count:
            self.metrics.attempts.labels("error").inc()
        if speak:
            self.recorder.emit(obj, WARNING, event_reason, message)

    def back_off(self, key: PodKey, pod_uid: str, message: str, now: float) -> None:
        """Exponential back-off for a pod whose bind failed (lock held)."""
        old = self.waiting.get(key)
        attempts = old.attempts + 1 if old is not None and old.reason == "BackingOff" else 1
        delay = min(self.times.backoff_max, self.times.backoff_initial * 2.0 ** (attempts - 1))
        self.waiting[key] = Waiting(pod_uid, "BackingOff", message, now + delay, attempts=attempts)

    def bound(self, key: PodKey, now: float) -> float | None:
        """The pod is bound: it waits no more; how long it waited since first seen, if
        known (lock held)."""
        self.waiting.pop(key, None)
        first = self._first_seen.pop(key, None)
        return None if first is None else now - first

    def count(self, snap: CacheSnapshot, assumed: Mapping[PodKey, Assumed]) -> dict[str, int]:
        """Pending pods by the reason they wait ("Waiting": not tried yet); the binds in
        flight are not pending. Sets the pending-pods gauge."""
        reasons: dict[str, int] = {}
        with self._lock:
            for pod in [p.obj for p in snap.pending] + [o for o, _ in snap.unreadable]:
                key = PodKey(object_key(pod))
                if key in assumed:
                    continue
                waiting = self.waiting.get(key)
                reason = waiting.reason if waiting is not None else "Waiting"
                reasons[reason] = reasons.get(reason, 0) + 1
        self.metrics.set_pending(reasons)
        return reasons


def held_back(waiting: Waiting | None, obj: Mapping[str, Any], generation: int, now: float) -> bool:
    """A pod backing off after a failed bind waits its time out; an unschedulable one
    waits too, unless it or the cluster changed since."""
    if waiting is None or waiting.uid != uid(obj) or now >= waiting.retry_at:
        return False
    if waiting.reason == "BackingOff":
        return True
    return waiting.version == resource_version(obj) and waiting.generation == generation
