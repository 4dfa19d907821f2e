"""The live cluster's DRA objects read into a session's :class:`DraInventory`.

Each session reads the caches of DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates (``resource.k8s.io/v1``), and the claims of the pending pods it may
place. Every object is parsed once per resourceVersion; one that cannot be read is left out
with a :class:`Problem` (a Warning event on it) and the rest is read.

Claims made from templates: on a 1.34 cluster kube-controller-manager's resource claim
controller creates one claim per pod and template entry, owned by the pod, and names it in
``pod.status.resourceClaimStatuses``; kgpu reads that name, as kube-scheduler does, and
never creates claims. Until the name is there (and always on a server where nothing makes
them, like a v1.20 one with the API double's DRA) the pod fits no node, with the reason.
A pod whose claim cannot be read, or is not owned by it while made from its template,
or is being deleted, fits no node either, and says why.

The claims of the pods of ours that hold their node (bound, or with their Binding in
flight) are read too, only for the pods that name ``spec.resourceClaims``: what their
allocated claims hold counts in their queues (:mod:`kgpu.framework.session_claims`). Such a
pod whose claims cannot be named is left without: nothing is to be placed for it, and the
claim's allocation still keeps its devices taken.

Claims this scheduler reserved for pods whose status write the claim cache has not shown
yet (``in_flight``) stand in for the cached ones, so the next session does not give their
devices again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from kgpu.dra.inventory import DraInventory
from kgpu.kube.api.resource_types import Resource, meta, object_key, resource_version, uid
from kgpu.kube.objects.dra_claim_objects import (
    pod_claims_from_k8s,
    resource_claim_from_k8s,
    resource_claim_template_from_k8s,
)
from kgpu.kube.objects.dra_objects import device_class_from_k8s, resource_slice_from_k8s
from kgpu.kube.objects.fields import ConversionError
from kgpu.kube.snapshot.cache_snapshot import Problem
from kgpu.model.dra import MAX_POD_CLAIMS, PodClaim, ResourceClaim

DRA_GROUP: Final = "resource.k8s.io"
DEVICE_CLASSES: Final = Resource(DRA_GROUP, "v1", "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_SLICES: Final = Resource(
    DRA_GROUP, "v1", "resourceslices", "ResourceSlice", namespaced=False
)
RESOURCE_CLAIMS: Final = Resource(
    DRA_GROUP, "v1", "resourceclaims", "ResourceClaim", namespaced=True
)
RESOURCE_CLAIM_TEMPLATES: Final = Resource(
    DRA_GROUP, "v1", "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True
)
DRA_RESOURCES: Final = (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)
UNREADABLE: Final = "DRAObjectUnreadable"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class InFlight:
    """A claim as this scheduler reserved it for a pod, until the cache shows the write."""

    claim: ResourceClaim
    pod: str  # the pod key it was reserved for last
    base: str  # the claim's resourceVersion the write starts from
    written: bool = False
    # Versions the claim went through on the way to the status write (its finalizer added,
    # a re-read after a conflict): a cache showing one of these has not seen the write yet.
    passed: tuple[str, ...] = ()

    def shown_by(self, version: str) -> bool:
        """Whether a cached claim of ``version`` may show the write (it is none of the
        versions from before it)."""
        return version != self.base and version not in self.passed


@dataclass(slots=True)
class DraRead:
    inventory: DraInventory
    claim_objs: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # namespace/name
    class_objs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # Pending pods name claims (or claims that cannot be named): the session needs the
    # DraClaims filter. Claims of bound pods only count in their queues.
    pending_claims: bool = False


class _Parsed:
    """One kind's objects parsed once per resourceVersion (uid -> version, model or error)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, object]] = {}

    def read(
        self, objs: Iterable[Mapping[str, Any]], parse: Any, problems: list[Problem]
    ) -> list[tuple[Mapping[str, Any], Any]]:
        out = []
        seen: dict[str, tuple[str, object]] = {}
        for obj in objs:
            key, version = uid(obj) or object_key(obj), resource_version(obj)
            hit = self._seen.get(key)
            if hit is None or hit[0] != version:
                try:
                    hit = (version, parse(obj))
                except ConversionError as exc:
                    hit = (version, exc)
            seen[key] = hit
            if isinstance(hit[1], ConversionError):
                problems.append(Problem(obj, UNREADABLE, str(hit[1])))
            else:
                out.append((obj, hit[1]))
        self._seen = seen  # what is gone is forgotten
        return out


