"""The ``Device`` resource (``kgpu.io/v1alpha1``, one per node) and the GPU link matrix.

A Device lists the node's devices as its agent sees them::

    spec:
      devices:
      - {type: gpu, minor: 0, uuid: GPU-…, health: true,
         resources: {kubernetes.io/gpu-memory: 80Gi},
         topology: {nodeID: 0, pcieID: "0000:10", nvlinkPeers: [1, 2, 3]}}
      - {type: rdma, minor: 0, uuid: mlx5_0, topology: {nodeID: 0, pcieID: "0000:10"}}

Its annotation ``kgpu.io/devices-checkpoints`` (or Koordinator's
``node.koordinator.sh/devices-checkpoints``) says which devices the kubelet gave each pod,
whoever placed it: ``[{"podUID": "…", "podNamespace": "…", "podName": "…",
"resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-…"]}]`` (the UID, or the namespace
and name, may be missing; ``nvidia.com/gpu`` ids are the ``uuid`` of GPUs listed in
``spec.devices``, ``nvidia.com/gpu.shared`` ids name replicas of them, ``GPU-…::3``, as
NVIDIA's device plugin does under MPS or time-slicing). The node's agent writes it, so it is read as untrusted: bounded, and an
entry that cannot be used is refused alone, with why (``NodeDevices.refused``).

The GPU link matrix, where ``nvidia-smi topo -m`` is known, is the annotation
``kgpu.io/gpu-topology`` on the Node (or the Device): rows of link kinds, one per GPU in
minor order, ``[["X", "NV4", "SYS"], ["NV4", "X", "SYS"], ["SYS", "SYS", "X"]]`` (or that
list under ``"links"``). Without it, a Device's ``nvlinkPeers``, ``pcieID`` and ``nodeID``
give a coarser one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any, Final

from kgpu.kube.objects.fields import MISSING, ConversionError, Fields, show
from kgpu.kube.objects.gpu_dialects import MPS_RESOURCE
from kgpu.model.devices import Checkpoint, Device, NodeDevices
from kgpu.model.json_text import OutOfBounds, read_json
from kgpu.model.topology import LINK_KINDS, GpuLinks, link_rank, links_from_peers
from kgpu.model.units import MIB

TOPOLOGY_ANNOTATION: Final = "kgpu.io/gpu-topology"
CHECKPOINT_ANNOTATIONS: Final = (
    "kgpu.io/devices-checkpoints",
    "node.koordinator.sh/devices-checkpoints",
    "node.koordinator.sh/gpu-checkpoints",
)
GPU_MEMORY: Final = "kubernetes.io/gpu-memory"
_KINDS: Final = ("gpu", "rdma", "fpga")
_MATRIX: Final = (
    'a JSON matrix of GPU link kinds, one row per GPU, such as [["X", "NV4"], ["NV4", "X"]], '
    f"the kinds being {LINK_KINDS}"
)
_CHECKPOINTS: Final = 'a JSON list such as [{"podUID": "…", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-…"]}]'
WHOLE_GPU_RESOURCE: Final = "nvidia.com/gpu"
# MPS (or time-sliced) replicas of a GPU, as NVIDIA's device plugin renames them.
SHARED_GPU_RESOURCE: Final = MPS_RESOURCE
# Bounds on what a node's agent can make the scheduler read: the API server's own limit on
# an object's annotations, entries for more pods than any node runs, more devices than a
# pod could be given, names longer than Kubernetes names.
MAX_CHECKPOINT_TEXT: Final = 256 * 1024
MAX_CHECKPOINT_ENTRIES: Final = 4096
MAX_DEVICE_IDS: Final = 256
MAX_NAME: Final = 253


def links_annotation(fields: Fields, text: str, field: str = "") -> GpuLinks:
    """The matrix of ``kgpu.io/gpu-topology``; ``fields`` names the object in errors."""
    field = field or f"annotation {TOPOLOGY_ANNOTATION}"
    try:
        data = read_json(text)
    except OutOfBounds as exc:
        raise fields.fail(field, text, f"{_MATRIX} ({exc})") from None
    except ValueError:
        raise fields.fail(field, text, _MATRIX) from None
    if isinstance(data, dict):
        data = data.get("links")
    if not isinstance(data, list) or not all(isinstance(r, list) for r in data):
        raise fields.fail(field, text, _MATRIX)
    n = len(data)
    rows = []
    for a, row in enumerate(data):
        if len(row) != n:
            raise fields.fail(field, text, f"{_MATRIX} (row {a} has {len(row)} entries, not {n})")
        ranks = []
        for b, kind in enumerate(row):
            rank = 0 if a == b else link_rank(kind) if isinstance(kind, str) else None
            if rank is None:
                raise fields.fail(f"{field}[{a}][{b}]", kind, f"a link kind: {LINK_KINDS}")
            ranks.append(rank)
        rows.append(tuple(ranks))
    for a in range(n):
        for b in range(a):
            if rows[a][b] != rows[b][a]:
                raise fields.fail(
                    f"{field}[{a}][{b}]", data[a][b], f"{data[b][a]}, as [{b}][{a}] says"
                )
    return GpuLinks(tuple(rows))


def device_parts(obj: Mapping[str, Any]) -> tuple[Fields, dict[str, str], Mapping[str, Any]]:
    """A Device's (kgpu's or Koordinator's) Fields, named for the Device, its annotations
    and its spec."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    fields = Fields(f"Device {name if isinstance(name, str) and name else '(no name)'}")
    meta = fields.mapping(obj, "metadata", "metadata")
    annotations = fields.strings(meta, "annotations", "annotation")
    return fields, annotations, fields.mapping(obj, "spec", "spec")


