"""Nodes' devices: MIG and MPS from labels and resources, RDMA, the GPU link annotation and
the Device resource, and the exact messages for what cannot be read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kgpu.kube.objects.device_cr import devices_from_k8s
from kgpu.kube.objects.node_pod import ConversionError, node_from_k8s
from kgpu.model.devices import Checkpoint, Device
from kgpu.model.topology import NVLINK, PCIE_RANKS
from kgpu.state.cluster import ClusterState
from tests.test_convert import Obj, edited, gpu_node, k8s_node, labels

A100 = "NVIDIA-A100-SXM4-80GB"


def annotate_node(**notes: str) -> Any:
    return lambda obj: obj["metadata"].setdefault("annotations", {}).update(notes)


def device_cr(*devices: dict[str, Any], **notes: str) -> Obj:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Device",
        "metadata": {"name": "n", "annotations": notes},
        "spec": {"devices": list(devices)},
    }


def gpu(minor: int, **kw: Any) -> dict[str, Any]:
    return {"type": "gpu", "minor": minor, "uuid": f"GPU-{minor}", **kw}


def test_mig_instances_from_the_device_plugin_then_from_gfd_labels() -> None:
    node = k8s_node(**{"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"})
    node = edited(node, labels(**{"nvidia.com/gpu.product": A100, "nvidia.com/gpu.count": "1"}))
    info = node_from_k8s(node)
    assert (info.gpu_count, info.gpu_model, info.mig) == (0, A100, (("1g.10gb", 7),))
    labelled = edited(
        k8s_node(),
        labels(**{"nvidia.com/gpu.product": A100, "nvidia.com/mig-3g.40gb.count": "2"}),
    )
    assert node_from_k8s(labelled).mig == (("3g.40gb", 2),)


def test_renamed_mps_replicas_count_physical_gpus() -> None:
    node = edited(
        k8s_node(**{"nvidia.com/gpu.shared": "32"}),
        labels(**{"nvidia.com/gpu.product": A100, "nvidia.com/gpu.replicas": "8"}),
    )
    info = node_from_k8s(node)
    assert (info.gpu_count, info.gpu_replicas) == (4, 8)


def test_rdma_and_fpga_resources_are_whole_devices() -> None:
    info = node_from_k8s(k8s_node(**{"kubernetes.io/rdma": "200", "koordinator.sh/fpga": "100"}))
    assert (info.rdma, info.fpga) == (2, 1)


def two_islands() -> list[list[str]]:
    return [
        ["X" if a == b else "NV4" if a // 4 == b // 4 else "SYS" for b in range(8)]
        for a in range(8)
    ]


def test_the_topology_annotation_gives_the_link_matrix() -> None:
    node = edited(gpu_node(), annotate_node(**{"kgpu.io/gpu-topology": json.dumps(two_islands())}))
    links = node_from_k8s(node).devices.links  # type: ignore[union-attr]
    assert links is not None and links.size == 8
    assert links.rank(0, 3) == NVLINK + 4 and links.rank(3, 4) == PCIE_RANKS["SYS"]
    assert [bin(m) for m in links.plan().islands] == ["0b1111", "0b11110000"]


TOPOLOGY_ERRORS: list[tuple[str, str, str]] = [
    (
        "not JSON",
        "NV4",
        'Node n: annotation kgpu.io/gpu-topology is "NV4", expected a JSON matrix of GPU link '
        'kinds, one row per GPU, such as [["X", "NV4"], ["NV4", "X"]], the kinds being X (self), '
        "NV<k> (k NVLinks), PIX, PXB, PHB, NODE or SYS",
    ),
    (
        "unknown kind",
        '[["X", "FAST"], ["FAST", "X"]]',
        'Node n: annotation kgpu.io/gpu-topology[0][1] is "FAST", expected a link kind: X (self), '
        "NV<k> (k NVLinks), PIX, PXB, PHB, NODE or SYS",
    ),
    (
        "not symmetric",
        '[["X", "NV4"], ["PIX", "X"]]',
        'Node n: annotation kgpu.io/gpu-topology[1][0] is "PIX", expected NV4, as [0][1] says',
    ),
    (
        "wrong size",
        '[["X", "NV4"], ["NV4", "X"]]',
        'Node n: annotation kgpu.io/gpu-topology is "[[\\"X\\", \\"NV4\\"], [\\"NV4\\", \\"X\\"]]", '
        "expected a 8x8 matrix, one row per GPU",
    ),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in TOPOLOGY_ERRORS], ids=[c[0] for c in TOPOLOGY_ERRORS]
)
def test_topology_errors(text: str, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        node_from_k8s(edited(gpu_node(), annotate_node(**{"kgpu.io/gpu-topology": text})))
    assert str(info.value) == message


def test_a_device_resource_gives_uuids_health_memory_topology_and_checkpoints() -> None:
    checkpoint = [{"podUID": "u1", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-1"]}]
    cr = device_cr(
        gpu(
            1,
            resources={"kubernetes.io/gpu-memory": "40Gi"},
            topology={"nodeID": 0, "nvlinkPeers": [0]},
        ),
        gpu(0, resources={"kubernetes.io/gpu-memory": "40Gi"}, topology={"nodeID": 0}),
        gpu(2, health=False, topology={"nodeID": 1}),
        {"type": "rdma", "minor": 0, "uuid": "mlx5_0", "topology": {"nodeID": 1, "pcieID": "p1"}},
        **{"node.koordinator.sh/devices-checkpoints": json.dumps(checkpoint)},
    )
    devices = devices_from_k8s(cr)
    assert [d.minor for d in devices.gpus] == [0, 1, 2]
    assert devices.gpus[2] == Device(2, "GPU-2", healthy=False, numa=1)
    assert devices.rdma == (Device(0, "mlx5_0", numa=1, pcie="p1"),)
    assert devices.checkpoints == (Checkpoint("u1", "nvidia.com/gpu", ("GPU-1",)),)
    links = devices.links
    assert links is not None
    assert (links.rank(0, 1), links.rank(0, 2)) == (NVLINK + 1, PCIE_RANKS["SYS"])
    node = node_from_k8s(k8s_node(**{"nvidia.com/gpu": "2"}), cr)
    assert (node.gpu_count, node.gpu_memory_mib) == (3, 0)
    state = ClusterState([node])
    # The unhealthy GPU keeps its slot and minor but is never offered.
    assert state.node_gpus_free(0) == [1000, 1000, 0]
    assert state.node_gpus_memory_free(0) == [40960, 40960, 0]
    assert state.rdma_cap.tolist() == [1]


DEVICE_ERRORS: list[tuple[str, Obj, str]] = [
    (
        "unknown type",
        device_cr({"type": "tpu", "minor": 0}),
        'Device n: spec.devices[0].type is "tpu", expected one of gpu, rdma, fpga',
    ),
    (
        "minor twice",
        device_cr(gpu(0), gpu(0)),
        "Device n: spec.devices[1].minor is 0, expected each gpu minor once",
    ),
    (
        "health in words",
        device_cr(gpu(0, health="ok")),
        'Device n: spec.devices[0].health is "ok", expected true or false',
    ),
    (
        "peers not minors",
        device_cr(gpu(0, topology={"nvlinkPeers": ["GPU-1"]})),
        'Device n: spec.devices[0].topology.nvlinkPeers is ["GPU-1"], expected a list of GPU minors',
    ),
    (
        "checkpoint not a list",
        device_cr(gpu(0), **{"kgpu.io/devices-checkpoints": "{}"}),
        'Device n: annotation kgpu.io/devices-checkpoints is "{}", expected a JSON list such as '
        '[{"podUID": "…", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-…"]}]',
    ),
]


@pytest.mark.parametrize(
    ("obj", "message"), [c[1:] for c in DEVICE_ERRORS], ids=[c[0] for c in DEVICE_ERRORS]
)
def test_device_errors(obj: Obj, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        devices_from_k8s(obj)
    assert str(info.value) == message
