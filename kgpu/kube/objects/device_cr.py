"""The ``Device`` resource (``kgpu.io/v1alpha1``, one per node) and the GPU link matrix.

A Device lists the node's devices as its agent sees them::

    spec:
      devices:
      - {type: gpu, minor: 0, uuid: GPU-…, health: true,
         resources: {kubernetes.io/gpu-memory: 80Gi},
         topology: {nodeID: 0, pcieID: "0000:10", nvlinkPeers: [1, 2, 3]}}
      - {type: rdma, minor: 0, uuid: mlx5_0, topology: {nodeID: 0, pcieID: "0000:10"}}

Its annotation ``kgpu.io/devices-checkpoints`` (or Koordinator's
``node.koordinator.sh/devices-checkpoints``) says which GPUs the kubelet gave pods that
another scheduler placed: ``[{"podUID": "…", "resourceName": "nvidia.com/gpu",
"deviceIDs": ["GPU-…"]}]``.

The GPU link matrix, where ``nvidia-smi topo -m`` is known, is the annotation
``kgpu.io/gpu-topology`` on the Node (or the Device): rows of link kinds, one per GPU in
minor order, ``[["X", "NV4", "SYS"], ["NV4", "X", "SYS"], ["SYS", "SYS", "X"]]`` (or that
list under ``"links"``). Without it, a Device's ``nvlinkPeers``, ``pcieID`` and ``nodeID``
give a coarser one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

from kgpu.kube.objects.fields import MISSING, Fields
from kgpu.model.devices import Checkpoint, Device, NodeDevices
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


def links_annotation(fields: Fields, text: str, field: str = "") -> GpuLinks:
    """The matrix of ``kgpu.io/gpu-topology``; ``fields`` names the object in errors."""
    field = field or f"annotation {TOPOLOGY_ANNOTATION}"
    try:
        data = json.loads(text)
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


def devices_from_k8s(obj: Mapping[str, Any]) -> NodeDevices:
    """A Device resource as the model's NodeDevices; ConversionError names what is wrong."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    fields = Fields(f"Device {name if isinstance(name, str) and name else '(no name)'}")
    meta = fields.mapping(obj, "metadata", "metadata")
    annotations = fields.strings(meta, "annotations", "annotation")
    spec = fields.mapping(obj, "spec", "spec")
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
        checkpoints=_checkpoints(fields, annotations),
    )


def _checkpoints(fields: Fields, annotations: Mapping[str, str]) -> tuple[Checkpoint, ...]:
    out: list[Checkpoint] = []
    for key in CHECKPOINT_ANNOTATIONS:
        text = annotations.get(key)
        if text is None:
            continue
        field = f"annotation {key}"
        try:
            data = json.loads(text)
        except ValueError:
            raise fields.fail(field, text, _CHECKPOINTS) from None
        if not isinstance(data, list):
            raise fields.fail(field, text, _CHECKPOINTS)
        for i, entry in enumerate(data):
            ids = entry.get("deviceIDs") if isinstance(entry, dict) else None
            uid = entry.get("podUID") if isinstance(entry, dict) else None
            if (
                not isinstance(uid, str)
                or not isinstance(ids, list)
                or not all(isinstance(d, str) for d in ids)
            ):
                raise fields.fail(f"{field}[{i}]", entry, _CHECKPOINTS)
            resource = entry.get("resourceName", "nvidia.com/gpu")
            out.append(Checkpoint(uid, str(resource), tuple(ids)))
    return tuple(out)
