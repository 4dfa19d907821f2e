"""Koordinator's own objects, read into kgpu's model, and the record koordlet reads.

Three things of Koordinator's fine-grained device scheduling (its ``apis/extension`` and
``apis/scheduling/v1alpha1``) are spoken here, each by a pure function:

* **A node's GPU resources**, as koordlet advertises them in ``status.allocatable`` (or
  ``capacity``): ``kubernetes.io/gpu-core``, ``kubernetes.io/gpu-memory-ratio`` (100 each
  per GPU) and ``kubernetes.io/gpu-memory`` (bytes, all GPUs together), or the same under
  ``koordinator.sh/``, the names Koordinator uses today. :func:`advertised_gpus` reads
  them as ``gpu-memory-ratio / 100`` GPUs of ``gpu-memory / count`` each; the node's
  other figures still come from :func:`~kgpu.kube.objects.node_pod.node_from_k8s`, and the
  device plugin's ``nvidia.com/gpu`` and GFD's labels, where a node has them, win.
* **The** ``scheduling.koordinator.sh/v1alpha1`` **Device** (one per node, named as the
  node, written by koordlet): ``spec.devices[]`` with ``type`` (gpu, rdma, fpga; xpu is
  not scheduled by kgpu and skipped), ``id`` (the GPU's UUID), ``minor``, ``health``
  (absent means false, the CRD's default), ``resources`` (``gpu-memory`` under either
  prefix) and ``topology`` (``nodeID`` as the NUMA node, ``pcieID``); its annotation
  ``node.koordinator.sh/devices-checkpoints`` as kgpu's Device's. :func:`devices_from_device`.
  Where a node has both a kgpu.io Device and a Koordinator one, kgpu's wins
  (:func:`device_by_node`): kgpu's agent reads NVML and the kubelet itself, and its NVLink
  peers, which Koordinator's Device does not carry.
* **The allocation koordlet reads**, ``scheduling.koordinator.sh/device-allocated`` on a
  bound pod (``DeviceAllocations`` of ``apis/extension``)::

      {"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50",
               "koordinator.sh/gpu-memory":"4Gi","koordinator.sh/gpu-memory-ratio":"50"}}]}

  written with the Binding for pods that asked in Koordinator's names, in ``koordinator.sh/``
  names (Koordinator maps the deprecated ``kubernetes.io/`` ones to those) and quantities
  as Go writes them. :func:`device_allocated` makes it from kgpu's own record, so the two
  agree by construction. It is never read back: kgpu's signed ``kgpu.io/device-allocation``
  stays the truth after a restart (docs/SECURITY.md, "Reserved annotations").

Every malformed value raises :class:`ConversionError` naming the object, the field, the
value and what was expected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Final, NamedTuple

from kgpu.kube.api.resource_types import Resource
from kgpu.kube.objects.device_allocation import (
    ALLOCATION_ANNOTATION,
    GPU_CORE,
    GPU_MEMORY,
    GPU_MEMORY_RATIO,
)
from kgpu.kube.objects.device_cr import device_parts, read_checkpoints
from kgpu.kube.objects.fields import MISSING, ConversionError, Fields
from kgpu.kube.objects.gpu_dialects import KOORDINATOR_PREFIXES
from kgpu.kube.objects.node_pod import node_from_k8s, object_ref
from kgpu.model.devices import Device, NodeDevices
from kgpu.model.limits import MAX_GPU_MEMORY_MIB, MAX_NODE_GPUS
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.model.topology import links_from_peers
from kgpu.model.units import GPU_CORE_PER_GPU, MIB

__all__ = [
    "DEVICE_ALLOCATED_ANNOTATION",
    "DEVICE_API_VERSION",
    "KOORDINATOR_DEVICES",
    "ConversionError",
    "advertised_gpus",
    "asked_in_koordinator_names",
    "device_allocated",
    "device_by_node",
    "devices_from_device",
    "is_koordinator_device",
    "koordinator_notes",
    "node_info",
]

GROUP: Final = "scheduling.koordinator.sh"
DEVICE_API_VERSION: Final = f"{GROUP}/v1alpha1"
DEVICE_ALLOCATED_ANNOTATION: Final = f"{GROUP}/device-allocated"
# Read live where the CRD is installed (koordlet's), by an optional informer.
KOORDINATOR_DEVICES: Final = Resource(GROUP, "v1alpha1", "devices", "Device", namespaced=False)
# Koordinator's names today; ``kubernetes.io/`` ones are its deprecated spellings.
KOORD: Final = "koordinator.sh/"
_KINDS: Final = ("gpu", "rdma", "fpga")
_SKIPPED_KINDS: Final = ("xpu",)  # Koordinator's, not scheduled by kgpu
_MAX_INT32: Final = 2**31 - 1
_MAX_ID: Final = 253
_PER_GPU: Final = f"a multiple of {GPU_CORE_PER_GPU} ({GPU_CORE_PER_GPU} per GPU)"


# ---------------------------------------------------------------------------- nodes


def advertised_gpus(obj: Mapping[str, Any]) -> tuple[int, int] | None:
    """(GPUs, MiB per GPU) that koordlet's resources in a Node's status say; None when the
    node advertises none of them (it then reads exactly as without this module)."""
    fields = Fields(object_ref("Node", obj))
    status = fields.mapping(obj, "status", "status")
    # As node_from_k8s: allocatable, else capacity for a hand-written node.
    has_capacity_only = status.get("allocatable") is None and status.get("capacity") is not None
    where = "capacity" if has_capacity_only else "allocatable"
    alloc = fields.mapping(status, where, f"status.{where}")
    core = _node_amount(fields, alloc, where, "gpu-core")
    ratio = _node_amount(fields, alloc, where, "gpu-memory-ratio")
    memory = _node_amount(fields, alloc, where, "gpu-memory")
    if core is None and ratio is None and memory is None:
        return None
    if ratio is None:
        said = core or memory
        assert said is not None
        raise fields.fail(
            said.field,
            said.raw,
            f"kubernetes.io/gpu-memory-ratio (or koordinator.sh/) beside it: {_PER_GPU}",
        )
    amount = ratio.amount
    if amount.denominator != 1 or amount % GPU_CORE_PER_GPU:
        raise fields.fail(ratio.field, ratio.raw, _PER_GPU)
    count = int(amount) // GPU_CORE_PER_GPU
    if count > MAX_NODE_GPUS:
        raise fields.fail(ratio.field, ratio.raw, f"at most {MAX_NODE_GPUS * GPU_CORE_PER_GPU}")
    if core is not None and core.amount != amount:
        raise fields.fail(core.field, core.raw, f"{ratio.raw}, as {ratio.field} says")
    per_gpu = 0
    if memory is not None and count:
        per_gpu = math.floor(memory.amount / count / MIB)
        if per_gpu > MAX_GPU_MEMORY_MIB:
            raise fields.fail(
                memory.field, memory.raw, f"at most {MAX_GPU_MEMORY_MIB}Mi per GPU ({count} GPUs)"
            )
    return count, per_gpu


class _Said(NamedTuple):
    field: str
    amount: Fraction
    raw: object  # as written, for messages


def _node_amount(fields: Fields, alloc: Mapping[str, Any], where: str, suffix: str) -> _Said | None:
    """``kubernetes.io/<suffix>`` or ``koordinator.sh/<suffix>``; both may be there (while
    koordlet moves to the new name), then they must agree."""
    found: list[_Said] = []
    for prefix in KOORDINATOR_PREFIXES:
        value = alloc.get(prefix + suffix)
        if value is not None:
            field = f"status.{where}[{prefix}{suffix}]"
            found.append(_Said(field, fields.quantity(value, field), value))
    if len(found) == 2 and found[0].amount != found[1].amount:
        first, second = found
        raise fields.fail(second.field, second.raw, f"{first.raw}, as {first.field} says")
    return found[0] if found else None


# ---------------------------------------------------------------------------- Devices


def is_koordinator_device(obj: Mapping[str, Any]) -> bool:
    """Whether a Device is Koordinator's (its apiVersion's group), not kgpu's."""
    version = obj.get("apiVersion")
    return isinstance(version, str) and version.split("/", 1)[0] == GROUP


