"""The ``Device`` resource the agent wants for its node, worked out from an inventory.

The agent owns the ``gpu`` entries of ``spec.devices``, the ``rdma`` entries where the node
has an RDMA stack for it to read, the ``kgpu.io/gpu-topology`` annotation and, when it
reads the kubelet's checkpoint, ``kgpu.io/devices-checkpoints``; everything else on the
object (FPGA entries, RDMA entries an operator listed on a node without an RDMA stack,
other annotations and labels) is kept as it is. Its status holds one condition,
``GpusHealthy``, whose message names each unhealthy GPU and why.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

from kgpu.agent.inventory import Inventory
from kgpu.kube.api.resource_types import CRD_GROUP, CRD_VERSION, DEVICES
from kgpu.kube.objects.conditions import condition, merge_conditions
from kgpu.kube.objects.device_cr import CHECKPOINT_ANNOTATIONS, GPU_MEMORY, TOPOLOGY_ANNOTATION

Obj = dict[str, Any]
CHECKPOINT_ANNOTATION: Final = CHECKPOINT_ANNOTATIONS[0]
HEALTH_CONDITION: Final = "GpusHealthy"


def gpu_entries(inventory: Inventory) -> list[Obj]:
    out = []
    for slot, gpu in enumerate(inventory.gpus):
        # Without NVML (kgpu.agent.kubelet_gpus) the bus id, and maybe the memory, are not
        # known: left out, not written as zero (the scheduler takes the node's figure).
        topology: Obj = {"nodeID": gpu.numa}
        if gpu.bus_id:
            topology["busID"] = gpu.bus_id
        if gpu.pcie_switch:
            topology["pcieID"] = gpu.pcie_switch
        peers = inventory.peers(slot)
        if peers:
            topology["nvlinkPeers"] = peers
        resources: Obj = {"kubernetes.io/gpu-core": 100, "kubernetes.io/gpu-memory-ratio": 100}
        if gpu.memory_mib:
            resources[GPU_MEMORY] = f"{gpu.memory_mib}Mi"
        out.append(
            {
                "type": "gpu",
                "minor": gpu.minor,
                "uuid": gpu.uuid,
                "health": not gpu.problem,
                "resources": resources,
                "topology": topology,
            }
        )
    return out


def rdma_entries(inventory: Inventory) -> list[Obj]:
    out = []
    for minor, nic in enumerate(inventory.rdma or ()):
        topology: Obj = {"nodeID": nic.numa, "busID": nic.bus_id}
        if nic.pcie_switch:
            topology["pcieID"] = nic.pcie_switch
        out.append(
            {
                "type": "rdma",
                "minor": minor,
                "uuid": nic.name,
                "health": nic.active,
                "topology": topology,
            }
        )
    return out


def desired(
    node: str,
    inventory: Inventory,
    checkpoints: list[Obj] | None,
    current: Mapping[str, Any] | None,
    owner: Obj | None = None,
) -> Obj:
    """``current`` (None: not created yet) with the agent's parts set from ``inventory``;
    ``checkpoints`` None leaves the checkpoint annotation as it is."""
    obj: Obj = copy.deepcopy(dict(current)) if current else {}
    obj["apiVersion"] = f"{CRD_GROUP}/{CRD_VERSION}"
    obj["kind"] = DEVICES.kind
    meta = obj.setdefault("metadata", {})
    meta["name"] = node
    if owner is not None and not meta.get("ownerReferences"):
        meta["ownerReferences"] = [owner]
    annotations = meta.setdefault("annotations", {})
    annotations[TOPOLOGY_ANNOTATION] = json.dumps([list(r) for r in inventory.links])
    if checkpoints is not None:
        annotations[CHECKPOINT_ANNOTATION] = json.dumps(checkpoints)
    spec = obj.setdefault("spec", {})
    # RDMA entries are the agent's where the node has an RDMA stack for it to read;
    # elsewhere an operator may list them by hand, and they are kept.
    owned = ("gpu", "rdma") if inventory.rdma is not None else ("gpu",)
    others = [d for d in spec.get("devices") or [] if d.get("type") not in owned]
    spec["devices"] = gpu_entries(inventory) + rdma_entries(inventory) + others
    obj.pop("status", None)  # written through the status subresource
    return obj


def without_status(obj: Mapping[str, Any]) -> Obj:
    return {k: v for k, v in obj.items() if k != "status"}


def node_owner(node: Mapping[str, Any]) -> Obj:
    """The Node as owner: the Device goes when its node is deleted."""
    meta = node.get("metadata", {})
    return {"apiVersion": "v1", "kind": "Node", "name": meta.get("name"), "uid": meta.get("uid")}


def health_status(inventory: Inventory, current: Mapping[str, Any] | None, now: str) -> Obj:
    """The status with ``GpusHealthy`` set from ``inventory``; other conditions kept."""
    bad = inventory.unhealthy
    count = len(inventory.gpus)
    if bad:
        message = "; ".join(f"GPU {g.minor} ({g.uuid}): {g.problem}" for g in bad)
        new = condition(HEALTH_CONDITION, False, "GpusUnhealthy", message, 0, now)
    else:
        message = f"{count} GPU{'s' * (count != 1)}, driver {inventory.driver}"
        new = condition(HEALTH_CONDITION, True, "AllHealthy", message, 0, now)
    del new["observedGeneration"]
    status = (current or {}).get("status") or {}
    return {**status, "conditions": merge_conditions(status.get("conditions") or [], [new])}
