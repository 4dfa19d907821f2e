"""DRA ResourceClaims, ResourceClaimTemplates and pods' ``spec.resourceClaims`` read into
:mod:`kgpu.model.dra`, bounded and refused alone as the other DRA objects are
(:mod:`kgpu.kube.objects.dra_objects`)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from kgpu.kube.objects.dra_fields import (
    bounded,
    dns_label,
    dns_subdomain,
    int_in,
    node_selector,
    object_name,
    qualified_name,
    selectors,
)
from kgpu.kube.objects.fields import MISSING, Fields
from kgpu.kube.objects.node_pod import object_ref
from kgpu.model.dra import (
    MAX_ALLOCATION_RESULTS,
    MAX_CONSTRAINTS,
    MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES,
    MAX_FIRST_AVAILABLE,
    MAX_NAME_LENGTH,
    MAX_POD_CLAIMS,
    MAX_REQUESTS,
    MAX_RESERVED_FOR,
    AllocationMode,
    ClaimAllocation,
    ClaimSpec,
    Constraint,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    PodClaim,
    ResourceClaim,
    ResourceClaimTemplate,
    SubRequest,
)

# ---------------------------------------------------------------------------- claims


def _exact(fields: Fields, item: Mapping[str, Any], field: str) -> ExactRequest:
    cls = dns_subdomain(fields, item.get("deviceClassName", MISSING), f"{field}.deviceClassName")
    if item.get("adminAccess"):
        raise fields.fail(
            f"{field}.adminAccess",
            item["adminAccess"],
            "unset (kgpu does not allocate admin access)",
        )
    mode_text = item.get("allocationMode", "ExactCount")
    if mode_text not in ("ExactCount", "All"):
        raise fields.fail(f"{field}.allocationMode", mode_text, "ExactCount or All")
    mode = AllocationMode(mode_text)
    count = 1
    if mode == AllocationMode.EXACT_COUNT:
        count = int_in(fields, item.get("count", 1), f"{field}.count", 1, MAX_ALLOCATION_RESULTS)
    elif item.get("count") is not None:
        raise fields.fail(f"{field}.count", item["count"], "unset with allocationMode All")
    capacity: dict[str, Fraction] = {}
    requests = fields.mapping(
        fields.mapping(item, "capacity", f"{field}.capacity"),
        "requests",
        f"{field}.capacity.requests",
    )
    if len(requests) > MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES:
        raise fields.fail(
            f"{field}.capacity.requests",
            f"{len(requests)} entries",
            f"at most {MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES}",
        )
    for key, value in requests.items():
        capacity[qualified_name(fields, key, f"{field}.capacity.requests")] = fields.quantity(
            value, f"{field}.capacity.requests[{key}]"
        )
    return ExactRequest(cls, selectors(fields, item, f"{field}.selectors"), mode, count, capacity)


def _request(fields: Fields, item: Mapping[str, Any], field: str) -> DeviceRequest:
    name = dns_label(fields, item.get("name", MISSING), f"{field}.name")
    exactly = item.get("exactly")
    first = item.get("firstAvailable")
    if (exactly is None) == (first is None):
        raise fields.fail(
            field,
            "both exactly and firstAvailable"
            if exactly is not None
            else "neither exactly nor firstAvailable",
            "exactly one of exactly and firstAvailable",
        )
    if exactly is not None:
        return DeviceRequest(
            name,
            _exact(fields, fields.mapping(item, "exactly", f"{field}.exactly"), f"{field}.exactly"),
        )
    subs: list[SubRequest] = []
    for i, sub in enumerate(
        bounded(fields, item, "firstAvailable", f"{field}.firstAvailable", MAX_FIRST_AVAILABLE)
    ):
        at = f"{field}.firstAvailable[{i}]"
        sub_name = dns_label(fields, sub.get("name", MISSING), f"{at}.name")
        if any(s.name == sub_name for s in subs):
            raise fields.fail(
                f"{at}.name", sub_name, "a name no other alternative of the request has"
            )
        subs.append(SubRequest(sub_name, _exact(fields, sub, at)))
    if not subs:
        raise fields.fail(f"{field}.firstAvailable", [], "at least one alternative")
    return DeviceRequest(name, None, tuple(subs))


def claim_spec_from_k8s(fields: Fields, spec: Mapping[str, Any], field: str) -> ClaimSpec:
    devices = fields.mapping(spec, "devices", f"{field}.devices")
    requests: list[DeviceRequest] = []
    for i, item in enumerate(
        bounded(fields, devices, "requests", f"{field}.devices.requests", MAX_REQUESTS)
    ):
        request = _request(fields, item, f"{field}.devices.requests[{i}]")
        if any(r.name == request.name for r in requests):
            raise fields.fail(
                f"{field}.devices.requests[{i}].name",
                request.name,
                "a name no other request of the claim has",
            )
        requests.append(request)
    known = {r.name for r in requests} | {
        f"{r.name}/{s.name}" for r in requests for s in r.first_available
    }
    constraints = []
    for i, item in enumerate(
        bounded(fields, devices, "constraints", f"{field}.devices.constraints", MAX_CONSTRAINTS)
    ):
        at = f"{field}.devices.constraints[{i}]"
        if item.get("distinctAttribute") is not None:
            raise fields.fail(
                f"{at}.distinctAttribute",
                item["distinctAttribute"],
                "unset (alpha in 1.34; kgpu reads matchAttribute)",
            )
        names = item.get("requests") or []
        if (
            not isinstance(names, list)
            or len(names) > MAX_REQUESTS
            or not all(isinstance(n, str) and n in known for n in names)
        ):
            raise fields.fail(
                f"{at}.requests", names, "names of the claim's requests (or request/alternative)"
            )
        attribute = qualified_name(
            fields, item.get("matchAttribute", MISSING), f"{at}.matchAttribute"
        )
        constraints.append(Constraint(tuple(names), attribute))
    return ClaimSpec(tuple(requests), tuple(constraints))


def _allocation(fields: Fields, status: Mapping[str, Any]) -> ClaimAllocation | None:
    allocation = status.get("allocation")
    if allocation is None:
        return None
    allocation = fields.mapping(status, "allocation", "status.allocation")
    devices = fields.mapping(allocation, "devices", "status.allocation.devices")
    results = []
    for i, item in enumerate(
        bounded(
            fields, devices, "results", "status.allocation.devices.results", MAX_ALLOCATION_RESULTS
        )
    ):
        at = f"status.allocation.devices.results[{i}]"
        values = []
        for key in ("request", "driver", "pool", "device"):
            value = item.get(key, MISSING)
            if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
                raise fields.fail(
                    f"{at}.{key}", value, f"a name of at most {MAX_NAME_LENGTH} characters"
                )
            values.append(value)
        consumed = {
            str(k): fields.quantity(v, f"{at}.consumedCapacity[{k}]")
            for k, v in fields.mapping(item, "consumedCapacity", f"{at}.consumedCapacity").items()
        }
        request, driver, pool, device = values
        results.append(DeviceResult(request, driver, pool, device, consumed))
    node = ""
    if allocation.get("nodeSelector") is not None:
        terms = node_selector(
            fields,
            fields.mapping(allocation, "nodeSelector", "status.allocation.nodeSelector"),
            "status.allocation.nodeSelector",
        )
        reqs = terms[0].requirements if len(terms) == 1 else ()
        if (
            len(reqs) != 1
            or not reqs[0].on_field
            or reqs[0].operator != "In"
            or len(reqs[0].values) != 1
        ):
            raise fields.fail(
                "status.allocation.nodeSelector",
                allocation["nodeSelector"],
                "one term with matchFields metadata.name In [node], as kube-scheduler writes it",
            )
        node = reqs[0].values[0]
    return ClaimAllocation(tuple(results), node)


def resource_claim_from_k8s(obj: Mapping[str, Any]) -> ResourceClaim:
    fields = Fields(object_name("ResourceClaim", obj))
    name, namespace = fields.named(obj)
    spec = claim_spec_from_k8s(fields, fields.mapping(obj, "spec", "spec"), "spec")
    status = fields.mapping(obj, "status", "status")
    reserved = []
    for i, item in enumerate(
        bounded(fields, status, "reservedFor", "status.reservedFor", MAX_RESERVED_FOR)
    ):
        consumer = item.get("name", MISSING)
        if not isinstance(consumer, str) or not consumer or len(consumer) > MAX_NAME_LENGTH:
            raise fields.fail(f"status.reservedFor[{i}].name", consumer, "the consumer's name")
        reserved.append(consumer)
    return ResourceClaim(namespace, name, spec, _allocation(fields, status), tuple(reserved))


def resource_claim_template_from_k8s(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    fields = Fields(object_name("ResourceClaimTemplate", obj))
    name, namespace = fields.named(obj)
    spec = fields.mapping(fields.mapping(obj, "spec", "spec"), "spec", "spec.spec")
    return ResourceClaimTemplate(namespace, name, claim_spec_from_k8s(fields, spec, "spec.spec"))


# ---------------------------------------------------------------------------- pods


def pod_claims_from_k8s(obj: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """A pod's ``spec.resourceClaims``; every container's ``resources.claims`` must name one."""
    fields = Fields(object_ref("Pod", obj))
    spec = fields.mapping(obj, "spec", "spec")
    claims: list[PodClaim] = []
    for i, item in enumerate(
        bounded(fields, spec, "resourceClaims", "spec.resourceClaims", MAX_POD_CLAIMS)
    ):
        at = f"spec.resourceClaims[{i}]"
        name = dns_label(fields, item.get("name", MISSING), f"{at}.name")
        if any(c.name == name for c in claims):
            raise fields.fail(f"{at}.name", name, "a name no other entry has")
        claim_name = item.get("resourceClaimName")
        template = item.get("resourceClaimTemplateName")
        if (claim_name is None) == (template is None):
            raise fields.fail(
                at, item, "exactly one of resourceClaimName and resourceClaimTemplateName"
            )
        if claim_name is not None:
            claims.append(
                PodClaim(
                    name, claim_name=dns_subdomain(fields, claim_name, f"{at}.resourceClaimName")
                )
            )
        else:
            claims.append(
                PodClaim(
                    name,
                    template_name=dns_subdomain(
                        fields, template, f"{at}.resourceClaimTemplateName"
                    ),
                )
            )
    names = {c.name for c in claims}
    for kind in ("initContainers", "containers"):
        for c, container in enumerate(fields.items(spec, kind, f"spec.{kind}")):
            resources = fields.mapping(container, "resources", f"spec.{kind}[{c}].resources")
            for r, ref in enumerate(
                bounded(
                    fields,
                    resources,
                    "claims",
                    f"spec.{kind}[{c}].resources.claims",
                    MAX_POD_CLAIMS,
                )
            ):
                if ref.get("name") not in names:
                    raise fields.fail(
                        f"spec.{kind}[{c}].resources.claims[{r}].name",
                        ref.get("name"),
                        "the name of an entry of spec.resourceClaims",
                    )
    return tuple(claims)
