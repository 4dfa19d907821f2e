"""``kgpu run``: the live scheduler, assembled from the edge's parts.

Start order matters for the promise that a restarted scheduler rebuilds its allocations
before binding anything new: the informers start first, and the loop runs its first
session only once every cache (Nodes, Pods, PriorityClasses, and the kgpu.io custom
resources, absent or not) has listed; every bound pod's annotation is then in the snapshot.

With ``RunOptions.autoscale`` set (``kgpu run --autoscale``), Karpenter's NodeClaims and
NodePools are cached too (a cluster without Karpenter reads as none) and the autoscaler
(:mod:`kgpu.kube.scaling.live_autoscaler`) runs on its own thread, on the leader only, once
the caches have synced; it installs the trigger pods' PriorityClass before its first round.

The Workspace controller (:mod:`kgpu.kube.workspaces.runner`) runs on its own thread too, on
the leader only, once the Node cache has listed; ``RunOptions.workspaces`` None turns it off.

``RunOptions.companions`` start before everything else, with the scheduler's client, and stop
after it: ``kgpu run --serve-webhook`` serves and registers the admission webhook that way
(:mod:`kgpu.cli.workstation`), since this layer knows nothing of the webhook. A companion
that fails to start fails the start.
"""

from __future__ import annotations

import gc
import logging
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from kgpu.config import load_profile
from kgpu.dra.inventory import DraInventory
from kgpu.kube.anchors.karpenter import NODECLAIMS, NODEPOOLS
from kgpu.kube.anchors.koordinator import KOORDINATOR_DEVICES
from kgpu.kube.anchors.volcano import VOLCANO_PODGROUPS, VOLCANO_QUEUES
from kgpu.kube.api.client import KubeClient, Timeouts, load_configuration
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.event_recorder import EventRecorder
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.leader_election import LeaderElector, LeaseTiming
from kgpu.kube.api.resource_types import (
    CUSTOM_RESOURCES,
    DEVICES,
    KAI_PODGROUPS,
    KAI_QUEUES,
    NODES,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
)
from kgpu.kube.live.defrag_evictions import DefragMetrics
from kgpu.kube.live.defrag_live import DefragLive, budget_resource
from kgpu.kube.live.dra_live import DraLive, serves_dra
from kgpu.kube.live.health_server import HealthServer
from kgpu.kube.live.loop import LoopConfig, SchedulerLoop
from kgpu.kube.live.metrics import SchedulerMetrics
from kgpu.kube.live.record_key import default_secret, ensure_key
from kgpu.kube.scaling.live_autoscaler import (
    AutoscaleMetrics,
    AutoscaleOptions,
    Autoscaler,
    AutoscaleRunner,
)
from kgpu.kube.scaling.trigger_pods import render_priority_class
from kgpu.kube.workspaces.runner import WorkspaceRunner, WorkspaceRunOptions
from kgpu.model.limits import clip

log = logging.getLogger(__name__)


