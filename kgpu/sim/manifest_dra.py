"""DRA objects in ``kgpu simulate manifests``: DeviceClasses, ResourceSlices, ResourceClaims
and ResourceClaimTemplates (``resource.k8s.io/v1``) become the :class:`DraInventory` the
``DraClaims`` filter works over, and each pod placed gets its claims allocated as
kube-scheduler would write them into the claims' status before binding.

A DRA object that cannot be read is skipped with a note naming it, the field, the value and
what was expected; the rest of the manifests are simulated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgpu.actions.dra_scheduler import dra_scheduler
from kgpu.dra.inventory import DraInventory
from kgpu.kube.objects.dra_claim_objects import (
    resource_claim_from_k8s,
    resource_claim_template_from_k8s,
)
from kgpu.kube.objects.dra_objects import device_class_from_k8s, resource_slice_from_k8s
from kgpu.kube.objects.fields import ConversionError
from kgpu.model.dra import (
    ClaimAllocation,
    DeviceClass,
    PodClaim,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)


def dra_inventory(
    documents: Sequence[tuple[str, Mapping[str, Any]]],
    pod_claims: Mapping[str, tuple[PodClaim, ...]],
    notes: list[str],
) -> DraInventory | None:
    """The inventory of the DRA ``documents`` (source, object), or None when neither they
    nor any pod's claims are there (the run then decides exactly as without DRA)."""
    if not documents and not pod_claims:
        return None
    classes: list[DeviceClass] = []
    slices: list[ResourceSlice] = []
    claims: list[ResourceClaim] = []
    templates: list[ResourceClaimTemplate] = []
    for source, obj in documents:
        kind = obj.get("kind")
        try:
            if kind == "DeviceClass":
                classes.append(device_class_from_k8s(obj))
            elif kind == "ResourceSlice":
                slices.append(resource_slice_from_k8s(obj))
            elif kind == "ResourceClaim":
                claims.append(resource_claim_from_k8s(obj))
            else:
                templates.append(resource_claim_template_from_k8s(obj))
        except ConversionError as exc:
            notes.append(f"{source}: skipped: {exc}")
    inventory = DraInventory.build(classes, slices, claims, templates)
    notes.extend(inventory.notes)
    for pod, refs in pod_claims.items():
        inventory.set_pod_claims(pod, refs)
    return inventory


def render_claims(allocations: Mapping[str, ClaimAllocation]) -> tuple[str, ...]:
    """One line per claim: ``ns/claim: request=driver/pool/device, ... on node``."""
    lines = []
    for key, allocation in sorted(allocations.items()):
        devices = ", ".join(f"{r.request}={r.id}" for r in allocation.results)
        where = f" (node {allocation.node_name})" if allocation.node_name else " (all nodes)"
        lines.append(f"{key}: {devices}{where}")
    return tuple(lines)


__all__ = ["dra_inventory", "dra_scheduler", "render_claims"]
