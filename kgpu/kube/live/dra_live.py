"""Dynamic Resource Allocation in ``kgpu run``: the DRA caches, each session's inventory,
the scheduler that filters with it, and the claims written and released.

Only where the API server serves ``resource.k8s.io/v1`` (:func:`serves_dra`, asked once at
start): a server that does not (before 1.34, like the local v1.20 one) is scheduled as
before, and the start says so in the log.

Per session (the loop's thread), :meth:`DraLive.prepare`:

1. forgets reservations the claim cache now shows (:class:`ClaimsWriter.prune`);
2. reads the four kinds, the pending pods' claims and those of our pods bound or being
   bound into the session's inventory (:mod:`kgpu.kube.snapshot.dra_inventory`), with this
   scheduler's reservations in flight;
3. releases the claims of our pods that are gone or finished
   (:mod:`kgpu.kube.live.dra_release`).

The inventory is the session's (``Snapshot.dra``): the session records the claims of each
pod it places there, so its next pod sees those devices taken, and counts DRA GPUs in the
queues (:mod:`kgpu.framework.session_claims`). :meth:`DraLive.scheduler` gives the session
the profile's scheduler with the ``DraClaims`` filter over that inventory when some pending
pod asks for claims, and the plain one otherwise: a cluster whose pods ask for none decides
exactly as without DRA. The binds are then carried out with :attr:`DraLive.writer`
(:mod:`kgpu.kube.live.dra_claims_writer`), which records each bound pod's claims again and
finds them already allocated so. After that the inventory changes no more: it is what the
autoscaler plans with (:attr:`DraLive.settled`) until the next session's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kgpu.actions.dra_scheduler import dra_scheduler
from kgpu.dra.inventory import DraInventory
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import NotFound
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.resource_types import object_key
from kgpu.kube.live.dra_claims_writer import ClaimsWriter
from kgpu.kube.live.dra_release import ClaimReleaser
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot, Problem
from kgpu.kube.snapshot.dra_inventory import (
    DEVICE_CLASSES,
    DRA_GROUP,
    DRA_RESOURCES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DraReader,
)
from kgpu.plugins.node.dra_claims import DraClaims
from kgpu.plugins.registry import PluginContext
from kgpu.state.fragmentation import TypicalPod

log = logging.getLogger(__name__)


def serves_dra(client: KubeClient) -> bool:
    """Whether the server serves ``resource.k8s.io/v1`` with the four kinds kgpu reads
    (its discovery document); another error than 404 is raised (the start fails)."""
    try:
        found = client.request("GET", f"/apis/{DRA_GROUP}/v1")
    except NotFound:
        return False
    served = {r.get("name") for r in found.get("resources") or [] if isinstance(r, Mapping)}
    return {r.plural for r in DRA_RESOURCES} <= served


class DraLive:
    def __init__(
        self, client: KubeClient, scheduler_name: str, *, watch_seconds: int | None = None
    ) -> None:
        self.classes = Informer(client, DEVICE_CLASSES, watch_seconds=watch_seconds)
        self.slices = Informer(client, RESOURCE_SLICES, watch_seconds=watch_seconds)
        self.claims = Informer(client, RESOURCE_CLAIMS, watch_seconds=watch_seconds)
        self.templates = Informer(client, RESOURCE_CLAIM_TEMPLATES, watch_seconds=watch_seconds)
        self.informers = (self.classes, self.slices, self.claims, self.templates)
        # Releases are few (a pod of ours with claims gone): two threads of their own, so
        # they never wait behind a session's binds.
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="dra-release")
        self.releaser = ClaimReleaser(client, self._pool.submit, scheduler_name)
        self.writer = ClaimsWriter(client, self.releaser.mark_ours)
        self._reader = DraReader()
        self._scheduler: Scheduler | None = None
        self._typical: list[TypicalPod] | None = None
        # The last session's inventory once its decisions were carried out (read by the
        # autoscaler's thread: set whole, never changed after).
        self.settled: DraInventory | None = None

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def watch(self, changed: Callable[[str, dict[str, Any]], None]) -> None:
        """Call ``changed`` on every change of the DRA caches (devices come and go)."""
        for informer in self.informers:
            informer.on_change = changed

    def prepare(
        self,
        snap: CacheSnapshot,
        pods: Sequence[Mapping[str, Any]],
        by_key: Mapping[str, Mapping[str, Any]],
        assumed: Mapping[Any, Any],
        leader: bool,
    ) -> list[Problem]:
        """Read this session's inventory and release what pods gone held; the objects that
        could not be read. ``by_key``: ``pods`` by namespace/name."""
        claims = self.claims.items()
        claim_by_key = {object_key(c): c for c in claims}
        self.writer.prune(claim_by_key, {str(k) for k in assumed})
        binding = (by_key.get(str(k)) for k in assumed)
        read = self._reader.read(
            self.classes.items(),
            self.slices.items(),
            claims,
            self.templates.items(),
            [p.obj for p in snap.pending],
            self.writer.in_flight_copy(),
            holding=[*(p.obj for p in snap.bound), *(p for p in binding if p is not None)],
        )
        self.writer.session = read
        self.releaser.act(claims, pods, leader)
        return read.problems

    @property
    def inventory(self) -> DraInventory | None:
        """The session's inventory (None before the first session)."""
        read = self.writer.session
        return read.inventory if read is not None else None

    def settle(self) -> None:
        """The session's decisions are carried out: its inventory, which changes no more,
        is what the autoscaler plans with from now on."""
        self.settled = self.inventory

    def scheduler(
        self, plain: Scheduler, profile: Profile, typical: list[TypicalPod] | None
    ) -> Scheduler:
        """``plain``, unless a pending pod of the session asks for claims: then the
        profile's scheduler with ``DraClaims`` over the session's inventory."""
        read = self.writer.session
        if read is None or not read.pending_claims:
            return plain
        if self._scheduler is None or typical != self._typical:
            context = PluginContext(typical_pods=typical or [], dra=read.inventory)
            self._scheduler = dra_scheduler(profile, context)
            self._typical = typical
        for plugin in self._scheduler.filters:
            if isinstance(plugin, DraClaims):
                plugin.inventory = read.inventory
        return self._scheduler