def device_by_node(
    kgpu: Iterable[Mapping[str, Any]], koordinator: Iterable[Mapping[str, Any]]
) -> dict[str, Mapping[str, Any]]:
    """Each node's Device by node name: kgpu.io's where a node has both."""
    out: dict[str, Mapping[str, Any]] = {}
    for obj in (*koordinator, *kgpu):  # kgpu's last, so they replace Koordinator's
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(name, str) and name:
            out[name] = obj
    return out


def devices_from_device(obj: Mapping[str, Any]) -> NodeDevices:
    """A ``scheduling.koordinator.sh/v1alpha1`` Device as the model's NodeDevices."""
    fields, annotations, spec = device_parts(obj)
    found: dict[str, list[Device]] = {k: [] for k in _KINDS}
    minors: set[tuple[str, int]] = set()
    ids: dict[str, int] = {}
    for i, item in enumerate(fields.items(spec, "devices", "spec.devices")):
        where = f"spec.devices[{i}]"
        kind = item.get("type", MISSING)
        if kind in _SKIPPED_KINDS:
            continue
        if kind not in _KINDS:
            raise fields.fail(f"{where}.type", kind, "one of gpu, rdma, fpga, xpu")
        minor = item.get("minor", MISSING)
        if isinstance(minor, bool) or not isinstance(minor, int) or not 0 <= minor <= _MAX_INT32:
            raise fields.fail(f"{where}.minor", minor, "a minor number (0, 1, ...)")
        if (kind, minor) in minors:
            raise fields.fail(f"{where}.minor", minor, f"each {kind} minor once")
        minors.add((kind, minor))
        uuid = fields.string(item, "id", f"{where}.id")
        if len(uuid) > _MAX_ID:
            raise fields.fail(f"{where}.id", uuid, f"a device id of at most {_MAX_ID} characters")
        if uuid and uuid in ids:
            raise fields.fail(
                f"{where}.id", uuid, f"each id once (spec.devices[{ids[uuid]}] has it)"
            )
        if uuid:
            ids[uuid] = i
        # Koordinator's CRD defaults health to false: a device not said healthy is not used.
        health = item.get("health", False)
        if not isinstance(health, bool):
            raise fields.fail(f"{where}.health", health, "true or false")
        topology = fields.mapping(item, "topology", f"{where}.topology")
        for key in ("nodeID", "socketID"):
            value = topology.get(key, -1)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not -1 <= value <= _MAX_INT32
            ):
                raise fields.fail(f"{where}.topology.{key}", value, "a NUMA node or socket number")
        fields.string(topology, "busID", f"{where}.topology.busID")
        found[kind].append(
            Device(
                minor=minor,
                uuid=uuid,
                healthy=health,
                memory_mib=_device_memory(fields, item, where),
                numa=topology.get("nodeID", -1),
                pcie=fields.string(topology, "pcieID", f"{where}.topology.pcieID"),
            )
        )
    gpus = tuple(sorted(found["gpu"], key=lambda d: d.minor))
    checkpoints, refused = read_checkpoints(fields, annotations, gpus)
    links = None
    if any(d.numa >= 0 or d.pcie for d in gpus):
        # No NVLink peers in Koordinator's Device: PCIe switch and NUMA node only.
        links = links_from_peers(
            len(gpus), [[] for _ in gpus], [d.pcie for d in gpus], [d.numa for d in gpus]
        )
    return NodeDevices(
        gpus=gpus,
        rdma=tuple(sorted(found["rdma"], key=lambda d: d.minor)),
        fpga=tuple(sorted(found["fpga"], key=lambda d: d.minor)),
        links=links,
        checkpoints=checkpoints,
        refused=refused,
    )


