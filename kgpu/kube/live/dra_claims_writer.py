"""A placed pod's ResourceClaims written before its Binding, as kube-scheduler's PreBind does.

For each bind a session decided, in bind order (the loop's thread), :meth:`reserve` asks the
session's inventory for the pod's claims on the chosen node and records them there, so a
later pod of the same session cannot take the same devices; a pod whose devices a pod
placed before it in the session took is given back (REJECTED, retried after its back-off).
The reservations stand in for the cached claims until the cache shows them (``in_flight``),
so the next session, which may start while these writes are in flight, counts them.

Then, on a thread of the loop's pool and before the Binding, :meth:`write` puts each claim's
``status`` through the ``status`` subresource, with the claim's resourceVersion as the
precondition: ``allocation`` (``devices.results`` [{request, driver, pool, device}], the
class' and the claim's opaque ``config``, ``nodeSelector`` naming the node when a device
is the node's own) when the claim had none, and the pod in ``reservedFor``
({resource: pods, name, uid}). On 409 Conflict the claim is read again: if it is still
unallocated, or allocated to the very devices chosen, and has room, the write is tried once
more on the new version; otherwise the pod is given back to the queue with a
FailedScheduling event naming the claim. A claim already reserved for the pod is not
written again.

Delete protection, as kube-scheduler's PreBind: before it writes an allocation, the claim
gets the ``resource.kubernetes.io/delete-protection`` finalizer in an update of the claim
itself (a status write leaves metadata as it was), with the claim's resourceVersion as the
precondition; one already there (an earlier attempt) is kept. A claim being deleted
(``deletionTimestamp``) is neither allocated nor reserved: the pod goes back to the queue.
Whoever clears the allocation removes the finalizer after it, as the resource claim
controller does (:func:`unprotect`: :meth:`undo` here, and
:mod:`kgpu.kube.live.dra_release`), so a claim deleted while it held devices goes once they
are free.

A Binding that fails after the claims were written (the pod gone, or refused) undoes them,
as kube-scheduler's Unreserve: the pod leaves ``reservedFor``, and an allocation this write
made goes with the last consumer.
"""

from __future__ import annotations

import copy
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Final

from kgpu.dra.allocator import Refused
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.resource_types import meta, object_key, resource_version, uid
from kgpu.kube.snapshot.dra_inventory import RESOURCE_CLAIMS, DraRead, InFlight
from kgpu.model.dra import MAX_RESERVED_FOR, ClaimAllocation
from kgpu.model.node import NodeName
from kgpu.state.cluster import ClusterState

log = logging.getLogger(__name__)

MAX_CONFIGS: Final = 32  # DeviceConfigMaxSize: a class' or a claim's spec config entries
# Set by kube-scheduler on a claim it allocates (resourceapi.Finalizer): the claim is not
# deleted while its allocation stands.
FINALIZER: Final = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """What one claim's status must say once the pod holds it."""

    key: str  # namespace/name
    base: Mapping[str, Any]  # the claim as the session read it
    allocation: dict[str, Any]  # status.allocation as it must be (written if absent)
    allocates: bool  # the claim had no allocation: this write makes it


@dataclass(frozen=True, slots=True)
class Reserved:
    """A pod's claims reserved on its node, to write before its Binding."""

    pod: str  # namespace/name
    pod_name: str
    pod_uid: str
    writes: tuple[ClaimWrite, ...]