def devices_from_k8s(obj: Mapping[str, Any]) -> NodeDevices:
    """A Device resource as the model's NodeDevices; ConversionError names what is wrong."""
    fields, annotations, spec = device_parts(obj)
    found: dict[str, list[tuple[Device, list[int]]]] = {k: [] for k in _KINDS}
    seen: set[tuple[str, int]] = set()
    for i, item in enumerate(fields.items(spec, "devices", "spec.devices")):
        where = f"spec.devices[{i}]"
        kind = item.get("type", MISSING)
        if kind not in _KINDS:
            raise fields.fail(f"{where}.type", kind, "one of gpu, rdma, fpga")
        minor = item.get("minor", MISSING)
        if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
            raise fields.fail(f"{where}.minor", minor, "a minor number (0, 1, ...)")
        if (kind, minor) in seen:
            raise fields.fail(f"{where}.minor", minor, f"each {kind} minor once")
        seen.add((kind, minor))
        health = item.get("health", True)
        if not isinstance(health, bool):
            raise fields.fail(f"{where}.health", health, "true or false")
        resources = fields.mapping(item, "resources", f"{where}.resources")
        memory = 0
        if GPU_MEMORY in resources:
            amount = fields.quantity(resources[GPU_MEMORY], f"{where}.resources[{GPU_MEMORY}]")
            memory = math.floor(amount / MIB)
        topology = fields.mapping(item, "topology", f"{where}.topology")
        numa = topology.get("nodeID", -1)
        if isinstance(numa, bool) or not isinstance(numa, int):
            raise fields.fail(f"{where}.topology.nodeID", numa, "a NUMA node number")
        peers = topology.get("nvlinkPeers", [])
        if not isinstance(peers, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in peers
        ):
            raise fields.fail(f"{where}.topology.nvlinkPeers", peers, "a list of GPU minors")
        device = Device(
            minor=minor,
            uuid=fields.string(item, "uuid", f"{where}.uuid"),
            healthy=health,
            memory_mib=memory,
            numa=numa,
            pcie=fields.string(topology, "pcieID", f"{where}.topology.pcieID"),
        )
        found[kind].append((device, peers))
    gpus = sorted(found["gpu"], key=lambda d: d[0].minor)
    checkpoints, refused = read_checkpoints(fields, annotations, tuple(d for d, _ in gpus))
    text = annotations.get(TOPOLOGY_ANNOTATION)
    links = None
    if text is not None:
        links = links_annotation(fields, text)
    elif any(d.numa >= 0 or d.pcie or peers for d, peers in gpus):
        slot = {d.minor: i for i, (d, _) in enumerate(gpus)}
        links = links_from_peers(
            len(gpus),
            [[slot[p] for p in peers if p in slot] for _, peers in gpus],
            [d.pcie for d, _ in gpus],
            [d.numa for d, _ in gpus],
        )
    return NodeDevices(
        gpus=tuple(d for d, _ in gpus),
        rdma=tuple(sorted((d for d, _ in found["rdma"]), key=lambda d: d.minor)),
        fpga=tuple(sorted((d for d, _ in found["fpga"]), key=lambda d: d.minor)),
        links=links,
        checkpoints=checkpoints,
        refused=refused,
    )