def _device_memory(fields: Fields, item: Mapping[str, Any], where: str) -> int:
    """A device's ``gpu-memory`` in MiB (0 when absent); every resource a quantity."""
    resources = fields.mapping(item, "resources", f"{where}.resources")
    amounts = {
        str(name): fields.quantity(value, f"{where}.resources[{name}]")
        for name, value in resources.items()
    }
    said = [
        (p + "gpu-memory", amounts[p + "gpu-memory"])
        for p in KOORDINATOR_PREFIXES
        if p + "gpu-memory" in amounts
    ]
    if len(said) == 2 and said[0][1] != said[1][1]:
        raise fields.fail(
            f"{where}.resources[{said[1][0]}]",
            resources[said[1][0]],
            f"{resources[said[0][0]]}, as resources[{said[0][0]}] says",
        )
    return math.floor(said[0][1] / MIB) if said else 0


def node_info(obj: Mapping[str, Any], device: Mapping[str, Any] | None = None) -> NodeInfo:
    """A Node read with its Device, kgpu's or Koordinator's, and koordlet's resources."""
    if device is not None and is_koordinator_device(device):
        return node_from_k8s(
            obj, devices=devices_from_device(device), agent_gpus=advertised_gpus(obj)
        )
    return node_from_k8s(obj, device, agent_gpus=advertised_gpus(obj))


