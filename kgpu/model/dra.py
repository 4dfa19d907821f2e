"""Dynamic Resource Allocation (``resource.k8s.io/v1``, Kubernetes 1.34) as kgpu reads it.

Kubernetes-free data, parsed once at the edge (:mod:`kgpu.kube.objects.dra_objects`):
device classes, the devices drivers publish in ResourceSlices, the claims pods make on them
and what an allocation chose. The bounds below are Kubernetes' own validation limits, so an
object the API server would have refused is refused here too, alone.

A device is named by (driver, pool, device), as in an allocation result. Attribute and
capacity names are kept qualified (``gpu.nvidia.com/productName``): a name published
without a domain belongs to the slice's driver, as the API defines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Final, NewType

# ------------------------------------------------------- Kubernetes' limits (resource/v1)

MAX_SLICE_DEVICES: Final = 128  # ResourceSliceMaxDevices
MAX_DEVICE_ATTRIBUTES_AND_CAPACITIES: Final = 32  # per device, together
MAX_ATTRIBUTE_STRING: Final = 64  # DeviceAttributeMaxValueLength (string and version)
MAX_DOMAIN_LENGTH: Final = 63  # the domain of a qualified name (a DNS subdomain's label cap)
MAX_ID_LENGTH: Final = 32  # the name part of a qualified name (a C identifier)
MAX_REQUESTS: Final = 32  # DeviceRequestsMaxSize
MAX_SELECTORS: Final = 32  # DeviceSelectorsMaxSize (requests and classes)
MAX_CONSTRAINTS: Final = 32  # DeviceConstraintsMaxSize
MAX_FIRST_AVAILABLE: Final = 8  # FirstAvailableDeviceRequestMaxSize
MAX_ALLOCATION_RESULTS: Final = 32  # AllocationResultsMaxSize: devices of one claim
MAX_RESERVED_FOR: Final = 256  # ResourceClaimReservedForMaxSize
MAX_CEL_LENGTH: Final = 10 * 1024  # CELSelectorExpressionMaxLength
MAX_NAME_LENGTH: Final = 253  # a DNS subdomain (drivers, pools, classes, claims)
# A pod's spec.resourceClaims: Kubernetes sets no tighter bound than the object's size;
# kgpu takes the per-claim request limit, far past what a pod asks for.
MAX_POD_CLAIMS: Final = 32
MAX_NODE_SELECTOR_TERMS: Final = 32  # of a slice's nodeSelector, with as many expressions
MAX_SELECTOR_VALUES: Final = 256  # values of one node selector requirement

DeviceId = NewType("DeviceId", str)  # "driver/pool/device", as an allocation result names it


def device_id(driver: str, pool: str, device: str) -> DeviceId:
    return DeviceId(f"{driver}/{pool}/{device}")


@dataclass(frozen=True, slots=True, order=True)
class SemVer:
    """A ``version`` attribute: semantic versioning 2.0.0, ordered as it defines (build
    metadata ignored; a pre-release orders before its release)."""

    major: int
    minor: int
    patch: int
    release: bool = True  # False when there is a pre-release: orders it first
    pre: tuple[tuple[int, int | str], ...] = ()  # (0, n) numeric or (1, text) identifiers
    text: str = field(default="", compare=False)

    def __str__(self) -> str:
        return self.text


class SemVerError(ValueError):
    pass


# semver.org's own expression (numbers without leading zeros; pre-release and build parts).
_SEMVER: Final = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?"
)


def parse_semver(text: str) -> SemVer:
    if len(text) > MAX_ATTRIBUTE_STRING or not (m := _SEMVER.fullmatch(text)):
        raise SemVerError(f"{text[:MAX_ATTRIBUTE_STRING]!r} is not a semantic version (1.2.3)")
    pre = tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in (m[4] or "").split(".") if part
    )
    return SemVer(int(m[1]), int(m[2]), int(m[3]), not pre, pre, text)


AttributeValue = bool | int | str | SemVer


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    capacity: dict[str, Fraction] = field(default_factory=dict)
    # Consumable capacity (DRAConsumableCapacity, alpha in 1.34): several requests may share
    # the device while their capacity requests fit in what it has.
    allow_multiple: bool = False


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()
    on_field: bool = False  # matchFields (metadata.name) rather than matchExpressions


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    requirements: tuple[NodeSelectorRequirement, ...] = ()


def _requirement_matches(req: NodeSelectorRequirement, name: str, labels: dict[str, str]) -> bool:
    value = name if req.on_field else labels.get(req.key)
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    if req.operator == "In":
        return value is not None and value in req.values
    if req.operator == "NotIn":
        return value is None or value not in req.values
    # Gt and Lt: an integer label against the one value (checked an integer when read).
    if value is None or not value.lstrip("-").isdigit():
        return False
    bound = int(req.values[0])
    return int(value) > bound if req.operator == "Gt" else int(value) < bound


def node_selector_matches(
    terms: tuple[NodeSelectorTerm, ...], name: str, labels: dict[str, str]
) -> bool:
    """A core NodeSelector: the terms are ORed, a term's requirements ANDed; a term with no
    requirement matches nothing, as in Kubernetes."""
    return any(
        t.requirements and all(_requirement_matches(r, name, labels) for r in t.requirements)
        for t in terms
    )


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """One slice of a driver's pool. Exactly one of ``node_name``, ``all_nodes`` and
    ``node_selector`` says where its devices are reachable."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    devices: tuple[Device, ...]
    node_name: str = ""
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] = ()

    def reaches(self, node: str, labels: dict[str, str]) -> bool:
        if self.node_name:
            return self.node_name == node
        if self.all_nodes:
            return True
        return node_selector_matches(self.node_selector, node, labels)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions, all of which a device must meet


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """What one request (or one ``firstAvailable`` alternative) asks for."""

    device_class: str
    selectors: tuple[str, ...] = ()
    mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    capacity: dict[str, Fraction] = field(default_factory=dict)  # capacity.requests


@dataclass(frozen=True, slots=True)
class SubRequest:
    name: str
    exactly: ExactRequest


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """``exactly`` or, in order of preference, ``first_available`` (never both)."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[SubRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class Constraint:
    """Devices of ``requests`` (all of the claim's when empty) share the attribute."""

    requests: tuple[str, ...]
    match_attribute: str


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One allocated device; ``request`` is "req" or, for an alternative, "req/sub"."""

    request: str
    driver: str
    pool: str
    device: str
    consumed: dict[str, Fraction] = field(default_factory=dict)  # consumable capacity

    @property
    def id(self) -> DeviceId:
        return device_id(self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """``status.allocation``: the devices, and the node they tie the claim to (none when
    every device is reachable from all nodes)."""

    results: tuple[DeviceResult, ...]
    node_name: str = ""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    spec: ClaimSpec
    allocation: ClaimAllocation | None = None
    reserved_for: tuple[str, ...] = ()  # the consumers' names (pods)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``: a claim by name or made from a
    template (one claim per pod, as the resource claim controller makes it)."""

    name: str
    claim_name: str = ""
    template_name: str = ""