class ClaimsWriter:
    def __init__(self, client: KubeClient, mark: Callable[[str], None] = lambda _: None) -> None:
        self.client = client
        self._mark = mark  # told each pod uid reserved (releases follow those pods)
        self.session: DraRead | None = None  # set by each session that has DRA objects
        self._lock = threading.Lock()
        self.in_flight: dict[str, InFlight] = {}  # claim key -> as reserved, until cached

    # ------------------------------------------------------------------ loop thread

    def reserve(
        self, pod: Mapping[str, Any], state: ClusterState, node: NodeName
    ) -> Reserved | str | None:
        """The pod's claims on ``node``, recorded in the session's inventory; None when it
        has none; why not, when they cannot be had any more."""
        read = self.session
        key = object_key(pod)
        if read is None or not read.inventory.asks(key):
            return None
        index = state.index.get(node)
        labels = state.nodes[index].labels if index is not None else {}
        outcome = read.inventory.record(key, str(node), labels)
        if isinstance(outcome, Refused):
            return f"resource claims no longer fit on node {node}: {outcome.reason}"
        writes = []
        for claim_key, allocation in sorted(outcome.allocations.items()):
            base = read.claim_objs.get(claim_key)
            if base is None:
                return f"resource claim {claim_key} is no longer in the cache"
            rendered = render_allocation(allocation, _configs(read, base, allocation))
            had = (base.get("status") or {}).get("allocation")
            writes.append(ClaimWrite(claim_key, base, rendered, had is None))
        reserved = Reserved(key, str(meta(pod).get("name")), uid(pod), tuple(writes))
        self._mark(reserved.pod_uid)
        with self._lock:
            for w in writes:
                claim = read.inventory.claims[w.key]
                self.in_flight[w.key] = InFlight(claim, key, resource_version(w.base))
        return reserved

    def prune(self, claims: Mapping[str, Mapping[str, Any]], assumed: set[str]) -> None:
        """Forget reservations the cache now shows, and those whose pod is no longer on
        its way to a Binding (dropped before its claims were written)."""
        with self._lock:
            for key, entry in list(self.in_flight.items()):
                obj = claims.get(key)
                if entry.written:
                    if obj is None or entry.shown_by(resource_version(obj)):
                        del self.in_flight[key]
                elif entry.pod not in assumed:
                    del self.in_flight[key]

    def in_flight_copy(self) -> dict[str, InFlight]:
        with self._lock:
            return dict(self.in_flight)

    # ------------------------------------------------------------------ the pool's threads

    def write(self, reserved: Reserved) -> str | None:
        """Write each claim's status; None when all are written, else why not (the claims
        written before the failure are undone)."""
        done: list[ClaimWrite] = []
        for w in reserved.writes:
            why = self._write_one(reserved, w)
            if why is not None:
                self._forget(reserved)
                self.undo(replace(reserved, writes=tuple(done)))
                return why
            done.append(w)
        with self._lock:
            for w in reserved.writes:
                entry = self.in_flight.get(w.key)
                if entry is not None and entry.pod == reserved.pod:
                    self.in_flight[w.key] = replace(entry, written=True)
        return None

    def _write_one(self, reserved: Reserved, w: ClaimWrite) -> str | None:
        namespace, _, name = w.key.partition("/")
        obj: Mapping[str, Any] = w.base
        for attempt in range(2):
            body = _reserved_status(obj, w, reserved)
            if body is None or isinstance(body, str):
                return body
            what = f"writing the status of resource claim {w.key}"
            try:
                if _allocates(obj) and FINALIZER not in _finalizers(obj):
                    # Protected before it holds devices, as kube-scheduler does.
                    what = f"adding the finalizer {FINALIZER} to resource claim {w.key}"
                    obj = self.client.replace(RESOURCE_CLAIMS, name, protected(obj), namespace)
                    what = f"writing the status of resource claim {w.key}"
                    self._passed(reserved, w.key, resource_version(obj))
                    body = _reserved_status(obj, w, reserved)
                    if body is None or isinstance(body, str):  # not reached: status unchanged
                        return body
                self.client.request(
                    "PUT", RESOURCE_CLAIMS.path(namespace, name, "status"), body=body
                )
                return None
            except NotFound:
                return f"resource claim {w.key} was deleted"
            except Conflict as exc:
                if attempt:
                    return f"resource claim {w.key} changed again while being written: {exc}"
            except KubeError as exc:
                return f"{what}: {exc}"
            try:  # changed since the session read it: as it is now
                obj = self.client.get(RESOURCE_CLAIMS, name, namespace)
            except NotFound:
                return f"resource claim {w.key} was deleted"
            except KubeError as exc:
                return f"reading resource claim {w.key} again after a conflict: {exc}"
            self._passed(reserved, w.key, resource_version(obj))
        return None  # not reached: the second attempt returns

    def _passed(self, reserved: Reserved, key: str, version: str) -> None:
        """The claim went through ``version`` before the status write: a cache showing it
        has not seen the write (the reservation still stands in for it)."""
        with self._lock:
            entry = self.in_flight.get(key)
            if entry is not None and entry.pod == reserved.pod:
                self.in_flight[key] = replace(entry, passed=(*entry.passed, version))

    def undo(self, reserved: Reserved) -> None:
        """The pod will not run there: take it out of its claims' ``reservedFor``, and drop
        the allocations its writes made once no one else holds them (best effort: a pod
        gone is released later anyway, :mod:`kgpu.kube.live.dra_release`)."""
        self._forget(reserved)
        for w in reserved.writes:
            namespace, _, name = w.key.partition("/")
            for _ in range(2):
                try:
                    obj = self.client.get(RESOURCE_CLAIMS, name, namespace)
                    body = without_consumers(obj, {reserved.pod_uid}, clear=w.allocates)
                    if body is not None:
                        path = RESOURCE_CLAIMS.path(namespace, name, "status")
                        obj = self.client.request("PUT", path, body=body)
                        if w.allocates:
                            unprotect(self.client, obj)
                    break
                except NotFound:
                    break
                except Conflict:
                    continue
                except KubeError as exc:
                    log.warning(
                        "resource claim %s not released for %s: %s", w.key, reserved.pod, exc
                    )
                    break

    def _forget(self, reserved: Reserved) -> None:
        with self._lock:
            for w in reserved.writes:
                entry = self.in_flight.get(w.key)
                if entry is not None and entry.pod == reserved.pod:
                    del self.in_flight[w.key]


