"""ResourceClaims released when the pods of ours that held them go.

As kube-controller-manager's resource claim controller does (and does on a 1.34 cluster
beside kgpu: both write with the claim's resourceVersion as the precondition, so one wins
and the other finds nothing left to do): a consumer in ``status.reservedFor`` whose pod is
gone (no pod with its uid) or finished (Succeeded, Failed) leaves it; once none remains,
``status.allocation`` is cleared and the devices are free. Then, as the controller does,
the claim loses the ``resource.kubernetes.io/delete-protection`` finalizer the allocation
added (:func:`kgpu.kube.live.dra_claims_writer.unprotect`), so a claim deleted while it
held devices goes now; a removal that fails (a conflict) is tried again by a later session
on the claim as the cache shows it.

kgpu releases only its own pods: those whose ``spec.schedulerName`` is its own, remembered
by uid while they are in the cache (a deleted pod is no longer there to say whose it was).
A pod of ours deleted while no kgpu ran is not known as ours, and its claim stays reserved
until the claim controller (or an operator) releases it. The controller also deletes the
claims it made from templates for finished pods; kgpu deletes no claim.

Each session looks, on the loop's thread; the writes go to the binder pool, one at a time
per claim; a write that fails (a conflict included) is tried again by a later session.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError, NotFound
from kgpu.kube.api.resource_types import meta, object_key, uid
from kgpu.kube.live.dra_claims_writer import FINALIZER, unprotect, without_consumers
from kgpu.kube.snapshot.conversion_cache import pod_fields
from kgpu.kube.snapshot.dra_inventory import RESOURCE_CLAIMS

log = logging.getLogger(__name__)

Submit = Callable[..., "Future[Any]"]
FINISHED = ("Succeeded", "Failed")


class ClaimReleaser:
    def __init__(self, client: KubeClient, submit: Submit, scheduler_name: str) -> None:
        self.client = client
        self._submit = submit
        self.scheduler_name = scheduler_name
        self._ours: set[str] = set()  # uids of our pods seen holding a claim
        self._lock = threading.Lock()
        self._writing: set[str] = set()  # claim keys with a release in flight
        # Claims this released whose finalizer could not be removed yet: tried again.
        self._unprotect: set[str] = set()
        self.released = 0  # consumers released since the start, for tests and logs

    def mark_ours(self, pod_uid: str) -> None:
        """A pod of ours reserved a claim (before the cache can show it)."""
        with self._lock:
            self._ours.add(pod_uid)

    def act(
        self, claims: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], leader: bool
    ) -> None:
        """Release what the pods of ours that are gone or finished held."""
        if not claims and not self._ours:
            return  # nothing reserved anywhere: no pass over every pod
        by_uid = {uid(p): p for p in pods}
        holding: set[str] = set()
        for claim in claims:
            if self._unprotect and object_key(claim) in self._unprotect and leader:
                self._finish(claim)
            consumers = (claim.get("status") or {}).get("reservedFor") or []
            gone = set()
            for consumer in consumers if isinstance(consumers, list) else ():
                if not isinstance(consumer, Mapping) or consumer.get("resource") != "pods":
                    continue
                pod_uid = str(consumer.get("uid") or "")
                holding.add(pod_uid)
                pod = by_uid.get(pod_uid)
                if pod is not None and pod_fields(pod)[0] == self.scheduler_name:
                    with self._lock:
                        self._ours.add(pod_uid)
                finished = pod is None or pod_fields(pod)[2] in FINISHED
                with self._lock:
                    if finished and pod_uid in self._ours:
                        gone.add(pod_uid)
            if gone and leader:
                self._release(claim, gone)
        with self._lock:
            self._ours &= holding | self._ours_pending(by_uid)

    def _ours_pending(self, by_uid: Mapping[str, Mapping[str, Any]]) -> set[str]:
        """Ours not yet shown holding anything (their claims' writes in flight)."""
        return {u for u in self._ours if u in by_uid}

    def _release(self, claim: Mapping[str, Any], gone: set[str]) -> None:
        key = object_key(claim)
        with self._lock:
            if key in self._writing:
                return
            self._writing.add(key)
        self._submit(self._write, claim, gone)

    def _finish(self, claim: Mapping[str, Any]) -> None:
        """Remove the finalizer left on a claim this released (now that the cache shows
        it released), unless something allocated it again meanwhile."""
        key = object_key(claim)
        finalizers = meta(claim).get("finalizers")
        if not isinstance(finalizers, list) or FINALIZER not in finalizers:
            with self._lock:
                self._unprotect.discard(key)
            return
        with self._lock:
            if key in self._writing:
                return
            self._writing.add(key)
        self._submit(self._write, claim, set())

    def _write(self, claim: Mapping[str, Any], gone: set[str]) -> None:
        key = object_key(claim)
        namespace = str(meta(claim).get("namespace") or "")
        try:
            body = without_consumers(claim, gone)
            if body is not None:
                path = RESOURCE_CLAIMS.path(namespace, str(meta(claim).get("name")), "status")
                claim = self.client.request("PUT", path, body=body)
                with self._lock:
                    self.released += len(gone)
                    self._unprotect.add(key)
                log.info("resource claim %s released by %d pod(s) gone", key, len(gone))
            if key in self._unprotect:
                unprotect(self.client, claim)
                with self._lock:
                    self._unprotect.discard(key)
        except NotFound:
            with self._lock:
                self._unprotect.discard(key)
        except KubeError as exc:  # a conflict included: a later session sees the claim anew
            log.info("resource claim %s not released yet: %s", key, exc)
        finally:
            with self._lock:
                self._writing.discard(key)