# ---------------------------------------------------------------------------- the record


def asked_in_koordinator_names(spec: PodSpec) -> bool:
    """Whether a pod asked for its GPUs (or RDMA, FPGA) in Koordinator's resource names."""
    gpu = spec.gpu
    origin = gpu.origin.removeprefix("resource ")
    return origin.startswith(KOORDINATOR_PREFIXES) or bool(gpu.rdma or gpu.fpga)


def device_allocated(record: str) -> str:
    """``scheduling.koordinator.sh/device-allocated`` for kgpu's record ``record`` (the
    ``kgpu.io/device-allocation`` text kgpu just rendered): the same minors, compute,
    memory ratio and memory, in Koordinator's names and format."""
    data = json.loads(record)
    out: dict[str, list[dict[str, Any]]] = {}
    gpus = []
    for entry in data.get("gpu", []):
        had = entry["resources"]
        resources = {KOORD + "gpu-core": str(had[GPU_CORE])}
        if GPU_MEMORY in had:
            resources[KOORD + "gpu-memory"] = _binary(math.ceil(_mib(had[GPU_MEMORY])))
        resources[KOORD + "gpu-memory-ratio"] = str(had[GPU_MEMORY_RATIO])
        gpus.append({"minor": entry["minor"], "resources": resources})
    if gpus:
        out["gpu"] = gpus
    for kind in ("rdma", "fpga"):
        held = [
            {
                "minor": e["minor"],
                "resources": {KOORD + kind: str(GPU_CORE_PER_GPU)},
                **({"id": e["uuid"]} if e.get("uuid") else {}),
            }
            for e in data.get(kind, [])
        ]
        if held:
            out[kind] = held
    # Go's encoding/json: map keys sorted, struct fields in order, nothing between tokens.
    return json.dumps(dict(sorted(out.items())), separators=(",", ":"))


def koordinator_notes(spec: PodSpec, notes: Mapping[str, str]) -> dict[str, str]:
    """The Koordinator record to write beside kgpu's ``notes`` (empty when the pod did not
    ask in Koordinator's names, or kgpu records nothing for it)."""
    record = notes.get(ALLOCATION_ANNOTATION)
    if record is None or not asked_in_koordinator_names(spec):
        return {}
    return {DEVICE_ALLOCATED_ANNOTATION: device_allocated(record)}


def _mib(text: str) -> Fraction:
    """kgpu's own ``"<n>Mi"``: the MiB it rendered."""
    return Fraction(text.removesuffix("Mi"))


def _binary(mib: int) -> str:
    """MiB as Go's resource.Quantity writes bytes (BinarySI): the largest exact unit."""
    if mib == 0:
        return "0"
    amount, units = mib, ["Mi", "Gi", "Ti", "Pi", "Ei"]
    unit = 0
    while amount % 1024 == 0 and unit < len(units) - 1:
        amount //= 1024
        unit += 1
    return f"{amount}{units[unit]}"
