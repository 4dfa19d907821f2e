"""Reservation pods kept in step with the shares kgpu places: made, renamed, deleted.

After each session (:mod:`kgpu.kube.snapshot.reservations` reads them), on the leader:

- every GPU minor where a share of ours is bound or being bound has a reservation: one is
  created for each that has none (and not again while its creation is in flight);
- a reservation the kubelet gave another GPU than it was made for is written anew, its
  ``kgpu.io/gpu-minor`` naming the GPU it holds, once no share is recorded on the old minor
  any more (the allocation corrector rewrites those first);
- a reservation whose GPU has held no share for ``idle_grace_s`` is deleted, and so at once
  is one that failed (the kubelet refuses one when no GPU is free:
  ``UnexpectedAdmissionError``), finished, or stands on a node that is gone; of two for one
  GPU, the younger goes. One on a node that is not Ready is left alone: its GPU is still
  held when the node comes back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError, NotFound
from kgpu.kube.api.resource_types import PODS
from kgpu.kube.objects.reservation_pod import ReservationConfig, minor_patch, render_reservation
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot, Reservation

log = logging.getLogger(__name__)

Submit = Callable[[Callable[[], None]], object]
# A creation not seen in the cache after this long is tried again.
_CREATE_TIMEOUT_S = 30.0


class ReservationKeeper:
    def __init__(
        self,
        client: KubeClient,
        config: ReservationConfig,
        submit: Submit,
        is_leader: Callable[[], bool],
    ) -> None:
        self.client = client
        self.config = config
        self.submit = submit
        self.is_leader = is_leader
        self._lock = threading.Lock()
        # (node, minor) -> when asked, and the reservations for it the cache showed then.
        self._creating: dict[tuple[str, int], tuple[float, frozenset[str]]] = {}
        self._idle_since: dict[str, float] = {}  # reservation name -> first seen idle
        self._acted: set[tuple[str, str]] = set()  # (name, what) done or in flight
        self.created = 0
        self.deleted = 0

    def due(self, now: float) -> bool:
        """Is an idle reservation's grace over (a session should run to delete it)?"""
        with self._lock:
            grace = self.config.idle_grace_s
            return any(now - since >= grace for since in self._idle_since.values())

    def act(self, snap: CacheSnapshot, now: float) -> None:
        if not self.is_leader():
            return
        book = snap.reservations
        live: list[Reservation] = []
        for r in book.reservations:
            if r.deleting:
                continue
            if r.gone:
                self._delete(r, f"node {r.node} is gone")
            elif r.finished:
                self._delete(r, f"its phase is {r.phase} on node {r.node}")
            elif r.live:  # on a node not Ready (a kubelet restarting, say): left as it is
                live.append(r)
        covered: dict[tuple[str, int], Reservation] = {}
        for r in sorted(live, key=lambda r: (r.created, r.name)):
            key = (r.node, r.covers if r.covers is not None else -1)
            if key in covered:
                self._delete(r, f"reservation {covered[key].name} already stands for that GPU")
                continue
            covered[key] = r
            self._keep(r, book.backed.get(r.node, set()), now)
        for r in live:  # shares on their way to the GPU it holds need no other
            if r.moved and r.minor is not None:
                covered.setdefault((r.node, r.minor), r)
        with self._lock:
            seen = {r.name for r in live}
            for name in [n for n in self._idle_since if n not in seen]:
                del self._idle_since[name]
            listed = {r.name for r in book.reservations}
            self._acted = {a for a in self._acted if a[0] in listed}
            # A creation is seen once a new pod for its GPU is in the cache, whatever its
            # phase: one the kubelet failed before any session saw it running is replaced
            # now, not after the timeout.
            names: dict[tuple[str, int], set[str]] = {}
            for r in book.reservations:
                if r.covers is not None:
                    names.setdefault((r.node, r.covers), set()).add(r.name)
            for key, (_, before) in list(self._creating.items()):
                if key in covered or names.get(key, set()) - before:
                    del self._creating[key]
        for node, minors in sorted(book.backed.items()):
            for minor in sorted(minors):
                if (node, minor) not in covered:
                    self._create(node, minor, now, frozenset(names.get((node, minor), ())))

    def _keep(self, r: Reservation, backed: set[int], now: float) -> None:
        """Rename ``r`` once its shares moved to the GPU it holds; time it while idle."""
        if r.held is not None and r.minor != r.held and r.moved == 0:
            self._once(r.name, f"minor {r.held}", partial(self._rename, r, r.held))
        used = r.covers in backed or r.moved > 0
        with self._lock:
            if used:
                self._idle_since.pop(r.name, None)
                return
            since = self._idle_since.setdefault(r.name, now)
        if now - since >= self.config.idle_grace_s:
            self._delete(r, f"no share has been on its GPU for {self.config.idle_grace_s:.0f}s")

    def _create(self, node: str, minor: int, now: float, before: frozenset[str]) -> None:
        """Ask for a reservation of GPU ``minor`` (``before``: those the cache shows for
        it now, none live)."""
        with self._lock:
            asked = self._creating.get((node, minor))
            if asked is not None and now - asked[0] < _CREATE_TIMEOUT_S:
                return
            self._creating[(node, minor)] = (now, before)
        self.submit(partial(self._do_create, node, minor))

    def _do_create(self, node: str, minor: int) -> None:
        body = render_reservation(self.config, node, minor)
        try:
            made = self.client.create(PODS, body, self.config.namespace)
        except KubeError as exc:
            log.warning("GPU %d of node %s: reservation pod not created: %s", minor, node, exc)
            with self._lock:
                self._creating.pop((node, minor), None)  # the next session tries again
            return
        self.created += 1
        name = made.get("metadata", {}).get("name", "?")
        log.info("GPU %d of node %s: reservation pod %s created", minor, node, name)

    def _rename(self, r: Reservation, minor: int) -> None:
        try:
            self.client.patch(PODS, r.name, minor_patch(minor), self.config.namespace)
        except NotFound:
            return
        except KubeError as exc:
            log.warning("reservation pod %s not renamed: %s", r.name, exc)
            self._forget(r.name, f"minor {minor}")
            return
        log.info(
            "reservation pod %s was made for GPU %s of node %s and holds GPU %d: now named so",
            r.name,
            r.minor,
            r.node,
            minor,
        )

    def _delete(self, r: Reservation, why: str) -> None:
        self._once(r.name, "delete", partial(self._do_delete, r, why))

    def _do_delete(self, r: Reservation, why: str) -> None:
        try:
            self.client.delete(PODS, r.name, self.config.namespace)
        except NotFound:
            pass
        except KubeError as exc:
            log.warning("reservation pod %s not deleted: %s", r.name, exc)
            self._forget(r.name, "delete")
            return
        self.deleted += 1
        log.info("reservation pod %s of node %s deleted: %s", r.name, r.node, why)

    def _once(self, name: str, what: str, task: Callable[[], Any]) -> None:
        with self._lock:
            if (name, what) in self._acted:
                return
            self._acted.add((name, what))
        self.submit(task)

    def _forget(self, name: str, what: str) -> None:
        with self._lock:
            self._acted.discard((name, what))
