"""DRA objects (``resource.k8s.io/v1``) read into :mod:`kgpu.model.dra`.

Every object is untrusted: past Kubernetes' own bounds (128 devices a slice, 32 attributes
and capacities a device, 32 requests, 10 KiB a CEL expression, ...) or malformed, it is
refused alone with a :class:`ConversionError` naming the object, the field, the value and
what was expected. Selectors are compiled here, so a claim whose CEL does not compile is
refused when read, not when a pod waits on it.

What kgpu does not read is refused rather than ignored where ignoring it could allocate a
device wrongly: partitionable devices (shared counters), device taints, admin access,
``distinctAttribute`` constraints and per-device node selection (alpha features of 1.34).
Opaque driver configuration (``config``) is the driver's business and is not read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from kgpu.dra.cel_selectors import SelectorError, compile_selector
from kgpu.kube.objects.fields import MISSING, Fields
from kgpu.kube.objects.node_pod import object_ref
from kgpu.model.dra import (
    MAX_ALLOCATION_RESULTS,
    MAX_ATTRIBUTE_STRING,
    MAX_CONSTRAINTS,
    MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES,
    MAX_DOMAIN_LENGTH,
    MAX_FIRST_AVAILABLE,
    MAX_ID_LENGTH,
    MAX_NAME_LENGTH,
    MAX_NODE_SELECTOR_TERMS,
    MAX_POD_CLAIMS,
    MAX_REQUESTS,
    MAX_RESERVED_FOR,
    MAX_SELECTOR_VALUES,
    MAX_SELECTORS,
    MAX_SLICE_DEVICES,
    AllocationMode,
    AttributeValue,
    ClaimAllocation,
    ClaimSpec,
    Constraint,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    ExactRequest,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodClaim,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    SemVerError,
    SubRequest,
    parse_semver,
)

GROUP_VERSION: Final = "resource.k8s.io/v1"
KINDS: Final = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
_CLUSTER_SCOPED: Final = ("DeviceClass", "ResourceSlice")

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_C_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT64: Final = 2**63
_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def is_dra(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == GROUP_VERSION and obj.get("kind") in KINDS


def _ref(kind: str, obj: Mapping[str, Any]) -> str:
    ref = object_ref(kind, obj)
    if kind in _CLUSTER_SCOPED:  # no namespace: "DeviceClass gpu.nvidia.com"
        ref = f"{kind} {ref.partition('/')[2]}"
    return ref


def _dns_label(fields: Fields, value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise fields.fail(
            field, value, "a DNS label (lower-case letters, digits and '-', at most 63)"
        )
    return value


def _dns_subdomain(fields: Fields, value: object, field: str, limit: int = MAX_NAME_LENGTH) -> str:
    if not isinstance(value, str) or len(value) > limit or not _DNS_SUBDOMAIN.fullmatch(value):
        raise fields.fail(field, value, f"a DNS subdomain of at most {limit} characters")
    return value


def _bounded(
    fields: Fields, parent: Mapping[str, Any], key: str, field: str, limit: int
) -> list[Mapping[str, Any]]:
    items = fields.items(parent, key, field)
    if len(items) > limit:
        raise fields.fail(field, f"{len(items)} entries", f"at most {limit}")
    return items


def _int(fields: Fields, value: object, field: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise fields.fail(field, value, f"an integer from {low} to {high}")
    return value


def _qualified(fields: Fields, name: object, field: str, driver: str = "") -> str:
    """A qualified name ``domain/id``; a bare ``id`` takes ``driver`` as its domain where
    one is given (attributes and capacities of a slice), else is refused."""
    if not isinstance(name, str):
        raise fields.fail(field, name, "a name such as gpu.nvidia.com/productName")
    domain, slash, ident = name.rpartition("/")
    if not slash:
        domain = driver
    if not _C_IDENTIFIER.fullmatch(ident) or len(ident) > MAX_ID_LENGTH:
        raise fields.fail(
            field,
            name,
            f"a name of at most {MAX_ID_LENGTH} letters, digits and '_' after the domain",
        )
    if not domain or len(domain) > MAX_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.fullmatch(domain):
        raise fields.fail(
            field, name, f"a domain (a DNS subdomain of at most {MAX_DOMAIN_LENGTH}) before '/'"
        )
    return f"{domain}/{ident}"


def _selectors(fields: Fields, parent: Mapping[str, Any], field: str) -> tuple[str, ...]:
    out = []
    for i, item in enumerate(_bounded(fields, parent, "selectors", field, MAX_SELECTORS)):
        where = f"{field}[{i}].cel.expression"
        expression = fields.mapping(item, "cel", f"{field}[{i}].cel").get("expression", MISSING)
        if not isinstance(expression, str) or not expression:
            raise fields.fail(where, expression, "a CEL expression")
        try:
            compile_selector(expression)
        except SelectorError as exc:
            raise fields.fail(
                where, expression, f"a CEL expression kgpu can evaluate; it {exc}"
            ) from None
        out.append(expression)
    return tuple(out)


# ---------------------------------------------------------------------------- DeviceClass


def device_class_from_k8s(obj: Mapping[str, Any]) -> DeviceClass:
    fields = Fields(_ref("DeviceClass", obj))
    name = _dns_subdomain(
        fields, fields.mapping(obj, "metadata", "metadata").get("name", MISSING), "metadata.name"
    )
    spec = fields.mapping(obj, "spec", "spec")
    if spec.get("extendedResourceName") is not None:
        raise fields.fail(
            "spec.extendedResourceName",
            spec["extendedResourceName"],
            "unset (kgpu does not read extended resources backed by DRA, alpha in 1.34)",
        )
    return DeviceClass(name, _selectors(fields, spec, "spec.selectors"))


# ---------------------------------------------------------------------------- ResourceSlice


def _attribute(fields: Fields, value: object, field: str) -> AttributeValue:
    if not isinstance(value, Mapping) or len(value) != 1:
        raise fields.fail(field, value, "exactly one of int, bool, string and version")
    ((kind, v),) = value.items()
    if kind == "int" and isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64:
        return v
    if kind == "bool" and isinstance(v, bool):
        return v
    if kind == "string" and isinstance(v, str) and len(v) <= MAX_ATTRIBUTE_STRING:
        return v
    if kind == "version" and isinstance(v, str):
        try:
            return parse_semver(v)
        except SemVerError:
            pass
    expected = {
        "int": "a 64-bit integer",
        "bool": "true or false",
        "string": f"a string of at most {MAX_ATTRIBUTE_STRING} characters",
        "version": f"a semantic version (1.2.3) of at most {MAX_ATTRIBUTE_STRING} characters",
    }.get(str(kind), "exactly one of int, bool, string and version")
    return _raise(fields, f"{field}.{kind}", v, expected)


def _raise(fields: Fields, field: str, value: object, expected: str) -> AttributeValue:
    raise fields.fail(field, value, expected)


def _device(fields: Fields, item: Mapping[str, Any], field: str, driver: str) -> Device:
    name = _dns_label(fields, item.get("name", MISSING), f"{field}.name")
    for alpha in (
        "consumesCounters",
        "taints",
        "bindingConditions",
        "nodeName",
        "nodeSelector",
        "allNodes",
    ):
        if item.get(alpha) is not None:
            raise fields.fail(
                f"{field}.{alpha}",
                item[alpha],
                "unset (an alpha feature of 1.34 kgpu does not read)",
            )
    attributes_in = fields.mapping(item, "attributes", f"{field}.attributes")
    capacity_in = fields.mapping(item, "capacity", f"{field}.capacity")
    total = len(attributes_in) + len(capacity_in)
    if total > MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES:
        raise fields.fail(
            f"{field}.attributes",
            f"{total} attributes and capacities",
            f"at most {MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES} together",
        )
    attributes: dict[str, AttributeValue] = {}
    for key, value in attributes_in.items():
        qualified = _qualified(fields, key, f"{field}.attributes", driver)
        attributes[qualified] = _attribute(fields, value, f"{field}.attributes[{key}]")
    capacity: dict[str, Fraction] = {}
    for key, value in capacity_in.items():
        qualified = _qualified(fields, key, f"{field}.capacity", driver)
        where = f"{field}.capacity[{key}]"
        entry = value if isinstance(value, Mapping) else {}
        if "value" not in entry:
            raise fields.fail(where, value, "a mapping with value: a quantity")
        capacity[qualified] = fields.quantity(entry["value"], f"{where}.value")
    allow = item.get("allowMultipleAllocations", False)
    if not isinstance(allow, bool):
        raise fields.fail(f"{field}.allowMultipleAllocations", allow, "true or false")
    return Device(name, attributes, capacity, allow)


def _node_selector(
    fields: Fields, value: Mapping[str, Any], field: str
) -> tuple[NodeSelectorTerm, ...]:
    terms = []
    for t, term in enumerate(
        _bounded(
            fields,
            value,
            "nodeSelectorTerms",
            f"{field}.nodeSelectorTerms",
            MAX_NODE_SELECTOR_TERMS,
        )
    ):
        reqs = []
        for key, on_field in (("matchExpressions", False), ("matchFields", True)):
            where = f"{field}.nodeSelectorTerms[{t}].{key}"
            for r, req in enumerate(_bounded(fields, term, key, where, MAX_NODE_SELECTOR_TERMS)):
                at = f"{where}[{r}]"
                label = fields.string(req, "key", f"{at}.key")
                if not label or (on_field and label != "metadata.name"):
                    raise fields.fail(
                        f"{at}.key", req.get("key"), "metadata.name" if on_field else "a label key"
                    )
                op = req.get("operator")
                if op not in _OPERATORS:
                    raise fields.fail(f"{at}.operator", op, "one of " + ", ".join(_OPERATORS))
                values = req.get("values") or []
                if (
                    not isinstance(values, list)
                    or len(values) > MAX_SELECTOR_VALUES
                    or not all(isinstance(v, str) for v in values)
                ):
                    raise fields.fail(
                        f"{at}.values", values, f"a list of at most {MAX_SELECTOR_VALUES} strings"
                    )
                if (
                    (
                        op in ("Gt", "Lt")
                        and (len(values) != 1 or not values[0].lstrip("-").isdigit())
                    )
                    or (op in ("Exists", "DoesNotExist") and values)
                    or (op in ("In", "NotIn") and not values)
                ):
                    raise fields.fail(f"{at}.values", values, f"what operator {op} takes")
                reqs.append(NodeSelectorRequirement(label, op, tuple(values), on_field))
        terms.append(NodeSelectorTerm(tuple(reqs)))
    return tuple(terms)


def resource_slice_from_k8s(obj: Mapping[str, Any]) -> ResourceSlice:
    fields = Fields(_ref("ResourceSlice", obj))
    name = _dns_subdomain(
        fields, fields.mapping(obj, "metadata", "metadata").get("name", MISSING), "metadata.name"
    )
    spec = fields.mapping(obj, "spec", "spec")
    driver = _dns_subdomain(fields, spec.get("driver", MISSING), "spec.driver", 63)
    pool = fields.mapping(spec, "pool", "spec.pool")
    pool_name = pool.get("name", MISSING)
    if (
        not isinstance(pool_name, str)
        or not pool_name
        or len(pool_name) > MAX_NAME_LENGTH
        or not all(_DNS_SUBDOMAIN.fullmatch(p) for p in pool_name.split("/"))
    ):
        raise fields.fail(
            "spec.pool.name",
            pool_name,
            f"DNS subdomains joined by '/', at most {MAX_NAME_LENGTH} characters",
        )
    generation = _int(
        fields, pool.get("generation", MISSING), "spec.pool.generation", 0, _INT64 - 1
    )
    count = _int(
        fields,
        pool.get("resourceSliceCount", MISSING),
        "spec.pool.resourceSliceCount",
        1,
        2**31 - 1,
    )
    for alpha in ("sharedCounters", "perDeviceNodeSelection"):
        if spec.get(alpha) not in (None, False):
            raise fields.fail(
                f"spec.{alpha}", spec[alpha], "unset (an alpha feature of 1.34 kgpu does not read)"
            )
    node_name = spec.get("nodeName")
    all_nodes = spec.get("allNodes")
    selector = spec.get("nodeSelector")
    chosen = [
        k
        for k, v in (("nodeName", node_name), ("allNodes", all_nodes), ("nodeSelector", selector))
        if v not in (None, False, "")
    ]
    if len(chosen) != 1:
        raise fields.fail(
            "spec",
            ", ".join(chosen) or "none of nodeName, allNodes, nodeSelector",
            "exactly one of nodeName, allNodes (true) and nodeSelector",
        )
    if node_name is not None and not isinstance(node_name, str):
        raise fields.fail("spec.nodeName", node_name, "a node's name")
    if all_nodes is not None and all_nodes is not True and all_nodes is not False:
        raise fields.fail("spec.allNodes", all_nodes, "true or false")
    terms: tuple[NodeSelectorTerm, ...] = ()
    if selector is not None:
        terms = _node_selector(
            fields, fields.mapping(spec, "nodeSelector", "spec.nodeSelector"), "spec.nodeSelector"
        )
    devices = []
    seen: set[str] = set()
    for i, item in enumerate(_bounded(fields, spec, "devices", "spec.devices", MAX_SLICE_DEVICES)):
        device = _device(fields, item, f"spec.devices[{i}]", driver)
        if device.name in seen:
            raise fields.fail(
                f"spec.devices[{i}].name", device.name, "a name no other device of the slice has"
            )
        seen.add(device.name)
        devices.append(device)
    return ResourceSlice(
        name,
        driver,
        pool_name,
        generation,
        count,
        tuple(devices),
        node_name or "",
        bool(all_nodes),
        terms,
    )


# ---------------------------------------------------------------------------- claims


def _exact(fields: Fields, item: Mapping[str, Any], field: str) -> ExactRequest:
    cls = _dns_subdomain(fields, item.get("deviceClassName", MISSING), f"{field}.deviceClassName")
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
        count = _int(fields, item.get("count", 1), f"{field}.count", 1, MAX_ALLOCATION_RESULTS)
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
        capacity[_qualified(fields, key, f"{field}.capacity.requests")] = fields.quantity(
            value, f"{field}.capacity.requests[{key}]"
        )
    return ExactRequest(cls, _selectors(fields, item, f"{field}.selectors"), mode, count, capacity)


def _request(fields: Fields, item: Mapping[str, Any], field: str) -> DeviceRequest:
    name = _dns_label(fields, item.get("name", MISSING), f"{field}.name")
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
        _bounded(fields, item, "firstAvailable", f"{field}.firstAvailable", MAX_FIRST_AVAILABLE)
    ):
        at = f"{field}.firstAvailable[{i}]"
        sub_name = _dns_label(fields, sub.get("name", MISSING), f"{at}.name")
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
        _bounded(fields, devices, "requests", f"{field}.devices.requests", MAX_REQUESTS)
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
        _bounded(fields, devices, "constraints", f"{field}.devices.constraints", MAX_CONSTRAINTS)
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
        attribute = _qualified(fields, item.get("matchAttribute", MISSING), f"{at}.matchAttribute")
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
        _bounded(
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
        terms = _node_selector(
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
    fields = Fields(_ref("ResourceClaim", obj))
    name, namespace = fields.named(obj)
    spec = claim_spec_from_k8s(fields, fields.mapping(obj, "spec", "spec"), "spec")
    status = fields.mapping(obj, "status", "status")
    reserved = []
    for i, item in enumerate(
        _bounded(fields, status, "reservedFor", "status.reservedFor", MAX_RESERVED_FOR)
    ):
        consumer = item.get("name", MISSING)
        if not isinstance(consumer, str) or not consumer or len(consumer) > MAX_NAME_LENGTH:
            raise fields.fail(f"status.reservedFor[{i}].name", consumer, "the consumer's name")
        reserved.append(consumer)
    return ResourceClaim(namespace, name, spec, _allocation(fields, status), tuple(reserved))


def resource_claim_template_from_k8s(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    fields = Fields(_ref("ResourceClaimTemplate", obj))
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
        _bounded(fields, spec, "resourceClaims", "spec.resourceClaims", MAX_POD_CLAIMS)
    ):
        at = f"spec.resourceClaims[{i}]"
        name = _dns_label(fields, item.get("name", MISSING), f"{at}.name")
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
                    name, claim_name=_dns_subdomain(fields, claim_name, f"{at}.resourceClaimName")
                )
            )
        else:
            claims.append(
                PodClaim(
                    name,
                    template_name=_dns_subdomain(
                        fields, template, f"{at}.resourceClaimTemplateName"
                    ),
                )
            )
    names = {c.name for c in claims}
    for kind in ("initContainers", "containers"):
        for c, container in enumerate(fields.items(spec, kind, f"spec.{kind}")):
            resources = fields.mapping(container, "resources", f"spec.{kind}[{c}].resources")
            for r, ref in enumerate(
                _bounded(
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