class DraReader:
    def __init__(self) -> None:
        self._classes = _Parsed()
        self._slices = _Parsed()
        self._claims = _Parsed()
        self._templates = _Parsed()
        self._pods = _Parsed()
        self._holding = _Parsed()  # pods bound or being bound: read apart (one _Parsed a set)

    def read(
        self,
        classes: Iterable[Mapping[str, Any]],
        slices: Iterable[Mapping[str, Any]],
        claims: Iterable[Mapping[str, Any]],
        templates: Iterable[Mapping[str, Any]],
        pending: Iterable[Mapping[str, Any]],
        in_flight: Mapping[str, InFlight],
        holding: Iterable[Mapping[str, Any]] = (),
    ) -> DraRead:
        """The session's inventory: the objects, the claims of the ``pending`` pods (to
        place) and of the pods ``holding`` their node (bound, or their Binding in flight)."""
        problems: list[Problem] = []
        read_classes = self._classes.read(classes, device_class_from_k8s, problems)
        read_slices = self._slices.read(slices, resource_slice_from_k8s, problems)
        claim_objs = list(claims)
        read_claims = self._claims.read(claim_objs, resource_claim_from_k8s, problems)
        read_templates = self._templates.read(templates, resource_claim_template_from_k8s, problems)
        models: dict[str, ResourceClaim] = {c.key: c for _, c in read_claims}
        for key, entry in in_flight.items():
            models[key] = entry.claim
        unreadable = {
            object_key(p.obj): p.message for p in problems if _kind(p.obj) == "ResourceClaim"
        }
        inventory = DraInventory.build(
            (c for _, c in read_classes),
            (s for _, s in read_slices),
            models.values(),
            (t for _, t in read_templates),
        )
        read = DraRead(
            inventory,
            claim_objs={object_key(o): o for o in claim_objs},
            class_objs={object_key(o): o for o, _ in read_classes},
            problems=problems,
        )
        asking = (p for p in pending if (p.get("spec") or {}).get("resourceClaims"))
        refused: list[Problem] = []
        for pod, refs in self._pods.read(asking, pod_claims_from_k8s, refused):
            key = object_key(pod)
            resolved = _resolve(pod, refs, read.claim_objs, unreadable)
            if isinstance(resolved, str):
                inventory.unresolved[key] = resolved
            else:
                inventory.set_pod_claims(key, resolved)
        for problem in refused:  # its claims cannot be read: it fits nowhere, and says why
            inventory.unresolved[object_key(problem.obj)] = problem.message
        problems.extend(refused)
        read.pending_claims = bool(inventory.pod_claims or inventory.unresolved)
        # Bound pods' claims: counted where they resolve; a pod whose spec cannot be read
        # was refused when it was placed, and is not warned about again each session.
        held = (p for p in holding if (p.get("spec") or {}).get("resourceClaims"))
        for pod, refs in self._holding.read(held, pod_claims_from_k8s, []):
            resolved = _resolve(pod, refs, read.claim_objs, unreadable)
            if not isinstance(resolved, str):
                inventory.set_pod_claims(object_key(pod), resolved)
        return read


def _kind(obj: Mapping[str, Any]) -> str:
    return str(obj.get("kind") or "")


def _resolve(
    pod: Mapping[str, Any],
    refs: tuple[PodClaim, ...],
    claims: Mapping[str, Mapping[str, Any]],
    unreadable: Mapping[str, str],
) -> tuple[PodClaim, ...] | str:
    """The pod's claims by the names they have live, or why they cannot be named."""
    namespace = str(meta(pod).get("namespace") or "default")
    made = _made_for(pod)
    if isinstance(made, str):
        return made
    out = []
    for ref in refs:
        name = ref.claim_name
        if ref.template_name:
            if ref.name not in made:
                return (
                    f'pod claim "{ref.name}" waits for its ResourceClaim from template '
                    f"{namespace}/{ref.template_name}: status.resourceClaimStatuses does not "
                    "name it yet (kube-controller-manager's resource claim controller makes it)"
                )
            made_name = made[ref.name]
            if made_name is None:  # the controller decided no claim is needed
                continue
            name = made_name
        key = f"{namespace}/{name}"
        if key in unreadable:
            return f"resource claim {key} cannot be read: {unreadable[key]}"
        obj = claims.get(key)
        if obj is not None and meta(obj).get("deletionTimestamp") and not _reserved(obj, pod):
            return f"resource claim {key} is being deleted"
        if obj is not None and ref.template_name and not _owned_by(obj, uid(pod)):
            return (
                f'resource claim {key} (pod claim "{ref.name}", from template '
                f"{ref.template_name}) is not owned by the pod: not made for it"
            )
        out.append(PodClaim(ref.name, claim_name=name))
    return tuple(out)


def _made_for(pod: Mapping[str, Any]) -> dict[str, str | None] | str:
    """``status.resourceClaimStatuses``: pod claim name -> the claim made for it (None: no
    claim needed), or why the list cannot be read."""
    status = pod.get("status") or {}
    items = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    if items is None:
        return {}
    where = f"pod {object_key(pod)}: status.resourceClaimStatuses"
    if not isinstance(items, list) or len(items) > MAX_POD_CLAIMS:
        return f"{where} is not a list of at most {MAX_POD_CLAIMS} entries"
    out: dict[str, str | None] = {}
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, Mapping) else None
        claim = item.get("resourceClaimName") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not (claim is None or isinstance(claim, str)):
            return f"{where}[{i}] is {item!r:.200}: expected {{name, resourceClaimName}}"
        out[name] = claim or None
    return out


def _reserved(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether ``claim`` is reserved for ``pod`` (a claim being deleted still serves the
    pods that hold it)."""
    status = claim.get("status")
    consumers = status.get("reservedFor") if isinstance(status, Mapping) else None
    pod_uid = uid(pod)
    return isinstance(consumers, list) and any(
        isinstance(c, Mapping) and c.get("uid") == pod_uid for c in consumers
    )


def _owned_by(obj: Mapping[str, Any], pod_uid: str) -> bool:
    owners = meta(obj).get("ownerReferences") or []
    return isinstance(owners, list) and any(
        isinstance(o, Mapping) and o.get("uid") == pod_uid for o in owners
    )