# ---------------------------------------------------------------------------- protection


def _finalizers(obj: Mapping[str, Any]) -> list[Any]:
    found = meta(obj).get("finalizers")
    return list(found) if isinstance(found, list) else []


def _allocates(obj: Mapping[str, Any]) -> bool:
    """Whether writing the pod's reservation into ``obj`` allocates it (it has none yet)."""
    status = obj.get("status")
    return not isinstance(status, Mapping) or status.get("allocation") is None


def protected(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The claim with kube-scheduler's delete-protection finalizer added."""
    return {**obj, "metadata": {**meta(obj), "finalizers": [*_finalizers(obj), FINALIZER]}}


def unprotect(client: KubeClient, obj: Mapping[str, Any]) -> None:
    """Remove the delete-protection finalizer from a claim whose allocation is cleared (the
    claim as the status write answered, so its resourceVersion is the precondition), as
    the resource claim controller does once it deallocates; nothing when it is still
    allocated or has none. A :class:`KubeError` (a conflict included) is the caller's."""
    finalizers = _finalizers(obj)
    if FINALIZER not in finalizers or not _allocates(obj):
        return
    left = [f for f in finalizers if f != FINALIZER]
    namespace = str(meta(obj).get("namespace") or "")
    body = {**obj, "metadata": {**meta(obj), "finalizers": left}}
    client.replace(RESOURCE_CLAIMS, str(meta(obj).get("name")), body, namespace)


# ---------------------------------------------------------------------------- bodies


def render_allocation(allocation: ClaimAllocation, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """``status.allocation`` as kube-scheduler writes it."""
    results = []
    for r in allocation.results:
        item: dict[str, Any] = {
            "request": r.request,
            "driver": r.driver,
            "pool": r.pool,
            "device": r.device,
        }
        if r.consumed:  # a share of a device that allows several: it needs its own id
            item["consumedCapacity"] = {k: _quantity(v) for k, v in sorted(r.consumed.items())}
            item["shareID"] = str(uuid.uuid4())
        results.append(item)
    devices: dict[str, Any] = {"results": results}
    if configs:
        devices["config"] = configs
    out: dict[str, Any] = {"devices": devices}
    if allocation.node_name:
        term = {"key": "metadata.name", "operator": "In", "values": [allocation.node_name]}
        out["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [term]}]}
    return out


def _quantity(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    milli = -(-value * 1000 // 1)  # rounded up: never less than was counted
    return f"{milli}m"


def _configs(
    read: DraRead, claim: Mapping[str, Any], allocation: ClaimAllocation
) -> list[dict[str, Any]]:
    """The opaque driver configuration the allocation carries: each class' (for the
    requests allocated from it) then the claim's own, as kube-scheduler copies them."""
    model = read.inventory.claims.get(object_key(claim))
    classes: dict[str, list[str]] = {}
    if model is not None:
        for request in model.spec.requests:
            used = {r.request.partition("/")[0] for r in allocation.results}
            if request.name not in used:
                continue
            options = [request.exactly] if request.exactly else []
            options += [s.exactly for s in request.first_available]
            for option in options:
                if option is not None:
                    classes.setdefault(option.device_class, []).append(request.name)
    out: list[dict[str, Any]] = []
    for name, requests in sorted(classes.items()):
        spec = (read.class_objs.get(name) or {}).get("spec") or {}
        for item in _config_items(spec):
            out.append({"source": "FromClass", "requests": sorted(set(requests)), **item})
    spec = ((claim.get("spec") or {}).get("devices")) or {}
    for item in _config_items(spec):
        out.append({"source": "FromClaim", **item})
    return out


def _config_items(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = spec.get("config") if isinstance(spec, Mapping) else None
    if not isinstance(items, list):
        return []
    return [
        {k: copy.deepcopy(v) for k, v in item.items() if k in ("requests", "opaque")}
        for item in items[:MAX_CONFIGS]
        if isinstance(item, Mapping)
    ]


def _devices(allocation: Mapping[str, Any]) -> tuple[object, frozenset[tuple[Any, ...]]]:
    results = ((allocation.get("devices") or {}).get("results")) or []
    chosen = frozenset(
        (r.get("request"), r.get("driver"), r.get("pool"), r.get("device"))
        for r in results
        if isinstance(r, Mapping)
    )
    return allocation.get("nodeSelector"), chosen


def _reserved_status(
    obj: Mapping[str, Any], w: ClaimWrite, reserved: Reserved
) -> dict[str, Any] | str | None:
    """The claim with the pod reserved (and the allocation, if it had none); None when it
    is already so; why not, when it was allocated otherwise, is full or is being deleted."""
    status = dict(obj.get("status") or {})
    had = status.get("allocation")
    if had is None:
        status["allocation"] = w.allocation
    elif not isinstance(had, Mapping) or _devices(had) != _devices(w.allocation):
        return f"resource claim {w.key} was allocated meanwhile to other devices"
    consumers = list(status.get("reservedFor") or [])
    holds = any(isinstance(c, Mapping) and c.get("uid") == reserved.pod_uid for c in consumers)
    if holds and had is not None:
        return None
    if meta(obj).get("deletionTimestamp"):  # the pods it serves keep it; no other comes
        return f"resource claim {w.key} is being deleted"
    if not holds:
        if len(consumers) >= MAX_RESERVED_FOR:
            return f"resource claim {w.key} is reserved for {MAX_RESERVED_FOR} pods already"
        consumers.append({"resource": "pods", "name": reserved.pod_name, "uid": reserved.pod_uid})
    status["reservedFor"] = consumers
    return {**obj, "status": status}


def without_consumers(
    obj: Mapping[str, Any], gone: set[str], *, clear: bool = True
) -> dict[str, Any] | None:
    """The claim without the consumers of uids ``gone`` in ``reservedFor``, its allocation
    cleared (``clear``) once none remains, as the resource claim controller does; None
    when none of them is there."""
    status = dict(obj.get("status") or {})
    consumers = [c for c in status.get("reservedFor") or [] if isinstance(c, Mapping)]
    left = [c for c in consumers if c.get("uid") not in gone]
    if len(left) == len(consumers):
        return None
    status["reservedFor"] = left
    if not left:
        status.pop("reservedFor")
        if clear:
            status.pop("allocation", None)
    return {**obj, "status": status}
