"""DRA in ``kgpu simulate autoscale``: GPUs published as ResourceSlices, pods that ask for
them through ResourceClaims, and the scenario ``--dra`` runs.

Karpenter cannot see DRA demand (kubernetes-sigs/karpenter#1231): a pod whose GPUs are in
its claims asks no ``nvidia.com/gpu``. kgpu's planner sees the claims' GPUs
(:func:`kgpu.autoscale.demand.with_dra_demand`) and makes trigger pods for them as for any
GPU demand; when a node joins, its GPUs are published as NVIDIA's DRA driver publishes them
(one pool per node, devices of type ``gpu`` with their ``productName`` and memory), and the
pods' claims are allocated there. A node here offers its GPUs through DRA only, as a node
running the DRA driver rather than the device plugin does.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from kgpu.dra.inventory import DraInventory
from kgpu.model.dra import (
    AllocationMode,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceRequest,
    ExactRequest,
    PodClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from kgpu.model.node import NodeInfo
from kgpu.model.nodepool import NodePool
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.taints import Toleration

DRIVER = "gpu.nvidia.com"
GPU_CLASS = DeviceClass(
    "gpu.nvidia.com",
    (f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'",),
)
MIB = 1024 * 1024


def product_name(gfd_model: str) -> str:
    """The ``productName`` a GPU of GFD's model label publishes (dashes as spaces: the
    planner reads it back as the label, :func:`kgpu.dra.gpu_count.gfd_product`)."""
    return gfd_model.replace("-", " ")


def gpu_slice(node: NodeInfo) -> ResourceSlice:
    """The node's GPUs as NVIDIA's DRA driver publishes them: one pool named for the node."""
    devices = tuple(
        Device(
            f"gpu-{i}",
            {
                f"{DRIVER}/type": "gpu",
                f"{DRIVER}/index": i,
                f"{DRIVER}/productName": product_name(node.gpu_model),
            },
            {f"{DRIVER}/memory": Fraction(node.gpu_memory_mib * MIB)},
        )
        for i in range(node.gpu_count)
    )
    return ResourceSlice(
        f"{node.name}-{DRIVER}", DRIVER, str(node.name), 1, 1, devices, str(node.name)
    )


def dra_only(node: NodeInfo) -> NodeInfo:
    """The node as the scheduler sees it when its GPUs are published through DRA: no
    ``nvidia.com/gpu`` (its GFD labels stay)."""
    return replace(node, gpu_count=0, gpu_model="", gpu_memory_mib=0)


def publish(inventory: DraInventory, nodes: list[NodeInfo]) -> list[NodeInfo]:
    """Publish the GPUs of ``nodes`` that joined; the nodes as the scheduler sees them."""
    inventory.add_slices([gpu_slice(n) for n in nodes if n.gpu_count])
    return [dra_only(n) for n in nodes]


def _gpus_template(name: str, count: int, product: str = "") -> ResourceClaimTemplate:
    selectors = (
        (f"device.attributes['{DRIVER}'].productName == '{product_name(product)}'",)
        if product
        else ()
    )
    request = ExactRequest(GPU_CLASS.name, selectors, AllocationMode.EXACT_COUNT, count)
    return ResourceClaimTemplate("default", name, ClaimSpec((DeviceRequest("gpus", request),)))


def dra_cluster_scenario(
    pools: tuple[NodePool, ...], existing_nodes: int = 2
) -> tuple[list[NodeInfo], list[tuple[PodSpec, int, tuple[int, ...]]], list[PodSpec], DraInventory]:
    """A full cluster whose GPUs are published through DRA, and pods that claim GPUs.

    ``existing_nodes`` nodes of the first pool's largest GPU instance type, each held whole by
    one running pod (its claim allocated); then 10 pods claiming 4 GPUs of the pool's model
    (a selector on ``productName``) and 8 claiming one GPU of any model arrive at once. The
    pods tolerate the pools' taints. Returns the nodes (DRA only), the running pods, the
    arriving pods and the inventory of their claims.
    """
    pool = pools[0]
    gpu_types = pool.offering("")
    if not gpu_types:
        raise ValueError(f"NodePool {pool.name}: no GPU instance type to build the cluster of")
    itype = max(gpu_types, key=lambda t: (t.gpu_count, t.cpu_milli))
    launched = [pool.node(f"existing-{i}", itype) for i in range(existing_nodes)]
    templates = [
        _gpus_template("all-gpus", itype.gpu_count),
        _gpus_template("four-gpus", 4, itype.gpu_model),
        _gpus_template("one-gpu", 1),
    ]
    inventory = DraInventory.build([GPU_CLASS], [], [], templates)
    nodes = publish(inventory, launched)
    tolerations = tuple(
        dict.fromkeys(
            Toleration(t.key, "Exists", "", str(t.effect)) for p in pools for t in p.taints
        )
    )

    def claiming(name: str, cpu: int, memory: int, template: str) -> PodSpec:
        key = PodKey(f"default/{name}")
        inventory.set_pod_claims(key, [PodClaim("gpus", template_name=template)])
        return PodSpec(key, cpu, memory, tolerations=tolerations)

    no_gpus: tuple[int, ...] = ()  # their GPUs are the claims' devices
    running = [
        (claiming(f"resident-{i}", 8000, 65536, "all-gpus"), i, no_gpus)
        for i in range(existing_nodes)
    ]
    arriving = [claiming(f"quad-{i:02}", 32000, 131072, "four-gpus") for i in range(10)]
    arriving += [claiming(f"single-{i:02}", 4000, 16384, "one-gpu") for i in range(8)]
    return nodes, running, arriving, inventory
