"""The live scheduling loop: sessions over cache snapshots, binds carried out in parallel.

A session (on the loop's thread):

1. snapshot the caches into a fresh ClusterState
   (:mod:`kgpu.kube.snapshot.cache_snapshot`): every bound pod, ours from their
   annotations, plus the pods this scheduler placed whose binding the cache has not shown
   yet (``assumed``); each object is parsed once per resourceVersion
   (:mod:`kgpu.kube.snapshot.conversion_cache`); a pod of ours the kubelet gave other GPUs
   than its annotation names gets its annotation corrected, or the conflict reported
   (:mod:`kgpu.kube.live.allocation_correction`);
2. take up to ``batch_size`` of our pending pods that are not backing off, highest priority
   first, then oldest;
3. run a session over them, in their jobs and queues
   (:mod:`kgpu.kube.snapshot.session_input`), with the profile's actions
   (``pluginArgs.session``; by default enqueue, allocate, backfill, reclaim, preempt):
   the same runner the simulator uses
   (:func:`kgpu.actions.session_runner.run_session`), whose result is all the loop reads;
   where the server serves DRA, over the session's claims too
   (:mod:`kgpu.kube.live.dra_live`: held between the session's pods, counted in queues);
4. hand each bind over (:mod:`kgpu.kube.live.handover`): recorded as assumed first, so the
   next session, which may start while these binds are in flight, counts its resources,
   then bound, ``bind_workers`` at once, their calls carried by the client's call thread
   (:mod:`kgpu.kube.live.binder`); hand each eviction to the loop's pool of threads
   (:mod:`kgpu.kube.live.evictions`);
5. write the Queue and PodGroup status that changed (:mod:`kgpu.kube.live.status_writer`) and
   set the queue metrics. Steps 4 and 5 read only the session's result
   (:mod:`kgpu.kube.live.carry_out`);
6. where the profile turns defragmentation on, move pods so that GPU pods left waiting
   fit (:mod:`kgpu.kube.live.defrag_live`).

A bind that fails releases the reservation (the assumed entry goes) and backs the pod
off exponentially; a pod deleted mid-cycle is released, whether the session sees it gone
before handing the bind over or the API server answers 404. Pods no node fits wait until
the cluster changes (a node or a deletion) or ``unschedulable_retry`` passes
(:mod:`kgpu.kube.live.waiting` keeps who waits, why and until when).

Only the leader schedules, and a bind asks again just before it starts its calls, so a
scheduler that lost its lease with binds queued drops them instead of writing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kgpu.actions.session_runner import run_session, session_config
from kgpu.config import load_profile
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.kube.anchors.koordinator import device_by_node
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.event_recorder import WARNING, EventRecorder
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.resource_types import meta, object_key, resource_version, uid
from kgpu.kube.live.allocation_correction import AllocationCorrector
from kgpu.kube.live.carry_out import Decided, ResultCarrier
from kgpu.kube.live.defrag_live import DefragLive
from kgpu.kube.live.dra_live import DraLive
from kgpu.kube.live.evictions import Evictor
from kgpu.kube.live.gpu_env_writer import GpuEnvWriter
from kgpu.kube.live.gpu_reservations import ReservationKeeper
from kgpu.kube.live.handover import HandOver
from kgpu.kube.live.liveness import Liveness
from kgpu.kube.live.metrics import SchedulerMetrics
from kgpu.kube.live.status_writer import StatusWriter
from kgpu.kube.live.waiting import WaitingBook, WaitTimes
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION
from kgpu.kube.objects.gpu_env import asks_device_plugin
from kgpu.kube.objects.record_signature import RecordKey
from kgpu.kube.objects.reservation_pod import ReservationConfig, is_reservation
from kgpu.kube.snapshot.cache_snapshot import (
    Assumed,
    CacheSnapshot,
    PendingPod,
    Problem,
    SnapshotBuilder,
    pod_fields,
)
from kgpu.kube.snapshot.session_input import QueueObjects, QueueReader, assemble, job_of
from kgpu.model.pod import PodKey
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.state.fragmentation import TypicalPod, typical_pods

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoopConfig:
    scheduler_name: str = "kgpu-scheduler"
    policy: str = "kgpu"
    # Pods decided per session before their binds start, and binds in flight at once: a
    # session's fixed cost (the snapshot, the running tasks) is paid per batch, and a bind
    # spends most of its time waiting for the server (bench/e2e.py, docs/BENCHMARKS.md).
    batch_size: int = 2000
    bind_workers: int = 64  # binds in flight; also the pool for evictions and status writes
    backoff_initial: float = 1.0  # a pod whose bind failed waits this, doubling...
    backoff_max: float = 60.0  # ...up to this
    unschedulable_retry: float = 60.0  # retry an unschedulable pod at least this often
    uncertain_grace: float = 30.0  # how long a bind of unknown outcome keeps its resources
    event_repeat: float = 300.0  # repeat an unchanged FailedScheduling at most this often
    # How often the loop looks at the clock: a session then runs if a pod's wait or back-off
    # ended, a bind of unknown outcome expired or a status write is to be retried; a change
    # of the caches wakes it at once.
    idle_wait: float = 1.0
    # Shares held through reservation pods and given their GPU by a ConfigMap
    # (kgpu.kube.live.gpu_reservations, kgpu.kube.live.gpu_env_writer); None: shares are
    # only accounted, as in a cluster without kgpu's mutating webhook.
    reservations: ReservationConfig | None = None
    # /healthz fails once sessions have failed for this long, or the loop has not come
    # round for this long (kgpu.kube.live.liveness); 0: never.
    liveness_failure_s: float = 300.0


@dataclass(slots=True)
class SessionStats:
    pending: int = 0
    ready: int = 0  # pending and not held back
    decided: int = 0
    binds: int = 0
    unschedulable: int = 0
    unreadable: int = 0
    snapshot_s: float = 0.0
    decide_s: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)


class SchedulerLoop:
    def __init__(
        self,
        client: KubeClient,
        nodes: Informer,
        pods: Informer,
        recorder: EventRecorder,
        metrics: SchedulerMetrics,
        config: LoopConfig | None = None,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        profile: Profile | None = None,
        synced: Callable[[], bool] | None = None,
        devices: Informer | None = None,
        queues: Informer | None = None,
        podgroups: Informer | None = None,
        priority_classes: Informer | None = None,
        record_key: RecordKey | None = None,
        anchor_queues: Sequence[Informer] = (),
        anchor_podgroups: Sequence[Informer] = (),
        koordinator_devices: Informer | None = None,
        dra: DraLive | None = None,
        defrag: DefragLive | None = None,
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.pods = pods
        # Device resources (one per node, from the node agent) give GPU UUIDs, health,
        # NVLink topology and the kubelet's checkpoint of other schedulers' GPUs.
        self.devices = devices
        # Koordinator's Devices (koordlet's): a node's Device where it has no kgpu.io one.
        self.koordinator_devices = koordinator_devices
        self.recorder = recorder
        self.metrics = metrics
        self.config = config or LoopConfig()
        self.is_leader = is_leader
        self.profile = profile or load_profile(self.config.policy)
        self.session_config = session_config(self.profile)
        # Queues and PodGroups (absent without the CRDs: every pod is then in "default").
        self.queues = queues
        self.podgroups = podgroups
        # The anchors' Queues and PodGroups (KAI's, Volcano's), read beside kgpu's own.
        self.anchor_queues = tuple(anchor_queues)
        self.anchor_podgroups = tuple(anchor_podgroups)
        # The PriorityClasses PodGroups name in spec.priorityClassName: their jobs' priority.
        self.priority_classes = priority_classes
        self._queue_reader = QueueReader()
        self._synced = synced or (lambda: nodes.synced.is_set() and pods.synced.is_set())
        shares = self.config.reservations
        # Signs the records kgpu writes on pods and verifies those it reads back
        # (kgpu.kube.objects.record_signature); None only where a test drives the loop alone.
        self._builder = SnapshotBuilder(
            self.config.scheduler_name,
            shares.namespace if shares is not None else None,
            record_key=record_key,
        )
        self._lock = threading.Lock()
        self._assumed: dict[PodKey, Assumed] = {}
        self._reported: dict[tuple[str, str], str] = {}  # (uid, reason) -> version warned
        self._generation = 0
        self._wake = threading.Event()
        self._typical: list[TypicalPod] | None = None
        self._scheduler: Scheduler | None = None
        self._pool = ThreadPoolExecutor(self.config.bind_workers, thread_name_prefix="binder")
        self._status = StatusWriter(client, self._pool.submit)
        self._evictor = Evictor(client, recorder, self._pool.submit, is_leader)
        self._corrector = AllocationCorrector(
            client, recorder, metrics, self._pool.submit, is_leader, record_key
        )
        self._keeper: ReservationKeeper | None = None
        self._env: GpuEnvWriter | None = None
        if shares is not None:
            self._keeper = ReservationKeeper(client, shares, self._pool.submit, is_leader)
            self._env = GpuEnvWriter(
                client,
                recorder,
                self._pool.submit,
                is_leader,
                nodes.get,
                shares.warn_after_s,
                record_key,
            )
        c = self.config
        times = WaitTimes(c.backoff_initial, c.backoff_max, c.unschedulable_retry, c.event_repeat)
        self._book = WaitingBook(times, self._lock, recorder, metrics)
        self._binds = HandOver(
            client,
            pods,
            nodes,
            recorder,
            metrics,
            submit=self._pool.submit,
            is_leader=is_leader,
            lock=self._lock,
            assumed=self._assumed,
            book=self._book,
            wake=self._wake,
            uncertain_grace=c.uncertain_grace,
            record_key=record_key,
            in_flight=c.bind_workers,
        )
        self._carrier = ResultCarrier(
            self._binds, self._book, self._evictor, self._status, recorder, metrics, is_leader
        )
        self.liveness = Liveness(c.liveness_failure_s)
        self._decided_generation = -1  # the cluster generation the last session saw
        # Queue/PodGroup/PriorityClass uid -> what a session reads of it
        self._specs: dict[str, object] = {}
        # Totals, for benchmarks and logs: sessions run and their time.
        self.sessions = 0
        self.snapshot_s = 0.0
        self.decide_s = 0.0
        nodes.on_change = self._node_changed
        pods.on_change = self._pod_changed
        for informer in (queues, podgroups, *self.anchor_queues, *self.anchor_podgroups):
            if informer is not None:
                informer.on_change = self._queue_changed
        if priority_classes is not None:
            priority_classes.on_change = self._priority_class_changed
        for informer in (devices, koordinator_devices):
            if informer is not None:
                informer.on_change = self._node_changed  # health and topology move placements
        # DRA (kgpu.kube.live.dra_live): None where the server serves no resource.k8s.io/v1.
        self._dra = dra
        if dra is not None:
            dra.watch(self._node_changed)  # devices and claims come and go
            self._binds.claims = dra.writer
        # Moves that let waiting GPU pods fit (kgpu.kube.live.defrag_live); None: the
        # profile leaves defragmentation off.
        self._defrag = defrag
        # A session ran since this replica last became leader; and a bound pod of ours
        # changed since the last session (its phase counts in its PodGroup's status).
        self._led = False
        self._bound_changed = False

    # ------------------------------------------------------------------ wake-ups

    def _node_changed(self, kind: str, obj: dict[str, Any]) -> None:
        self._cluster_changed()

    def _pod_changed(self, kind: str, obj: dict[str, Any]) -> None:
        scheduler, node, phase, _ = pod_fields(obj)
        shares = self.config.reservations
        if shares is not None and is_reservation(obj, shares.namespace):
            self._cluster_changed()  # a reservation came, went, or failed: shares move
        elif kind == "DELETED" or (node and phase in ("Succeeded", "Failed")):
            self._cluster_changed()  # room was freed
        elif scheduler == self.config.scheduler_name and node:
            self._bound_changed = True
            if self._keeper is not None and _holds_devices(obj) and not asks_device_plugin(obj):
                # A share bound: its GPU needs a reservation. Not any pod bound without the
                # device plugin: a session for each CPU-only pod bound (half the pods of
                # bench/e2e_vs_kube_scheduler.py) rebuilt the snapshot for nothing.
                self._wake.set()
        elif scheduler == self.config.scheduler_name and not node:
            # A new pod, or one that changed; not one whose bind is in flight (a session
            # for each of those would redo the snapshot for nothing).
            with self._lock:
                ours = PodKey(object_key(obj)) in self._assumed
            if not ours:
                self._wake.set()

    def _queue_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A Queue or PodGroup whose spec or annotations changed; not our status writes,
        which would otherwise start a session each, for nothing."""
        self._read_changed(kind, obj, (obj.get("spec"), meta(obj).get("annotations")))

    def _priority_class_changed(self, kind: str, obj: dict[str, Any]) -> None:
        """A PriorityClass created, deleted or given another value: the jobs whose PodGroup
        names it rank differently."""
        self._read_changed(kind, obj, obj.get("value"))

    def _read_changed(self, kind: str, obj: dict[str, Any], read: object) -> None:
        with self._lock:
            if kind == "DELETED":
                self._specs.pop(uid(obj), None)
            elif self._specs.get(uid(obj)) == read:
                return
            else:
                self._specs[uid(obj)] = read
        self._cluster_changed()

    def _cluster_changed(self) -> None:
        with self._lock:
            self._generation += 1
        self._wake.set()

    # ------------------------------------------------------------------ running

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.liveness.beat()
            woken = self._wake.wait(self.config.idle_wait)
            if woken:
                # Cleared only when it was seen set: a change that sets it just after the
                # wait timed out must start the next session, not be lost. One set before
                # this clear is in the caches the session is about to read.
                self._wake.clear()
            leader = self.is_leader()
            self.metrics.leader.set(1 if leader else 0)
            if not leader or not self._synced():
                self._led = False
                continue
            if not woken and self._led and not self._due(time.monotonic()):
                # Nothing changed and nothing waits on the clock: a session would build the
                # whole snapshot again (most of a second at 10,000 pods) to decide nothing.
                continue
            self._led = True
            try:
                stats = self.run_session()
            except Exception as exc:  # a bug in one session must not stop scheduling for good
                log.exception("scheduling session failed")
                self.liveness.failed(exc)
                stop.wait(1.0)
                continue
            self.liveness.succeeded()
            if stats.ready > stats.decided:
                self._wake.set()  # more pods than one batch: go on at once

    def _due(self, now: float) -> bool:
        """Whether a session is due without any change of the caches: a pod's wait or
        back-off is over, a bind of unknown outcome has expired, a status write failed, a held
        device conflict has waited its grace (kgpu.kube.live.allocation_correction), or
        a bound pod of ours changed while PodGroups (whose status counts its phase) exist."""
        if self._status.retry or self._corrector.due(now):
            return True
        if self._keeper is not None and self._keeper.due(now):
            return True
        if self._env is not None and self._env.due(now):
            return True
        if self._bound_changed and any(
            len(i) for i in (self.podgroups, *self.anchor_podgroups) if i is not None
        ):
            return True
        with self._lock:
            if any(w.retry_at <= now for w in self._book.waiting.values()):
                return True
            return any(a.expires is not None and a.expires <= now for a in self._assumed.values())

    def close(self) -> None:
        self._binds.close()
        self._pool.shutdown(wait=True, cancel_futures=True)

    @property
    def bound(self) -> int:
        """Binds done since the start."""
        return self._binds.bound

    def assumed(self) -> dict[PodKey, Assumed]:
        with self._lock:
            return dict(self._assumed)

    def run_session(self) -> SessionStats:
        started = time.perf_counter()
        now = time.monotonic()
        stats = SessionStats()
        self._bound_changed = False  # before reading the cache: a later change is seen next
        pods = self.pods.items()
        nodes = self.nodes.items()
        by_key = {object_key(p): p for p in pods}
        with self._lock:
            self._prune(by_key, now)
            assumed = dict(self._assumed)
            generation = self._generation
        devices = (
            device_by_node(
                self.devices.items() if self.devices is not None else (),
                self.koordinator_devices.items() if self.koordinator_devices is not None else (),
            )
            if self.devices is not None or self.koordinator_devices is not None
            else None
        )
        snap = self._builder.build(nodes, pods, assumed, devices)
        objects = self._queue_reader.read(
            [
                *(self.queues.items() if self.queues is not None else ()),
                *(o for i in self.anchor_queues for o in i.items()),
            ],
            [
                *(self.podgroups.items() if self.podgroups is not None else ()),
                *(o for i in self.anchor_podgroups for o in i.items()),
            ],
            self.priority_classes.items() if self.priority_classes is not None else (),
        )
        stats.snapshot_s = time.perf_counter() - started
        self._warn(snap.problems)
        self._warn(objects.problems, by_message=True)
        if self._dra is not None:  # claims read, and released where their pods went
            self._warn(self._dra.prepare(snap, pods, by_key, assumed, self.is_leader()))
        self._corrector.act(snap)
        if self._keeper is not None and self._env is not None:
            self._keeper.act(snap, now)
            self._env.act(snap, now)
        ready = self._book.ready(snap, generation, now)
        stats.pending = len(snap.pending) + len(snap.unreadable)
        stats.unreadable = len(snap.unreadable)
        stats.ready = len(ready)
        batch = sorted(ready, key=self._rank(objects))[: self.config.batch_size]
        # With nothing to place, a session still runs after a change (pods gone, a queue
        # edited): queue status and metrics follow what is held.
        if batch or generation != self._decided_generation or self._status.retry:
            self._decided_generation = generation
            self._status.retry = False
            decided = time.perf_counter()
            self._decide(snap, batch, assumed, objects, by_key, generation, now, stats)
            stats.decide_s = time.perf_counter() - decided
        if self._dra is not None:
            self._dra.settle()  # the autoscaler plans with the claims as decided
        stats.reasons = self._book.count(snap, self._assumed)
        self.sessions += 1
        self.snapshot_s += stats.snapshot_s
        self.decide_s += stats.decide_s
        self.metrics.session_latency.observe(time.perf_counter() - started)
        return stats

    # ------------------------------------------------------------------ session steps

    def _prune(self, by_key: Mapping[str, Mapping[str, Any]], now: float) -> None:
        """Forget what the cache has made stale (called with the lock held)."""
        for key, entry in list(self._assumed.items()):
            obj = by_key.get(key)
            if obj is None or uid(obj) != entry.uid:
                del self._assumed[key]  # deleted: nothing to hold any more
            elif pod_fields(obj)[1]:
                del self._assumed[key]  # bound: its annotation accounts for it now
            elif entry.expires is not None and now >= entry.expires:
                log.info(
                    "%s: binding of unknown outcome not seen after %.0fs; rescheduling",
                    key,
                    self.config.uncertain_grace,
                )
                del self._assumed[key]
        self._book.prune(by_key)

    def _decide(
        self,
        snap: CacheSnapshot,
        batch: list[PendingPod],
        assumed: Mapping[PodKey, Assumed],
        objects: QueueObjects,
        by_key: Mapping[str, Mapping[str, Any]],
        generation: int,
        now: float,
        stats: SessionStats,
    ) -> None:
        """Run the session over ``batch`` and carry its decisions out."""
        leaving = self._book.victims_leaving(batch, snap.terminating)
        made = assemble(snap, batch, assumed, objects, victims_leaving=frozenset(leaving))
        scheduler = self._scheduler_for(snap)
        if self._dra is not None:  # DraClaims, when a pending pod asks for claims
            scheduler = self._dra.scheduler(scheduler, self.profile, self._typical)
            # The session holds the claims of the pods it places, so its later pods see
            # their devices taken, and counts DRA GPUs in the queues, running pods' too.
            made.snapshot.dra = self._dra.inventory
        # Only jobs with a PodGroup object get a status: every other pod is a job of its
        # own, and figures for each, every session, were most of the status write's cost.
        groups = objects.podgroup_objs
        result = run_session(made.snapshot, scheduler, self.session_config, groups)
        stats.decided = len(batch)
        decided = Decided(
            snap,
            batch,
            result,
            objects,
            leaving,
            made.blocked,
            made.admitted,
            by_key,
            generation,
            now,
        )
        binds, waits = self._carrier.carry_out(decided)
        if self._defrag is not None:
            self._defrag.after(decided, scheduler)
        stats.binds += binds
        stats.unschedulable += waits

    def _warn(self, problems: list[Problem], *, by_message: bool = False) -> None:
        """Warn once per object version about what could not be read (``by_message``: once
        per message, for Queues and PodGroups, whose versions our status writes advance)."""
        for problem in problems:
            mark = (uid(problem.obj) or object_key(problem.obj), problem.reason)
            version = problem.message if by_message else resource_version(problem.obj)
            if self._reported.get(mark) != version:
                self._reported[mark] = version
                log.warning("%s", problem.message)
                self.recorder.emit(problem.obj, WARNING, problem.reason, problem.message)

    @staticmethod
    def _rank(objects: QueueObjects) -> Callable[[PendingPod], int]:
        """Which pending pods make the batch: the highest priority first, a PodGroup's
        PriorityClass standing for its pods' own (looked up only when some PodGroup names
        one: ``job_of`` reads each pod's annotations)."""
        classes = objects.priorities
        if not classes:
            return lambda p: -p.spec.priority
        return lambda p: -classes.get(job_of(p.spec), p.spec.priority)

    def _scheduler_for(self, snap: CacheSnapshot) -> Scheduler:
        """The profile's scheduler, rebuilt when the workload's typical pods change (FGD
        measures fragmentation against them)."""
        typical = typical_pods(snap.specs)
        if self._scheduler is None or typical != self._typical:
            self._scheduler = build_scheduler(self.profile, PluginContext(typical_pods=typical))
            self._typical = typical
        return self._scheduler


def _holds_devices(obj: Mapping[str, Any]) -> bool:
    """Whether a bound pod of ours carries the record of devices its Binding wrote (every
    bind of a pod that holds GPUs, MIG, RDMA or FPGA devices writes one)."""
    notes = meta(obj).get("annotations")
    return isinstance(notes, Mapping) and ALLOCATION_ANNOTATION in notes
