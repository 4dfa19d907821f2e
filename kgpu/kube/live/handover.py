"""A session's binds carried out: reserved as assumed, bound many at once, settled.

Each bind a session decides is checked against the cache once more (a pod deleted, created
again or bound by someone while the session decided is undone in the snapshot and
dropped), recorded as ``Assumed`` so the next session, which may start while the bind is
in flight, counts its resources, and queued. Up to ``in_flight`` binds run at once
(:mod:`kgpu.kube.live.binder`), their calls carried by the client's call thread
(:mod:`kgpu.kube.api.curl_pump`), not a thread each: as one ends, the next queued starts.
A bind whose pod has ResourceClaims writes them first on a thread of the loop's pool (those
writes wait for their answers), and undoes them there if its Binding fails.

How each outcome settles (where the bind's last answer is handled, under the loop's lock):

The Binding carries the device annotations and ``kgpu.io/admitted-queue``, the queue the
session charged the pod to: from its first bound version on, the pod's queue is that one.

- BOUND: the pod waits no more; Scheduled event; the assumed entry stays until the cache
  shows the pod bound (the snapshot then counts it from its annotation);
- UNCERTAIN (a timeout): the entry stays for ``uncertain_grace`` seconds, then goes if the
  cache still shows the pod unbound;
- GONE (404, or another pod under the name): the reservation goes;
- REJECTED: the reservation goes and the pod backs off, with a FailedScheduling event;
  unless it was rejected because this scheduler is no longer the leader: then it is only
  dropped.

Just before its Binding is sent, a bind checks that its node is still in the Node cache:
the API server accepts a Binding to a node that does not exist, and a session that took
long (or a bind queued behind many) may have decided on a node deleted since. Such a bind
is REJECTED without being sent ("node n1 is no longer in the cluster"), and the pod is
scheduled again after its back-off, on the nodes there are.

A released reservation wakes the loop: other pods may fit now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from kgpu.actions.allocate import Bind, undo
from kgpu.kube.anchors.koordinator import koordinator_notes
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.event_recorder import NORMAL, WARNING, EventRecorder
from kgpu.kube.api.in_flight import InFlight
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.resource_types import uid
from kgpu.kube.live.binder import BindOutcome, BindResult, bind_pod
from kgpu.kube.live.dra_claims_writer import ClaimsWriter, Reserved
from kgpu.kube.live.metrics import SchedulerMetrics
from kgpu.kube.live.waiting import WaitingBook
from kgpu.kube.objects.device_allocation import render_allocation
from kgpu.kube.objects.gpu_env import asks_device_plugin
from kgpu.kube.objects.queue_tenancy import ADMITTED_QUEUE_ANNOTATION
from kgpu.kube.objects.record_signature import RecordKey
from kgpu.kube.snapshot.cache_snapshot import Assumed, CacheSnapshot, PendingPod, pod_fields
from kgpu.model.pod import PodKey
from kgpu.state.records import Allocation

log = logging.getLogger(__name__)

Submit = Callable[..., "Future[Any]"]


@dataclass(frozen=True, slots=True)
class _Job:
    """One bind handed over: the pod as the session saw it, where it goes, what it
    writes."""

    obj: Mapping[str, Any]
    bind: Bind
    entry: Assumed
    annotations: Mapping[str, str]
    message: str
    reserved: Reserved | None


class HandOver:
    def __init__(
        self,
        client: KubeClient,
        pods: Informer,
        nodes: Informer,
        recorder: EventRecorder,
        metrics: SchedulerMetrics,
        *,
        submit: Submit,
        is_leader: Callable[[], bool],
        lock: threading.Lock,
        assumed: dict[PodKey, Assumed],
        book: WaitingBook,
        wake: threading.Event,
        uncertain_grace: float,
        record_key: RecordKey | None = None,
        in_flight: int = 64,
    ) -> None:
        self.client = client
        # Signs the records the Binding writes (None: unsigned, for tests of the loop alone).
        self.record_key = record_key
        self.pods = pods
        self.nodes = nodes
        self.recorder = recorder
        self.metrics = metrics
        self._submit = submit
        self.is_leader = is_leader
        self._lock = lock
        self._assumed = assumed  # the loop's: shared, guarded by ``lock``
        self._book = book
        self._wake = wake
        self.uncertain_grace = uncertain_grace
        self.bound = 0  # binds done, for benchmarks and logs
        # DRA: the pods' ResourceClaims, reserved in bind order and written before each
        # Binding (kgpu.kube.live.dra_claims_writer); None where the server serves no DRA.
        self.claims: ClaimsWriter | None = None
        # Binds queued and running (their own lock, not the loop's: a bind settles under
        # that one and then starts the next).
        self._flight: InFlight[_Job] = InFlight(in_flight, self._start)

    def hand_over(
        self,
        snap: CacheSnapshot,
        bind: Bind,
        alloc: Allocation,
        seen: PendingPod,
        message: str,
        queue: str = "",
    ) -> None:
        """Carry out ``bind``, whose pod the session gave ``alloc`` (its devices) in
        ``snap.state`` and charged to ``queue`` (recorded on the pod: its queue is fixed)."""
        current = self.pods.get(bind.pod)
        if current is None or uid(current) != uid(seen.obj) or pod_fields(current)[1]:
            undo(snap.state, bind)  # deleted (or bound by someone) while the session decided
            return
        # GPUs held through reservation pods, not from the device plugin: the next session
        # keeps a reservation for them while the bind is in flight.
        backed = bool(bind.gpus) and not asks_device_plugin(current)
        entry = Assumed(uid(current), seen.spec, bind.node, bind.gpus, backed=backed)
        # Everything the pod holds on its node (GPU minors and memory, MIG, RDMA, FPGA),
        # not only whole or shared GPUs: the node agent reads the devices from here.
        held = alloc.gpus or alloc.rdma or alloc.fpga or alloc.mig_count
        annotations = render_allocation(snap.state, alloc) if held else {}
        # Koordinator's copy for koordlet, for pods that asked in its names; not signed:
        # never read back (kgpu's record above is the truth).
        annotations.update(koordinator_notes(seen.spec, annotations))
        if queue:
            annotations[ADMITTED_QUEUE_ANNOTATION] = queue
        if self.record_key is not None and annotations:
            annotations = self.record_key.signed(uid(current), str(bind.node), annotations)
        reserved: Reserved | None = None
        if self.claims is not None:
            taken = self.claims.reserve(current, snap.state, bind.node)
            if isinstance(taken, str):  # a pod placed before it took the devices
                undo(snap.state, bind)
                refused = BindOutcome(BindResult.REJECTED, taken)
                self._settled(current, bind, entry, refused, message, back_off=True)
                return
            reserved = taken
        with self._lock:
            self._assumed[bind.pod] = entry
        self._flight.add(_Job(current, bind, entry, annotations, message, reserved))

    def close(self, timeout: float = 10.0) -> None:
        """Start no more binds (the queued ones are dropped, their reservations left as
        they are) and wait up to ``timeout`` seconds for those running to settle."""
        self._flight.pause(drop=True)
        self._flight.wait(timeout)

    def _start(self, job: _Job) -> None:
        try:
            self._begin(job)
        except Exception as exc:  # a bug: the bind is not sent, its reservation must go
            log.exception("%s: bind to %s failed to start", job.bind.pod, job.bind.node)
            self._settle(job, BindOutcome(BindResult.REJECTED, repr(exc)), back_off=True)

    def _begin(self, job: _Job) -> None:
        if not self.is_leader():
            outcome = BindOutcome(BindResult.REJECTED, "no longer the leader")
            self._settle(job, outcome, back_off=False)
        elif self.nodes.get(job.bind.node) is None:
            gone = f"node {job.bind.node} is no longer in the cluster: not bound"
            self._settle(job, BindOutcome(BindResult.REJECTED, gone), back_off=True)
        elif job.reserved is not None and self.claims is not None:
            self._submit(self._write_claims, job)  # those writes wait for their answers
        else:
            bind_pod(self.client, job.obj, job.bind.node, job.annotations, self._then(job))

    def _write_claims(self, job: _Job) -> None:
        """The claims' status first, as kube-scheduler's PreBind: a pod is never bound
        without its devices reserved (on a thread of the pool)."""
        assert job.reserved is not None and self.claims is not None
        why = self.claims.write(job.reserved)
        if why is not None:
            self._settle(job, BindOutcome(BindResult.REJECTED, why), back_off=True)
        else:
            bind_pod(self.client, job.obj, job.bind.node, job.annotations, self._then(job))

    def _then(self, job: _Job) -> Callable[[BindOutcome], None]:
        def bound(outcome: BindOutcome) -> None:
            if outcome.check_s:
                self.metrics.check_latency.observe(outcome.check_s)
            if outcome.result != BindResult.REJECTED or outcome.bind_s:
                self.metrics.bind_latency.observe(outcome.bind_s)
            failed = outcome.result in (BindResult.GONE, BindResult.REJECTED)
            if job.reserved is not None and self.claims is not None and failed:
                try:
                    self._submit(self._unreserve, job, outcome)  # calls that wait
                except RuntimeError:  # the pool is shut down (stopping): here, then
                    self._unreserve(job, outcome)
            else:
                self._settle(job, outcome, back_off=True)

        return bound

    def _unreserve(self, job: _Job, outcome: BindOutcome) -> None:
        """Undo the claims of a bind that failed, as kube-scheduler's Unreserve, before the
        pod's reservation goes (on a thread of the pool)."""
        assert job.reserved is not None and self.claims is not None
        self.claims.undo(job.reserved)
        self._settle(job, outcome, back_off=True)

    def _settle(self, job: _Job, outcome: BindOutcome, *, back_off: bool) -> None:
        """Settle the bind (see the module's docstring), then start the next."""
        try:
            self._settled(job.obj, job.bind, job.entry, outcome, job.message, back_off=back_off)
        finally:
            self._flight.finished()

    def _settled(
        self,
        obj: Mapping[str, Any],
        bind: Bind,
        entry: Assumed,
        outcome: BindOutcome,
        message: str,
        *,
        back_off: bool,
    ) -> None:
        key = bind.pod
        now = time.monotonic()
        waited = None
        with self._lock:
            mine = self._assumed.get(key) is entry
            if outcome.result == BindResult.BOUND:
                waited = self._book.bound(key, now)
                self.bound += 1
            elif outcome.result == BindResult.UNCERTAIN:
                if mine:
                    self._assumed[key] = replace(entry, expires=now + self.uncertain_grace)
            else:
                if mine:
                    del self._assumed[key]
                if outcome.result == BindResult.REJECTED and back_off:
                    self._book.back_off(key, uid(obj), outcome.message, now)
        if outcome.result in (BindResult.GONE, BindResult.REJECTED):
            self._wake.set()  # the reservation went: other pods may fit now
        if outcome.result == BindResult.BOUND:
            self.metrics.scheduled.inc()
            if waited is not None:
                self.metrics.pod_latency.observe(waited)
            self.recorder.emit(obj, NORMAL, "Scheduled", message)
        elif outcome.result == BindResult.REJECTED and back_off:
            self.metrics.attempts.labels("error").inc()
            log.info("%s: bind to %s rejected: %s", key, bind.node, outcome.message)
            self.recorder.emit(
                obj, WARNING, "FailedScheduling", f"Binding rejected: {outcome.message}"
            )
        else:
            log.info("%s: bind to %s %s: %s", key, bind.node, outcome.result, outcome.message)
