"""Pods whose GPUs the kubelet chose otherwise than kgpu's annotation says: corrected, and
reported, once per difference.

The snapshot finds them (:mod:`kgpu.kube.snapshot.kubelet_claims`): a pod of ours whose
entry in its node's Device checkpoint names other GPUs than its ``kgpu.io/device-allocation``
annotation. When kgpu's books had those GPUs free the snapshot already accounts the pod on
them; here its annotations (``kgpu.io/device-allocation`` and ``kgpu.io/visible-devices``)
are rewritten to them, as the Binding would have written them (one merge patch, with the
pod's UID as a precondition), then a Warning event ``DeviceAllocationCorrected`` goes on the
pod and ``kgpu_device_allocation_corrections_total`` counts it. Otherwise (the GPUs are held
by another pod in kgpu's books, unhealthy, or not as many as the pod asks) nothing is
written: a Warning ``DeviceAllocationConflict`` and ``kgpu_device_allocation_conflicts_total``
report it, and the books keep the annotation.

A share (its GPU held by a reservation pod, :mod:`kgpu.kube.snapshot.reservations`) is
corrected the same way when its reservation holds another GPU than it records; the
messages then name the reservation.

Each difference is acted on once: not again while the cache still shows the pod as it was
before the patch, nor while a conflict stays the same. A patch that fails is tried again by
the next session; a pod gone (404) or replaced (409) needs nothing.

A conflict on a node whose checkpoint also names a pod the cache does not have is not
reported at once: that pod may have been created a moment ago (the agent's report reached
kgpu before the pod's watch event), and once the cache shows it, its GPUs may make the
difference a plain correction (two reservations that got each other's GPUs). It is
reported if it still stands after ``UNSEEN_GRACE_S``; the books keep the annotation
meanwhile, as for any conflict.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from kgpu.kube.anchors.koordinator import DEVICE_ALLOCATED_ANNOTATION, device_allocated
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.event_recorder import WARNING, EventRecorder
from kgpu.kube.api.resource_types import PODS, meta, uid
from kgpu.kube.live.metrics import SchedulerMetrics
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, render_allocation
from kgpu.kube.objects.record_signature import SIGNED, RecordKey
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot, Difference
from kgpu.model.pod import PodKey

log = logging.getLogger(__name__)

CORRECTED = "DeviceAllocationCorrected"
CONFLICT = "DeviceAllocationConflict"
# How long a conflict waits for the pods its node's checkpoint names to reach the cache.
UNSEEN_GRACE_S: Final = 10.0

Submit = Callable[[Callable[[], None]], object]
# What was acted on for a pod: its UID, the GPUs its annotation named, those the kubelet
# gave, and whether it was a conflict.
_Mark = tuple[str, tuple[int, ...], tuple[int, ...], bool]


def _gpus(minors: tuple[int, ...]) -> str:
    return ("GPU " if len(minors) == 1 else "GPUs ") + ",".join(map(str, minors))


def _given(d: Difference) -> str:
    if d.reservation:  # a share: the kubelet gave its GPU to the reservation pod
        return f"the kubelet gave this pod's GPU reservation ({d.reservation})"
    return "the kubelet gave this pod"


class AllocationCorrector:
    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        metrics: SchedulerMetrics,
        submit: Submit,
        is_leader: Callable[[], bool],
        record_key: RecordKey | None = None,
    ) -> None:
        self.client = client
        self.record_key = record_key  # signs the corrected records, as the Binding's are
        self.recorder = recorder
        self.metrics = metrics
        self.submit = submit
        self.is_leader = is_leader
        self._lock = threading.Lock()
        self._acted: dict[PodKey, _Mark] = {}
        # Conflicts held back on nodes with pods not in the cache yet: since when.
        self._held: dict[_Mark, float] = {}

    def act(self, snap: CacheSnapshot, clock: float | None = None) -> None:
        """Correct or report each of ``snap``'s differences not acted on yet (``clock``:
        ``time.monotonic`` unless given)."""
        now: dict[PodKey, _Mark] = {}
        todo: list[tuple[Difference, _Mark]] = []
        clock = time.monotonic() if clock is None else clock
        held: dict[_Mark, float] = {}
        for d in snap.differences:
            mark = (uid(d.obj), d.recorded, d.kubelet, bool(d.conflict))
            now[d.key] = mark
            with self._lock:
                reported = self._acted.get(d.key) == mark
            if d.conflict and d.node in snap.unseen_holders and not reported:
                since = self._held.get(mark, clock)
                if clock - since < UNSEEN_GRACE_S:
                    held[mark] = since
                    continue  # not acted on: asked again by the next session
            with self._lock:
                if self._acted.get(d.key) != mark:
                    self._acted[d.key] = mark
                    todo.append((d, mark))
        self._held = held  # a conflict no longer held back starts afresh if it comes back
        with self._lock:  # a difference gone (corrected, resolved, pod gone) is forgotten
            for key in [k for k in self._acted if k not in now]:
                del self._acted[key]
        for d, mark in todo:
            if d.conflict:
                self._report_conflict(d)
            else:
                notes = render_allocation(snap.state, snap.state.allocations[d.key])
                if DEVICE_ALLOCATED_ANNOTATION in (meta(d.obj).get("annotations") or {}):
                    # Koordinator's copy follows kgpu's record, so koordlet sees the same GPUs.
                    notes[DEVICE_ALLOCATED_ANNOTATION] = device_allocated(
                        notes[ALLOCATION_ANNOTATION]
                    )
                if self.record_key is not None:
                    notes = self._signed(d, notes)
                self.submit(partial(self._correct, d, notes, mark))

    def due(self, now: float) -> bool:
        """Whether a conflict held back has waited its grace (a session should report it
        even if nothing else changed); ``now`` from ``time.monotonic``."""
        return any(now - since >= UNSEEN_GRACE_S for since in self._held.values())

    def _signed(self, d: Difference, notes: dict[str, str]) -> dict[str, str]:
        """``notes`` signed with the pod's other records as they stay (its queue)."""
        assert self.record_key is not None
        had = meta(d.obj).get("annotations")
        kept = {k: v for k, v in (had or {}).items() if k in SIGNED and k not in notes}
        return self.record_key.signed(uid(d.obj), d.node, {**kept, **notes})

    def _report_conflict(self, d: Difference) -> None:
        message = (
            f"{_given(d)} {_gpus(d.kubelet)} of node {d.node}, not "
            f"{_gpus(d.recorded)} as annotation {ALLOCATION_ANNOTATION} says, but {d.conflict}; "
            f"kgpu counts {_gpus(d.recorded)} as the pod's until this is resolved"
        )
        log.warning("%s/%s: %s", meta(d.obj).get("namespace"), meta(d.obj).get("name"), message)
        self.recorder.emit(d.obj, WARNING, CONFLICT, message)
        self.metrics.conflicts.labels(d.node).inc()

    def _correct(self, d: Difference, notes: dict[str, str], mark: _Mark) -> None:
        m = meta(d.obj)
        name, namespace = str(m.get("name", "")), str(m.get("namespace") or "default")
        if not self.is_leader():
            self._forget(d.key, mark)
            return
        patch: dict[str, Any] = {"metadata": {"uid": mark[0], "annotations": notes}}
        try:
            self.client.patch(PODS, name, patch, namespace)
        except (NotFound, Conflict):
            return  # gone, or another pod under the name: nothing of this one to correct
        except KubeError as exc:
            log.warning("%s/%s: device annotations not corrected: %s", namespace, name, exc)
            self._forget(d.key, mark)  # the next session tries again
            return
        message = (
            f"{_given(d)} {_gpus(d.kubelet)} of node {d.node}, not "
            f"{_gpus(d.recorded)} as annotation {ALLOCATION_ANNOTATION} said; the annotation "
            f"now names {_gpus(d.kubelet)} and kgpu counts them as the pod's"
        )
        log.info("%s/%s: %s", namespace, name, message)
        self.recorder.emit(d.obj, WARNING, CORRECTED, message)
        self.metrics.corrections.labels(d.node).inc()

    def _forget(self, key: PodKey, mark: _Mark) -> None:
        with self._lock:
            if self._acted.get(key) == mark:
                del self._acted[key]
