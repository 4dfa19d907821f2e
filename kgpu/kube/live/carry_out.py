"""A session's result carried out against the API server: binds handed over, waiting pods
recorded with their reasons, evictions, PodGroup events, Queue and PodGroup status, and
the queue metrics.

The loop decides (:mod:`kgpu.kube.live.loop`); this module acts on what was decided, from
the result's data alone (:class:`kgpu.framework.session_result.SessionResult`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kgpu.framework.session_result import SessionResult
from kgpu.kube.anchors.volcano import volcano_reason
from kgpu.kube.api.event_recorder import EventRecorder
from kgpu.kube.live.evictions import Evictor, waiting_message
from kgpu.kube.live.handover import HandOver
from kgpu.kube.live.metrics import SchedulerMetrics
from kgpu.kube.live.status_writer import StatusWriter
from kgpu.kube.live.waiting import PREEMPTING, Waiting, WaitingBook
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot, PendingPod
from kgpu.kube.snapshot.session_input import QueueObjects
from kgpu.model.job import JobKey
from kgpu.model.pod import PodKey


@dataclass(frozen=True, slots=True)
class Decided:
    """What one session was asked and answered, as the carrier needs it."""

    snap: CacheSnapshot
    batch: list[PendingPod]
    result: SessionResult
    objects: QueueObjects
    # Preemptors of earlier sessions whose victims are still leaving, by pod.
    leaving: Mapping[PodKey, Waiting]
    # Pods not given to the session (an invalid PodGroup, a queue their namespace may not
    # use), with the reason code and message.
    blocked: Mapping[PodKey, tuple[str, str]]
    admitted: Mapping[PodKey, str]  # the queue each pod of the batch is charged to
    by_key: Mapping[str, Mapping[str, Any]]  # the cache's pods by namespace/name
    generation: int
    now: float


@dataclass(slots=True)
class ResultCarrier:
    binds: HandOver
    book: WaitingBook
    evictor: Evictor
    status: StatusWriter
    recorder: EventRecorder
    metrics: SchedulerMetrics
    is_leader: Callable[[], bool]
    # PodGroup key -> the last warning said of it: an unchanged one is not said again.
    _group_events: dict[str, str] = field(default_factory=dict, init=False)

    def carry_out(self, d: Decided) -> tuple[int, int]:
        """Act on ``d.result``; return the binds handed over and the pods left waiting."""
        result = d.result
        chosen = {p.spec.key: p for p in d.batch}
        said = {e.pod: e.message for e in result.events if e.reason == "Scheduled"}
        for bind in result.binds:
            alloc = result.allocations[bind.pod]
            seen, queue = chosen[bind.pod], d.admitted.get(bind.pod, "")
            self.binds.hand_over(d.snap, bind, alloc, seen, said.get(bind.pod, ""), queue)
        # A preemptor placed nowhere while its victims leave keeps waiting for them.
        waits = [
            (p.pod, PREEMPTING, w.message, w.node)
            if (w := d.leaving.get(p.pod)) is not None
            else (p.pod, p.status.reason_code or "Unschedulable", p.message, "")
            for p in result.pending
        ]
        waits += [
            (n.pod, PREEMPTING, waiting_message(n, result.evictions), n.node)
            for n in result.nominations
        ]
        waits += [(key, code, text, "") for key, (code, text) in d.blocked.items()]
        for key, code, message, node in waits:
            if key in chosen:
                obj = chosen[key].obj
                # Volcano's capacity-card plugin gives a quota refusal its own reason; a pod
                # of a Volcano queue keeps hearing it.
                said_as = (
                    code
                    if volcano_reason(code, d.admitted.get(key, ""), d.objects.volcano)
                    else "FailedScheduling"
                )
                self.book.unschedulable(
                    obj, code, message, d.generation, d.now, node=node, event_reason=said_as
                )
        self.metrics.attempts.labels("unschedulable").inc(len(waits))
        leader = self.is_leader()
        if leader and result.evictions:
            self.evictor.evict(result.evictions, d.by_key.get)
        groups = d.objects.podgroup_objs
        for event in result.events:
            group = groups.get(JobKey(event.pod)) if event.kind == "PodGroup" else None
            if group is not None and self._group_events.get(event.pod) != event.message:
                self._group_events[event.pod] = event.message
                self.recorder.emit(group, event.type, event.reason, event.message)
        if leader:
            self.status.write(result, d.objects, d.by_key)
        self.metrics.set_queues(result.queues)
        return len(result.binds), len(waits)