def default_identity() -> str:
    """client-go's choice: the host name and a random suffix, unique per process."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class Companion(Protocol):
    """Something that runs beside the scheduler and talks to the same API server."""

    def start(self, client: KubeClient) -> None: ...

    def stop(self, client: KubeClient) -> None: ...


@dataclass(frozen=True, slots=True)
class RunOptions:
    kubeconfig: str | None = None
    scheduler_name: str = "kgpu-scheduler"
    policy: str = "kgpu"
    metrics_port: int | None = 10251  # 0: any free port; None: no HTTP endpoint
    metrics_host: str = "127.0.0.1"  # the install gives the pod's IP
    leader_elect: bool = True
    lease_namespace: str = "kube-system"
    lease_name: str = ""  # default: the scheduler name
    identity: str = field(default_factory=default_identity)
    lease: LeaseTiming = field(default_factory=LeaseTiming)
    timeouts: Timeouts = field(default_factory=Timeouts)
    watch_seconds: int | None = None  # default: Timeouts.watch
    loop: LoopConfig | None = None  # default: LoopConfig(scheduler_name, policy)
    event_workers: int = 2
    # None: no autoscaling. Its scheduler_name is replaced by the loop's.
    autoscale: AutoscaleOptions | None = None
    # None: no Workspace controller (`kgpu run --no-workspaces`).
    workspaces: WorkspaceRunOptions | None = field(default_factory=WorkspaceRunOptions)
    companions: tuple[Companion, ...] = ()
    # NAMESPACE/NAME of the Secret with the key that signs kgpu's records on pods (made at
    # start if absent); "": kgpu-system/SCHEDULER-record-key.
    record_key: str = ""
    # Makes the record key's namespace where it is missing (a workstation run); None: the
    # install made it.
    make_namespace: Callable[[KubeClient, str], None] | None = None
    # The cyclic garbage collector's young-generation threshold while the scheduler runs
    # (see RunningScheduler.start); 0 leaves the interpreter's.
    gc_threshold: int = 10_000


class RunningScheduler:
    """Everything ``kgpu run`` starts, so that it can be stopped cleanly (tests run several
    in one process)."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        config = options.loop or LoopConfig(
            scheduler_name=options.scheduler_name, policy=options.policy
        )
        self.client = KubeClient(
            load_configuration(options.kubeconfig),
            timeouts=options.timeouts,
            user_agent=f"kgpu-scheduler/{options.identity}",
            pool_size=config.bind_workers + options.event_workers + 8,
        )
        watch = options.watch_seconds
        self.nodes = Informer(self.client, NODES, watch_seconds=watch)
        self.pods = Informer(self.client, PODS, watch_seconds=watch)
        # Queues, PodGroups and Devices are cached for the loop's sessions; a cluster
        # without the CRDs is scheduled all the same (every pod in the default queue).
        self.custom = [
            Informer(self.client, r, optional=True, watch_seconds=watch) for r in CUSTOM_RESOURCES
        ]
        # The anchors' Queues and PodGroups (KAI's, Volcano's: kgpu.kube.anchors), read
        # beside kgpu's; a cluster without their CRDs reads as none.
        self.anchor_queues = [
            Informer(self.client, r, optional=True, watch_seconds=watch)
            for r in (KAI_QUEUES, VOLCANO_QUEUES)
        ]
        self.anchor_podgroups = [
            Informer(self.client, r, optional=True, watch_seconds=watch)
            for r in (KAI_PODGROUPS, VOLCANO_PODGROUPS)
        ]
        # A PodGroup's spec.priorityClassName is its job's priority. Built in since v1.14,
        # so not optional: without it jobs would rank wrongly until it listed.
        self.priority_classes = Informer(self.client, PRIORITY_CLASSES, watch_seconds=watch)
        # Koordinator's Devices (koordlet's), read where a node has no kgpu.io Device.
        self.koordinator_devices = Informer(
            self.client, KOORDINATOR_DEVICES, optional=True, watch_seconds=watch
        )
        self.informers = [
            self.nodes,
            self.pods,
            self.priority_classes,
            *self.custom,
            *self.anchor_queues,
            *self.anchor_podgroups,
            self.koordinator_devices,
        ]
        # DRA only where the server serves resource.k8s.io/v1 (kgpu.kube.live.dra_live).
        self.dra: DraLive | None = None
        if serves_dra(self.client):
            self.dra = DraLive(self.client, config.scheduler_name, watch_seconds=watch)
            self.informers += self.dra.informers
        else:
            log.info(
                "the API server does not serve resource.k8s.io/v1: scheduling without "
                "Dynamic Resource Allocation (pods' resourceClaims are not read)"
            )
        # Defragmentation (kgpu.kube.live.defrag_live) where the profile turns it on: it
        # reads PodDisruptionBudgets, which the scheduler otherwise does not cache.
        self.profile = load_profile(config.policy)
        budgets: Informer | None = None
        if self.profile.defragmentation.enabled:
            budgets = Informer(self.client, budget_resource(self.client), watch_seconds=watch)
            self.informers.append(budgets)
        self.claims: Informer | None = None
        self.nodepools: Informer | None = None
        if options.autoscale is not None:
            self.claims = Informer(self.client, NODECLAIMS, optional=True, watch_seconds=watch)
            # Watched so that a NodePool created or edited is planned with without a restart.
            self.nodepools = Informer(self.client, NODEPOOLS, optional=True, watch_seconds=watch)
            self.informers += [self.claims, self.nodepools]
        self.elector: LeaderElector | None = None
        if options.leader_elect:
            self.elector = LeaderElector(
                self.client,
                options.identity,
                name=options.lease_name or options.scheduler_name,
                namespace=options.lease_namespace,
                timing=options.lease,
            )
        self.metrics = SchedulerMetrics()
        self.recorder = EventRecorder(
            self.client,
            component=config.scheduler_name,
            instance=options.identity,
            workers=options.event_workers,
        )
        elector = self.elector
        secret = options.record_key or default_secret(config.scheduler_name)
        self.record_key = ensure_key(self.client, secret, options.make_namespace)
        self.defrag: DefragLive | None = None
        if budgets is not None:
            self.defrag = DefragLive(
                self.client,
                self.recorder,
                DefragMetrics(self.metrics.registry),
                elector.is_leader if elector is not None else lambda: True,
                self.profile.defragmentation,
                budgets,
                levels=self.profile.topology.pairs,
            )
        self.loop = SchedulerLoop(
            self.client,
            self.nodes,
            self.pods,
            self.recorder,
            self.metrics,
            config,
            is_leader=elector.is_leader if elector is not None else lambda: True,
            synced=self.synced,
            devices=next(i for i in self.custom if i.resource == DEVICES),
            koordinator_devices=self.koordinator_devices,
            queues=next(i for i in self.custom if i.resource == QUEUES),
            podgroups=next(i for i in self.custom if i.resource == PODGROUPS),
            priority_classes=self.priority_classes,
            record_key=self.record_key,
            anchor_queues=self.anchor_queues,
            anchor_podgroups=self.anchor_podgroups,
            dra=self.dra,
            profile=self.profile,
            defrag=self.defrag,
        )
        self.workspaces: WorkspaceRunner | None = None
        if options.workspaces is not None:
            leads = elector.is_leader if elector is not None else lambda: True
            self.workspaces = WorkspaceRunner(
                self.client,
                options.workspaces,
                ready=lambda: self.nodes.synced.is_set() and leads(),
                nodes=self.nodes.items,
                watch_seconds=watch,
            )
        self.autoscaler: Autoscaler | None = None
        self._autoscale: AutoscaleRunner | None = None
        self._priority_class_done = False
        if options.autoscale is not None and self.claims is not None:
            self.autoscaler = Autoscaler(
                self.client,
                replace(options.autoscale, scheduler_name=config.scheduler_name),
                emit=self.recorder.emit,
                metrics=AutoscaleMetrics(self.metrics.registry),
            )
            loop = self.loop
            self._autoscale = AutoscaleRunner(
                self.autoscaler,
                self.pods.items,
                self.claims.items,
                self.nodes.items,
                assumed=lambda: loop.assumed().keys(),
                ready=self._autoscale_ready,
                nodepools=self.nodepools.items if self.nodepools is not None else None,
                dra=self._dra_settled if self.dra is not None else None,
            )
        self.server: HealthServer | None = None
        if options.metrics_port is not None:
            self.server = HealthServer(
                self.metrics.render,
                self.not_ready,
                live=self.not_live,
                host=options.metrics_host,
                port=options.metrics_port,
            )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.loop.run, args=(self._stop,), name="loop")
        self._gc_before: tuple[int, int, int] | None = None

    @property
    def port(self) -> int | None:
        return self.server.port if self.server is not None else None

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def _dra_settled(self) -> DraInventory | None:
        """The DRA objects and claims as the loop's last session left them."""
        return self.dra.settled if self.dra is not None else None

    def _autoscale_ready(self) -> bool:
        """Synced and leading; the PriorityClass is installed once, before the first round."""
        leading = self.elector is None or self.elector.is_leader()
        if not (leading and self.synced()):
            return False
        if not self._priority_class_done and self.autoscaler is not None:
            self._priority_class_done = True
            self._install_priority_class(self.autoscaler)
        return True

    def _install_priority_class(self, autoscaler: Autoscaler) -> None:
        """Create the triggers' PriorityClass unless it exists; a failure is logged (the
        trigger pods' creates then fail and say why) and not retried."""
        obj = render_priority_class(autoscaler.options.pods)
        name = obj["metadata"]["name"]
        try:
            self.client.get(PRIORITY_CLASSES, name)
        except NotFound:
            try:
                self.client.create(PRIORITY_CLASSES, obj)
                log.info("created PriorityClass %s for trigger pods", name)
            except Conflict:
                pass  # made meanwhile
            except KubeError as exc:
                log.warning("PriorityClass %s not created: %s", name, exc)
        except KubeError as exc:
            log.warning("PriorityClass %s not read: %s", name, exc)

    def not_ready(self) -> list[str]:
        """What /readyz waits for; empty when ready."""
        missing = [f"{i.resource.plural} cache" for i in self.informers if not i.synced.is_set()]
        missing += [
            f"{i.resource.plural} cache (listing again after: {clip(i.last_error)})"
            for i in self.informers
            if i.synced.is_set() and i.stale
        ]
        if self.elector is not None and not self.elector.status_known.is_set():
            missing.append("leader election")
        return missing

    def not_live(self) -> list[str]:
        """What /healthz fails for; empty when live."""
        problems = self.loop.liveness.problems()
        if (
            self._thread.ident is not None
            and not self._thread.is_alive()
            and not self._stop.is_set()
        ):
            problems.append("the scheduling loop's thread has ended")
        return problems

    def start(self) -> RunningScheduler:
        self._collect_less_often()
        for companion in self.options.companions:
            companion.start(self.client)
        if self.server is not None:
            self.server.start()
        self.recorder.start()
        for informer in self.informers:
            informer.start()
        if self.elector is not None:
            self.elector.start()
        self._thread.start()
        if self._autoscale is not None:
            self._autoscale.start()
        if self.workspaces is not None:
            self.workspaces.start()
        log.info(
            "kgpu scheduler %s (%s) started; metrics on port %s",
            self.options.scheduler_name,
            self.options.identity,
            self.port,
        )
        return self

    def stop(self) -> None:
        """Stop deciding, let the binds in flight finish, give the lease up, stop the rest."""
        self._stop.set()
        if self._autoscale is not None:
            self._autoscale.stop()
        if self.workspaces is not None:
            self.workspaces.stop()
        if self._thread.is_alive():
            self._thread.join(10.0)
        self.loop.close()
        if self.defrag is not None:
            self.defrag.close()
        if self.dra is not None:
            self.dra.close()
        if self.elector is not None:
            self.elector.stop()
        for informer in self.informers:
            informer.stop()
        self.recorder.stop()
        if self.server is not None:
            self.server.stop()
        for companion in self.options.companions:
            try:
                companion.stop(self.client)
            except KubeError:  # the others still stop, and the client closes
                log.warning("%s did not stop cleanly", type(companion).__name__, exc_info=True)
        self.client.close()
        if self._gc_before is not None:
            gc.set_threshold(*self._gc_before)
            self._gc_before = None

    def _collect_less_often(self) -> None:
        """Raise the cyclic collector's young threshold (never lower it).

        The scheduler holds every pod of the cluster as the dicts the API returned (about
        60 containers a pod) and allocates hundreds of thousands of objects a session. At
        CPython's default of 700 net allocations between young collections, the short-lived
        objects of a session or a watch event outlive many young collections, so many are
        promoted that full collections of the whole heap keep coming: 11-12 of them, 0.2
        CPU ms a bound pod, a sixth of kgpu's CPU, in `bench/e2e_vs_kube_scheduler.py
        --profile` (10,000 pods). At 10,000, none ran in the same bench and collecting
        took 0.04 ms a pod. Cycles are still collected, a little later; memory grows by
        at most the threshold's worth of young objects."""
        wanted = self.options.gc_threshold
        young, middle, old = gc.get_threshold()
        if wanted > young:
            self._gc_before = (young, middle, old)
            gc.set_threshold(wanted, middle, old)