def read_checkpoints(
    fields: Fields, annotations: Mapping[str, str], gpus: tuple[Device, ...]
) -> tuple[tuple[Checkpoint, ...], tuple[str, ...]]:
    """The checkpoint entries to use, and why the others are refused.

    The annotation is written by a node's agent, so it is read as untrusted: bounded in
    size, and each entry that is malformed, names a pod twice, names a GPU this Device does
    not list, or a GPU another entry names too, is refused alone (the node and the other
    entries are still used). An annotation too large or not a JSON list is refused whole.
    """
    known = NodeDevices(gpus=gpus)
    taken: list[Checkpoint] = []
    refused: list[str] = []
    for key in CHECKPOINT_ANNOTATIONS:
        text = annotations.get(key)
        if text is None:
            continue
        field = f"annotation {key}"
        data: object = None
        with contextlib.suppress(ValueError):  # too long, too deep or not JSON: refused below
            data = read_json(text, max_chars=MAX_CHECKPOINT_TEXT)
        if not isinstance(data, list):
            shown = text if len(text) <= 200 else f"{text[:200]}… ({len(text)} characters)"
            refused.append(str(fields.fail(field, shown, _CHECKPOINTS)))
            continue
        if len(data) > MAX_CHECKPOINT_ENTRIES:
            refused.append(
                str(
                    fields.fail(
                        field,
                        f"a list of {len(data)} entries",
                        f"at most {MAX_CHECKPOINT_ENTRIES} entries",
                    )
                )
            )
            continue
        seen: set[tuple[str, str, str]] = set()
        for i, entry in enumerate(data):
            where = f"{field}[{i}]"
            try:
                found = _checkpoint(fields, where, entry, known)
            except ConversionError as exc:
                refused.append(str(exc))
                continue
            pod = (found.pod_uid or f"{found.pod_namespace}/{found.pod_name}", found.resource, key)
            if pod in seen:
                refused.append(str(fields.fail(where, entry, "one entry per pod and resource")))
                continue
            seen.add(pod)
            taken.append(found)
    # A GPU two entries name is given to neither: which one the kubelet gave it is unknown.
    # So is a replica of a shared GPU that two entries name, or a GPU named both whole and
    # by its replicas (no device plugin hands out one GPU both ways).
    whole: dict[int, set[str]] = {}
    replica: dict[str, set[str]] = {}
    shared: dict[int, set[str]] = {}
    for found in taken:
        replicas = found.resource == SHARED_GPU_RESOURCE
        if found.resource == WHOLE_GPU_RESOURCE or replicas:
            for ident in found.device_ids:
                slot = _slot(known, ident, replicas)
                if replicas:
                    replica.setdefault(ident, set()).add(_pod_of(found))
                    shared.setdefault(slot, set()).add(_pod_of(found))
                else:
                    whole.setdefault(slot, set()).add(_pod_of(found))
    out = []
    for found in taken:
        twice: list[str] = []
        if found.resource == WHOLE_GPU_RESOURCE:
            twice = [
                d
                for d in found.device_ids
                if len(whole[_slot(known, d, False)]) > 1 or _slot(known, d, False) in shared
            ]
        elif found.resource == SHARED_GPU_RESOURCE:
            twice = [
                d for d in found.device_ids if len(replica[d]) > 1 or _slot(known, d, True) in whole
            ]
        if twice:
            refused.append(
                f"{fields.ref}: checkpoint entry of pod {_pod_of(found)} names "
                f"{found.resource} {show(twice[0])}, expected a device no other entry names"
            )
        else:
            out.append(found)
    return tuple(out), tuple(refused)


def _checkpoint(fields: Fields, where: str, entry: object, known: NodeDevices) -> Checkpoint:
    """One checkpoint entry; ConversionError names what is wrong with it."""
    if not isinstance(entry, Mapping):
        raise fields.fail(where, entry, _CHECKPOINTS)
    uid = _short(fields, entry, "podUID", where)
    namespace = _short(fields, entry, "podNamespace", where)
    name = _short(fields, entry, "podName", where)
    if not uid and not (namespace and name):
        raise fields.fail(where, entry, "a podUID, or a podNamespace and a podName")
    resource = _short(fields, entry, "resourceName", where) or WHOLE_GPU_RESOURCE
    ids = entry.get("deviceIDs", MISSING)
    if not isinstance(ids, list):
        raise fields.fail(f"{where}.deviceIDs", ids, "a list of device ids")
    if len(ids) > MAX_DEVICE_IDS:
        raise fields.fail(
            f"{where}.deviceIDs", f"a list of {len(ids)} ids", f"at most {MAX_DEVICE_IDS} ids"
        )
    for j, ident in enumerate(ids):
        at = f"{where}.deviceIDs[{j}]"
        if not isinstance(ident, str) or not 0 < len(ident) <= MAX_NAME:
            raise fields.fail(at, ident, f"a device id of 1 to {MAX_NAME} characters")
        if ident in ids[:j]:
            raise fields.fail(at, ident, "each device id once")
        if resource == WHOLE_GPU_RESOURCE and known.gpu_slots_of((ident,)) is None:
            raise fields.fail(at, ident, "the uuid of a GPU in spec.devices")
        if resource == SHARED_GPU_RESOURCE and known.gpu_slots_of((ident,), True) is None:
            raise fields.fail(
                at, ident, "a replica of a GPU in spec.devices (<uuid>::<n>), or its uuid"
            )
    return Checkpoint(uid, resource, tuple(ids), namespace, name)


def _slot(known: NodeDevices, ident: str, replicas: bool) -> int:
    """The GPU slot of an id that :func:`_checkpoint` accepted."""
    slots = known.gpu_slots_of((ident,), replicas)
    assert slots is not None  # checked as the entry was read
    return slots[0]


def _short(fields: Fields, entry: Mapping[str, Any], key: str, where: str) -> str:
    """A name of the entry: a string of at most MAX_NAME characters, "" when absent."""
    value = entry.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_NAME:
        raise fields.fail(f"{where}.{key}", value, f"a string of at most {MAX_NAME} characters")
    return value


def _pod_of(entry: Checkpoint) -> str:
    if entry.pod_namespace and entry.pod_name:
        return f"{entry.pod_namespace}/{entry.pod_name}"
    return f"UID {entry.pod_uid}"
