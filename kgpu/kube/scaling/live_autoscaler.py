"""The live autoscaler: the trigger controller driven by the API server's objects.

Every ``interval_s`` (or sooner when the controller asks to wake) :class:`Autoscaler`
reads the caches (Pods, Karpenter NodeClaims, Nodes; and Karpenter's NodePools, which
become the pools it plans with: :meth:`Autoscaler.use_nodepools`), hands the controller
(:mod:`kgpu.autoscale.trigger_controller`) what it sees, and carries out what it answers:

- creates trigger pods (:mod:`kgpu.kube.scaling.trigger_pods`); one that already exists (409) was
  created by an earlier attempt and is left as it is: names are derived from the demand,
  so a restarted autoscaler finds its triggers instead of doubling them;
- deletes the triggers whose node is Ready, or which failed. Deleting a trigger frees its
  GPUs on the new node, and the scheduling loop, which retries pending pods whenever a pod
  is deleted or a node joins, places the original pods there at once; ``on_retry`` hears
  which pods those are, for a loop that wants to requeue them itself;
- records an event on each original pod (``TriggeredScaleUp``, ``FailedScaleUp``,
  ``NotTriggerScaleUp``) and keeps the metrics of :class:`AutoscaleMetrics`.

Which pods kgpu failed to place comes from ``pending``: by default, pods of the scheduler
still unbound ``pending_after_s`` after this autoscaler first saw them and not being bound
(the loop's ``assumed``). A scheduling session takes well under a second, so such a pod has
failed at least one. Pods whose request cannot be read are left out: no node helps them.
A pod that asks for GPUs through DRA claims asks for none a node autoscaler sees: with the
loop's inventory (``Autoscaler.dra``, handed over before each round by
:class:`AutoscaleRunner`) its unallocated GPU claims are its demand
(:func:`kgpu.autoscale.demand.with_dra_demand`).

The autoscaler never creates NodeClaims; it only reads them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kgpu.autoscale.demand import UnplacedPod, with_dra_demand
from kgpu.autoscale.observed import Actions, Observed
from kgpu.autoscale.trigger_controller import ControllerConfig, TriggerController
from kgpu.dra.gpu_count import DraGpus
from kgpu.dra.inventory import DraInventory
from kgpu.kube.anchors.karpenter import live_nodepools, observed_node, observed_nodeclaim
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.resource_types import PODS, Resource
from kgpu.kube.objects.node_pod import ConversionError
from kgpu.kube.scaling.trigger_pods import (
    TriggerPodConfig,
    observed_trigger,
    pending_from_k8s,
    render_trigger_pod,
)
from kgpu.model.pod import PodKey

log = logging.getLogger(__name__)

# From a quarter minute to half an hour: GPU nodes take minutes to launch and initialise.
_PROVISION_BUCKETS = (15.0, 30.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 450.0, 600.0, 900.0)


class TriggerApi(Protocol):
    """What the autoscaler asks of the API: :class:`kgpu.kube.api.client.KubeClient` fits."""

    def create(
        self, resource: Resource, obj: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...

    def delete(self, resource: Resource, name: str, namespace: str | None = None) -> None: ...


Emit = Callable[[Mapping[str, Any], str, str, str], None]  # (pod, type, reason, message)


class AutoscaleMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.created = Counter(
            "kgpu_autoscale_trigger_pods_created",
            "Trigger pods created to make the node autoscaler see GPU demand, by NodePool",
            ["pool"],
            registry=r,
        )
        self.active = Gauge(
            "kgpu_autoscale_trigger_pods_active", "Trigger pods waiting for their node", registry=r
        )
        self.duration = Histogram(
            "kgpu_autoscale_provisioning_duration_seconds",
            "From a trigger pod's creation to its node being Ready",
            ["pool"],
            buckets=_PROVISION_BUCKETS,
            registry=r,
        )
        self.outcomes = Counter(
            "kgpu_autoscale_scale_ups",
            "Ended trigger pods: succeeded (node Ready) or failed (launch failure, timeout)",
            ["outcome"],
            registry=r,
        )
        self.success_ratio = Gauge(
            "kgpu_autoscale_scale_up_success_ratio",
            "Succeeded over ended trigger pods since start (1 before any ended)",
            registry=r,
        )
        self.success_ratio.set(1.0)
        for outcome in ("succeeded", "failed"):
            self.outcomes.labels(outcome)

    def record(self, acts: Actions, successes: int, failures: int) -> None:
        for spec in acts.create:
            self.created.labels(spec.group.target.pool or "none").inc()
        for outcome in acts.outcomes:
            if outcome.succeeded:
                self.duration.labels(outcome.pool or "none").observe(outcome.duration_s)
                self.outcomes.labels("succeeded").inc()
            else:
                self.outcomes.labels("failed").inc()
        self.active.set(acts.active)
        if successes + failures:
            self.success_ratio.set(successes / (successes + failures))


@dataclass(frozen=True, slots=True)
class AutoscaleOptions:
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    pods: TriggerPodConfig = field(default_factory=TriggerPodConfig)
    scheduler_name: str = "kgpu-scheduler"
    pending_after_s: float = 5.0
    interval_s: float = 1.0


class Autoscaler:
    """One :meth:`reconcile` per look at the caches; not thread-safe (one caller)."""

    def __init__(
        self,
        api: TriggerApi,
        options: AutoscaleOptions | None = None,
        *,
        emit: Emit | None = None,
        metrics: AutoscaleMetrics | None = None,
        on_retry: Callable[[list[PodKey]], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.options = options or AutoscaleOptions()
        self.controller = TriggerController(self.options.controller)
        self.emit = emit or (lambda obj, type_, reason, message: None)
        self.metrics = metrics or AutoscaleMetrics()
        self.on_retry = on_retry
        self.clock = clock
        self._first_seen: dict[PodKey, float] = {}
        self.last: Actions | None = None  # the latest round's answer, for status and tests
        # The --nodepool files' pools, used where the cluster has no NodePool of the name;
        # their instance types size the live NodePools too.
        planner = self.controller.config.planner
        self._file_pools = planner.pools
        self._known = {t.name: t for p in planner.pools for t in p.instance_types}
        self._warned: dict[str, str] = {}  # NodePool uid or name -> the message warned
        self.refused: dict[str, str] = {}  # NodePool name -> why it is not used, this round
        # The DRA objects and pods' claims as the loop last read them (None: no DRA): a
        # pending pod's GPU claims are GPU demand, which no autoscaler sees on its own.
        self.dra: DraInventory | None = None

    def use_nodepools(self, objs: Sequence[Mapping[str, Any]]) -> None:
        """Plan with the cluster's NodePools (``karpenter.sh/v1`` objects) from now on: each
        replaces the file's pool of its name; one that cannot be read is left out, and a
        Warning says why once per version."""
        pools, refused = live_nodepools(objs, self._known)
        live = {p.name for p in pools}
        chosen = (*pools, *(p for p in self._file_pools if p.name not in live))
        config = self.controller.config
        if chosen != config.planner.pools:
            self.controller.config = replace(config, planner=replace(config.planner, pools=chosen))
        self.refused = {}
        marks = set()
        for obj, message in refused:
            meta = _map(obj, "metadata")
            self.refused[str(meta.get("name") or "")] = message
            mark = str(meta.get("uid") or meta.get("name") or "")
            marks.add(mark)
            if self._warned.get(mark) != message:
                self._warned[mark] = message
                log.warning("%s", message)
                self.emit(obj, "Warning", "InvalidNodePool", message)
        self._warned = {k: v for k, v in self._warned.items() if k in marks}

    def reconcile(
        self,
        pods: Sequence[Mapping[str, Any]],
        claims: Sequence[Mapping[str, Any]] = (),
        nodes: Sequence[Mapping[str, Any]] = (),
        assumed: Collection[str] = (),
    ) -> Actions:
        now = self.clock()
        by_key = {_key(p): p for p in pods}
        namespace = self.options.pods.namespace
        triggers = [
            t for p in pods if _namespace(p) == namespace and (t := observed_trigger(p)) is not None
        ]
        seen = Observed(
            now,
            self._pending(pods, now, assumed),
            triggers,
            [observed_nodeclaim(c) for c in claims],
            [observed_node(n) for n in nodes],
        )
        acts = self.controller.step(seen)
        self.last = acts
        self._apply(acts, by_key)
        self.metrics.record(acts, self.controller.successes, self.controller.failures)
        if acts.retry and self.on_retry is not None:
            self.on_retry(acts.retry)
        return acts

    def _pending(
        self, pods: Sequence[Mapping[str, Any]], now: float, assumed: Collection[str]
    ) -> list[UnplacedPod]:
        out = []
        waiting: set[PodKey] = set()
        for obj in pods:
            spec = _map(obj, "spec")
            if (
                spec.get("schedulerName") != self.options.scheduler_name
                or spec.get("nodeName")
                or _map(obj, "status").get("phase", "Pending") != "Pending"
                or _map(obj, "metadata").get("deletionTimestamp")
            ):
                continue
            key = PodKey(_key(obj))
            if key in assumed:
                continue  # being bound right now
            waiting.add(key)
            first = self._first_seen.setdefault(key, now)
            if now - first < self.options.pending_after_s:
                continue
            try:
                pending = pending_from_k8s(obj)
            except ConversionError:
                continue  # the loop reports it; no node would help
            if self.dra is not None and key in self.dra.pod_claims:
                pending = with_dra_demand(pending, DraGpus(self.dra))
            out.append(pending)
        self._first_seen = {k: v for k, v in self._first_seen.items() if k in waiting}
        return out

    def _apply(self, acts: Actions, pods: Mapping[str, Mapping[str, Any]]) -> None:
        namespace = self.options.pods.namespace
        for name in acts.delete:
            try:
                self.api.delete(PODS, name, namespace)
            except NotFound:
                pass  # gone already: what was asked
            except KubeError as exc:
                # The controller has ended the trigger; the pod goes at its deadline at the
                # latest, and meanwhile holds no demand the controller counts.
                log.warning("trigger pod %s/%s not deleted: %s", namespace, name, exc)
        for spec in acts.create:
            try:
                self.api.create(PODS, render_trigger_pod(spec, self.options.pods), namespace)
            except Conflict:
                pass  # made by an earlier attempt whose answer was lost
            except KubeError as exc:
                log.warning("trigger pod %s/%s not created: %s", namespace, spec.name, exc)
                self.controller.create_failed(spec.name)
        for event in acts.events:
            obj = pods.get(event.pod)
            if obj is not None:
                self.emit(obj, event.type, event.reason, event.message)


class AutoscaleRunner:
    """The autoscaler on its own thread, reading caches that the caller keeps current."""

    def __init__(
        self,
        autoscaler: Autoscaler,
        pods: Callable[[], Sequence[Mapping[str, Any]]],
        claims: Callable[[], Sequence[Mapping[str, Any]]],
        nodes: Callable[[], Sequence[Mapping[str, Any]]],
        assumed: Callable[[], Collection[str]] = lambda: (),
        ready: Callable[[], bool] = lambda: True,
        nodepools: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
        dra: Callable[[], DraInventory | None] | None = None,
    ) -> None:
        self.autoscaler = autoscaler
        self._reads = (pods, claims, nodes, assumed)
        # The DRA objects and pods' claims as the scheduling loop last settled them (None:
        # the server serves no DRA), read before each round.
        self._dra = dra
        # Karpenter's NodePools, read before each round (None: the files' pools only).
        self._nodepools = nodepools
        self._ready = ready
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autoscaler", daemon=True)

    def start(self) -> AutoscaleRunner:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        interval = self.autoscaler.options.interval_s
        pods, claims, nodes, assumed = self._reads
        while not self._stop.is_set():
            wait = interval
            if self._ready():
                try:
                    if self._nodepools is not None:
                        self.autoscaler.use_nodepools(self._nodepools())
                    if self._dra is not None:
                        self.autoscaler.dra = self._dra()
                    acts = self.autoscaler.reconcile(pods(), claims(), nodes(), assumed())
                except Exception:  # a bug in one round must not stop autoscaling for good
                    log.exception("autoscale round failed")
                else:
                    if acts.wake_at is not None:
                        wait = min(interval, max(0.0, acts.wake_at - self.autoscaler.clock()))
            self._stop.wait(wait)


def _map(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(_map(obj, "metadata").get("namespace") or "default")


def _key(obj: Mapping[str, Any]) -> str:
    return f"{_namespace(obj)}/{_map(obj, 'metadata').get('name', '')}"
