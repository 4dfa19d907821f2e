"""DRA objects (``resource.k8s.io/v1``) read into :mod:`kgpu.model.dra`: DeviceClasses and
ResourceSlices here, claims, their templates and pods' claims in
:mod:`kgpu.kube.objects.dra_claim_objects`, what both share in :mod:`kgpu.kube.objects.dra_fields`.

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

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from kgpu.kube.objects.dra_fields import (
    DNS_SUBDOMAIN,
    GROUP_VERSION,
    KINDS,
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
from kgpu.model.dra import (
    MAX_ATTRIBUTE_STRING,
    MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES,
    MAX_NAME_LENGTH,
    MAX_SLICE_DEVICES,
    AttributeValue,
    Device,
    DeviceClass,
    NodeSelectorTerm,
    ResourceSlice,
    SemVerError,
    parse_semver,
)

_INT64: Final = 2**63


def is_dra(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == GROUP_VERSION and obj.get("kind") in KINDS


# ---------------------------------------------------------------------------- DeviceClass


def device_class_from_k8s(obj: Mapping[str, Any]) -> DeviceClass:
    fields = Fields(object_name("DeviceClass", obj))
    name = dns_subdomain(
        fields, fields.mapping(obj, "metadata", "metadata").get("name", MISSING), "metadata.name"
    )
    spec = fields.mapping(obj, "spec", "spec")
    if spec.get("extendedResourceName") is not None:
        raise fields.fail(
            "spec.extendedResourceName",
            spec["extendedResourceName"],
            "unset (kgpu does not read extended resources backed by DRA, alpha in 1.34)",
        )
    return DeviceClass(name, selectors(fields, spec, "spec.selectors"))


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
    name = dns_label(fields, item.get("name", MISSING), f"{field}.name")
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
        qualified = qualified_name(fields, key, f"{field}.attributes", driver)
        attributes[qualified] = _attribute(fields, value, f"{field}.attributes[{key}]")
    capacity: dict[str, Fraction] = {}
    for key, value in capacity_in.items():
        qualified = qualified_name(fields, key, f"{field}.capacity", driver)
        where = f"{field}.capacity[{key}]"
        entry = value if isinstance(value, Mapping) else {}
        if "value" not in entry:
            raise fields.fail(where, value, "a mapping with value: a quantity")
        capacity[qualified] = fields.quantity(entry["value"], f"{where}.value")
    allow = item.get("allowMultipleAllocations", False)
    if not isinstance(allow, bool):
        raise fields.fail(f"{field}.allowMultipleAllocations", allow, "true or false")
    return Device(name, attributes, capacity, allow)


def resource_slice_from_k8s(obj: Mapping[str, Any]) -> ResourceSlice:
    fields = Fields(object_name("ResourceSlice", obj))
    name = dns_subdomain(
        fields, fields.mapping(obj, "metadata", "metadata").get("name", MISSING), "metadata.name"
    )
    spec = fields.mapping(obj, "spec", "spec")
    driver = dns_subdomain(fields, spec.get("driver", MISSING), "spec.driver", 63)
    pool = fields.mapping(spec, "pool", "spec.pool")
    pool_name = pool.get("name", MISSING)
    if (
        not isinstance(pool_name, str)
        or not pool_name
        or len(pool_name) > MAX_NAME_LENGTH
        or not all(DNS_SUBDOMAIN.fullmatch(p) for p in pool_name.split("/"))
    ):
        raise fields.fail(
            "spec.pool.name",
            pool_name,
            f"DNS subdomains joined by '/', at most {MAX_NAME_LENGTH} characters",
        )
    generation = int_in(
        fields, pool.get("generation", MISSING), "spec.pool.generation", 0, _INT64 - 1
    )
    count = int_in(
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
        terms = node_selector(
            fields, fields.mapping(spec, "nodeSelector", "spec.nodeSelector"), "spec.nodeSelector"
        )
    devices = []
    seen: set[str] = set()
    for i, item in enumerate(bounded(fields, spec, "devices", "spec.devices", MAX_SLICE_DEVICES)):
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
