"""The live scheduling loop: sessions over cache snapshots, binds carried out in parallel.

A session (on the loop's thread):

1. snapshot the caches into a fresh ClusterState (:mod:`kgpu.kube.snapshot`): every bound
   pod, ours from their annotations, plus the pods this scheduler placed whose binding
   the cache has not shown yet (``assumed``);
2. take up to ``batch_size`` of our pending pods that are not backing off, highest priority
   first, then oldest;
3. run a session over them, in their jobs and queues (:mod:`kgpu.kube.queue_session`), with
   the profile's actions (``pluginArgs.session``; by default enqueue, allocate, backfill,
   reclaim, preempt): the same core the simulator runs;
4. hand each bind to a pool of binders (:mod:`kgpu.kube.binder`), recording it as assumed
   first, so the next session, which may start while these binds are in flight, counts
   its resources; hand each eviction to the same pool (:mod:`kgpu.kube.evictions`);
5. write the Queue and PodGroup status that changed (:mod:`kgpu.kube.queue_status`) and
   set the queue metrics.

A binder that fails releases the reservation (the assumed entry goes) and backs the pod
off exponentially; a pod deleted mid-cycle is released, whether the session sees it gone
before handing the bind over or the API server answers 404. Pods no node fits wait until
the cluster changes (a node or a deletion) or ``unschedulable_retry`` passes.

Only the leader schedules, and a binder asks again just before it writes anything, so a
scheduler that lost its lease with binds queued drops them instead of writing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from kgpu.actions.allocate import Bind, undo
from kgpu.actions.run import session_config
from kgpu.config import load_profile
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.kube.allocation import render_allocation
from kgpu.kube.binder import BindOutcome, BindResult, bind_pod
from kgpu.kube.client import KubeClient
from kgpu.kube.events import NORMAL, WARNING, EventRecorder
from kgpu.kube.evictions import Evictor, waiting_message
from kgpu.kube.informer import Informer
from kgpu.kube.metrics import SchedulerMetrics
from kgpu.kube.queue_session import QueueObjects, QueueReader, assemble
from kgpu.kube.queue_session import run as run_queue_session
from kgpu.kube.queue_status import StatusWriter, queue_figures
from kgpu.kube.resources import meta, object_key, resource_version, uid
from kgpu.kube.snapshot import Assumed, PendingPod, Problem, Snapshot, SnapshotBuilder, pod_fields
from kgpu.model.job import JobKey
from kgpu.model.pod import PodKey
from kgpu.plugins.fragmentation import TypicalPod, typical_pods
from kgpu.plugins.registry import PluginContext, build_scheduler

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoopConfig:
    scheduler_name: str = "kgpu-scheduler"
    policy: str = "kgpu"
    batch_size: int = 1000  # pods decided per session before their binds start
    bind_workers: int = 16  # binds in flight at once
    backoff_initial: float = 1.0  # a pod whose bind failed waits this, doubling...
    backoff_max: float = 60.0  # ...up to this
    unschedulable_retry: float = 60.0  # retry an unschedulable pod at least this often
    uncertain_grace: float = 30.0  # how long a bind of unknown outcome keeps its resources
    event_repeat: float = 300.0  # repeat an unchanged FailedScheduling at most this often
    idle_wait: float = 1.0  # a session at least this often while there is work


@dataclass(slots=True)
class _Waiting:
    """Why a pod is held back, and until when."""

    uid: str
    reason: str
    message: str
    retry_at: float
    version: str = ""  # unschedulable: retried early if the pod changes...
    generation: int = -1  # ...or the cluster does
    attempts: int = 0
    event_at: float = float("-inf")


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
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.pods = pods
        # Device resources (one per node, from the node agent) give GPU UUIDs, health,
        # NVLink topology and the kubelet's checkpoint of other schedulers' GPUs.
        self.devices = devices
        self.recorder = recorder
        self.metrics = metrics
        self.config = config or LoopConfig()
        self.is_leader = is_leader
        self.profile = profile or load_profile(self.config.policy)
        self.session_config = session_config(self.profile)
        # Queues and PodGroups (absent without the CRDs: every pod is then in "default").
        self.queues = queues
        self.podgroups = podgroups
        self._queue_reader = QueueReader()
        self._synced = synced or (lambda: nodes.synced.is_set() and pods.synced.is_set())
        self._builder = SnapshotBuilder(self.config.scheduler_name)
        self._lock = threading.Lock()
        self._assumed: dict[PodKey, Assumed] = {}
        self._waiting: dict[PodKey, _Waiting] = {}
        self._first_seen: dict[PodKey, float] = {}
        self._reported: dict[tuple[str, str], str] = {}  # (uid, reason) -> version warned
        self._generation = 0
        self._wake = threading.Event()
        self._typical: list[TypicalPod] | None = None
        self._scheduler: Scheduler | None = None
        self._pool = ThreadPoolExecutor(self.config.bind_workers, thread_name_prefix="binder")
        self._status = StatusWriter(client, self._pool.submit)
        self._evictor = Evictor(client, recorder, self._pool.submit, is_leader)
        self._decided_generation = -1  # the cluster generation the last session saw
        self._specs: dict[str, object] = {}  # Queue/PodGroup uid -> what a session reads of it
        self._group_events: dict[str, str] = {}  # PodGroup key -> last warning said
        # Totals, for benchmarks and logs: binds done, sessions run and their time.
        self.bound = 0
        self.sessions = 0
        self.snapshot_s = 0.0
        self.decide_s = 0.0
        nodes.on_change = self._node_changed
        pods.on_change = self._pod_changed
        for informer in (queues, podgroups):
            if informer is not None:
                informer.on_change = self._queue_changed

    # ------------------------------------------------------------------ wake-ups

    def _node_changed(self, kind: str, obj: dict[str, Any]) -> None:
        self._cluster_changed()

    def _pod_changed(self, kind: str, obj: dict[str, Any]) -> None:
        scheduler, node, phase, _ = pod_fields(obj)
        if kind == "DELETED" or (node and phase in ("Succeeded", "Failed")):
            self._cluster_changed()  # room was freed
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
        read = (obj.get("spec"), meta(obj).get("annotations"))
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
            self._wake.wait(self.config.idle_wait)
            self._wake.clear()
            leader = self.is_leader()
            self.metrics.leader.set(1 if leader else 0)
            if not leader or not self._synced():
                continue
            try:
                stats = self.run_session()
            except Exception:  # a bug in one session must not stop scheduling for good
                log.exception("scheduling session failed")
                stop.wait(1.0)
                continue
            if stats.ready > stats.decided:
                self._wake.set()  # more pods than one batch: go on at once

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def assumed(self) -> dict[PodKey, Assumed]:
        with self._lock:
            return dict(self._assumed)

    def run_session(self) -> SessionStats:
        started = time.perf_counter()
        now = time.monotonic()
        stats = SessionStats()
        pods = self.pods.items()
        nodes = self.nodes.items()
        by_key = {object_key(p): p for p in pods}
        with self._lock:
            self._prune(by_key, now)
            assumed = dict(self._assumed)
            generation = self._generation
        devices = (
            {str(d["metadata"]["name"]): d for d in self.devices.items()}
            if self.devices is not None
            else None
        )
        snap = self._builder.build(nodes, pods, assumed, devices)
        objects = self._queue_reader.read(
            self.queues.items() if self.queues is not None else (),
            self.podgroups.items() if self.podgroups is not None else (),
        )
        stats.snapshot_s = time.perf_counter() - started
        self._warn(snap.problems)
        self._warn(objects.problems, by_message=True)
        ready = self._ready(snap, generation, now, stats)
        stats.ready = len(ready)
        batch = sorted(ready, key=lambda p: -p.spec.priority)[: self.config.batch_size]
        # With nothing to place, a session still runs after a change (pods gone, a queue
        # edited): queue status and metrics follow what is held.
        if batch or generation != self._decided_generation or self._status.retry:
            self._decided_generation = generation
            self._status.retry = False
            decided = time.perf_counter()
            self._decide(snap, batch, assumed, objects, by_key, generation, now, stats)
            stats.decide_s = time.perf_counter() - decided
        self._count_pending(snap, stats)
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
        for table in (self._waiting, self._first_seen):
            for key in [k for k in table if k not in by_key]:
                del table[key]

    def _decide(
        self,
        snap: Snapshot,
        batch: list[PendingPod],
        assumed: Mapping[PodKey, Assumed],
        objects: QueueObjects,
        by_key: Mapping[str, Mapping[str, Any]],
        generation: int,
        now: float,
        stats: SessionStats,
    ) -> None:
        """Run the session over ``batch`` and carry its decisions out."""
        made = assemble(snap, batch, assumed, objects)
        scheduler = self._scheduler_for(snap)
        session = run_queue_session(made.snapshot, scheduler, self.session_config)
        result = session.result
        stats.decided = len(batch)
        chosen = {p.spec.key: p for p in batch}
        said = {e.pod: e.message for e in result.events if e.reason == "Scheduled"}
        for bind in result.binds:
            self._hand_over(snap, bind, chosen[bind.pod], said.get(bind.pod, ""))
            stats.binds += 1
        waits = [
            (p.pod, p.status.reason_code or "Unschedulable", p.message) for p in result.pending
        ]
        waits += [
            (n.pod, "Preempting", waiting_message(n, result.evictions)) for n in result.nominations
        ]
        waits += [(key, "InvalidPodGroup", text) for key, text in made.blocked.items()]
        for key, code, message in waits:
            if key in chosen:
                self._unschedulable(chosen[key].obj, code, message, generation, now)
        stats.unschedulable += len(waits)
        self.metrics.attempts.labels("unschedulable").inc(len(waits))
        leader = self.is_leader()
        if leader and result.evictions:
            self._evictor.evict(result.evictions, by_key.get)
        for event in result.events:
            job = JobKey(event.pod)
            group = objects.podgroup_objs.get(job) if event.kind == "PodGroup" else None
            if group is not None and self._group_events.get(event.pod) != event.message:
                self._group_events[event.pod] = event.message
                self.recorder.emit(group, event.type, event.reason, event.message)
        if leader:
            self._status.write(session, objects, by_key)
        self.metrics.set_queues(queue_figures(session))

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

    def _ready(
        self, snap: Snapshot, generation: int, now: float, stats: SessionStats
    ) -> list[PendingPod]:
        ready = []
        for obj, error in snap.unreadable:
            self._unschedulable(obj, "InvalidRequest", str(error), generation, now, count=True)
        with self._lock:
            for pod in snap.pending:
                key = pod.spec.key
                self._first_seen.setdefault(key, now)
                if not self._held_back(self._waiting.get(key), pod.obj, generation, now):
                    ready.append(pod)
        stats.pending = len(snap.pending) + len(snap.unreadable)
        stats.unreadable = len(snap.unreadable)
        return ready

    @staticmethod
    def _held_back(
        waiting: _Waiting | None, obj: Mapping[str, Any], generation: int, now: float
    ) -> bool:
        """A pod backing off after a failed bind waits its time out; an unschedulable one
        waits too, unless it or the cluster changed since."""
        if waiting is None or waiting.uid != uid(obj) or now >= waiting.retry_at:
            return False
        if waiting.reason == "BackingOff":
            return True
        return waiting.version == resource_version(obj) and waiting.generation == generation

    def _scheduler_for(self, snap: Snapshot) -> Scheduler:
        """The profile's scheduler, rebuilt when the workload's typical pods change (FGD
        measures fragmentation against them)."""
        typical = typical_pods(snap.specs)
        if self._scheduler is None or typical != self._typical:
            self._scheduler = build_scheduler(self.profile, PluginContext(typical_pods=typical))
            self._typical = typical
        return self._scheduler

    def _hand_over(self, snap: Snapshot, bind: Bind, seen: PendingPod, message: str) -> None:
        current = self.pods.get(bind.pod)
        if current is None or uid(current) != uid(seen.obj) or pod_fields(current)[1]:
            undo(snap.state, bind)  # deleted (or bound by someone) while the session decided
            return
        entry = Assumed(uid(current), seen.spec, bind.node, bind.gpus)
        alloc = snap.state.allocations[bind.pod]
        # Everything the pod holds on its node (GPU minors and memory, MIG, RDMA, FPGA),
        # not only whole or shared GPUs: the node agent reads the devices from here.
        held = alloc.gpus or alloc.rdma or alloc.fpga or alloc.mig_count
        annotations = render_allocation(snap.state, alloc) if held else {}
        with self._lock:
            self._assumed[bind.pod] = entry
        self._pool.submit(self._bind, current, bind, entry, annotations, message)

    def _unschedulable(
        self,
        obj: Mapping[str, Any],
        reason: str,
        message: str,
        generation: int,
        now: float,
        *,
        count: bool = False,
    ) -> None:
        key = PodKey(object_key(obj))
        version = resource_version(obj)
        with self._lock:
            old = self._waiting.get(key)
            same = old is not None and old.uid == uid(obj) and old.message == message
            if count and same and old is not None and old.version == version:
                return  # an unreadable pod: said once per version is enough
            waiting = _Waiting(
                uid(obj),
                reason,
                message,
                now + self.config.unschedulable_retry,
                version,
                generation,
            )
            if same and old is not None:
                waiting.event_at = old.event_at
            speak = now - waiting.event_at >= self.config.event_repeat
            if speak:
                waiting.event_at = now
            self._waiting[key] = waiting
        if count:
            self.metrics.attempts.labels("error").inc()
        if speak:
            self.recorder.emit(obj, WARNING, "FailedScheduling", message)

    def _count_pending(self, snap: Snapshot, stats: SessionStats) -> None:
        reasons: dict[str, int] = {}
        with self._lock:
            for pod in [p.obj for p in snap.pending] + [o for o, _ in snap.unreadable]:
                key = PodKey(object_key(pod))
                if key in self._assumed:
                    continue
                waiting = self._waiting.get(key)
                reason = waiting.reason if waiting is not None else "Waiting"
                reasons[reason] = reasons.get(reason, 0) + 1
        stats.reasons = reasons
        self.metrics.set_pending(reasons)

    # ------------------------------------------------------------------ binders

    def _bind(
        self,
        obj: Mapping[str, Any],
        bind: Bind,
        entry: Assumed,
        annotations: Mapping[str, str],
        message: str,
    ) -> None:
        if not self.is_leader():
            outcome = BindOutcome(BindResult.REJECTED, "no longer the leader")
            self._settle(obj, bind, entry, outcome, message, back_off=False)
            return
        outcome = bind_pod(self.client, obj, bind.node, annotations)
        if outcome.check_s:
            self.metrics.attempt_latency.labels("check").observe(outcome.check_s)
        if outcome.result != BindResult.REJECTED or outcome.bind_s:
            self.metrics.attempt_latency.labels("bind").observe(outcome.bind_s)
        self._settle(obj, bind, entry, outcome, message, back_off=True)

    def _settle(
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
                self._waiting.pop(key, None)
                first = self._first_seen.pop(key, None)
                waited = None if first is None else now - first
                self.bound += 1
            elif outcome.result == BindResult.UNCERTAIN:
                if mine:
                    self._assumed[key] = replace(entry, expires=now + self.config.uncertain_grace)
            else:
                if mine:
                    del self._assumed[key]
                if outcome.result == BindResult.REJECTED and back_off:
                    self._back_off(key, uid(obj), outcome.message, now)
        if outcome.result in (BindResult.GONE, BindResult.REJECTED):
            self._wake.set()  # the reservation went: other pods may fit now
        if outcome.result == BindResult.BOUND:
            self.metrics.attempts.labels("scheduled").inc()
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

    def _back_off(self, key: PodKey, pod_uid: str, message: str, now: float) -> None:
        """Exponential back-off for a pod whose bind failed (lock held)."""
        old = self._waiting.get(key)
        attempts = old.attempts + 1 if old is not None and old.reason == "BackingOff" else 1
        delay = min(self.config.backoff_max, self.config.backoff_initial * 2.0 ** (attempts - 1))
        waiting = _Waiting(pod_uid, "BackingOff", message, now + delay, attempts=attempts)
        self._waiting[key] = waiting
