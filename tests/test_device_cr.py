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
]


@pytest.mark.parametrize(
    ("obj", "message"), [c[1:] for c in DEVICE_ERRORS], ids=[c[0] for c in DEVICE_ERRORS]
)
def test_device_errors(obj: Obj, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        devices_from_k8s(obj)
    assert str(info.value) == message


CHECKPOINTS = "kgpu.io/devices-checkpoints"
NOT_A_LIST = (
    'Device n: annotation kgpu.io/devices-checkpoints is "{}", expected a JSON list such as '
    '[{"podUID": "…", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-…"]}]'
)


def with_checkpoints(entries: object) -> Obj:
    text = entries if isinstance(entries, str) else json.dumps(entries)
    return device_cr(gpu(0), gpu(1), gpu(2), **{CHECKPOINTS: text})


def test_a_checkpoint_annotation_that_is_not_a_list_is_refused_and_the_node_kept() -> None:
    devices = devices_from_k8s(with_checkpoints("{}"))
    assert (len(devices.gpus), devices.checkpoints, devices.refused) == (3, (), (NOT_A_LIST,))
    huge = devices_from_k8s(with_checkpoints("x" * 300_000))
    assert huge.checkpoints == () and len(huge.refused[0]) < 400
    assert huge.refused[0].startswith('Device n: annotation kgpu.io/devices-checkpoints is "xxx')
    many = [{"podUID": f"u{i}", "deviceIDs": []} for i in range(5000)]
    assert devices_from_k8s(with_checkpoints(many)).refused == (
        'Device n: annotation kgpu.io/devices-checkpoints is "a list of 5000 entries", '
        "expected at most 4096 entries",
    )


def entry(uid: str, *ids: object, **more: object) -> dict[str, object]:
    return {"podUID": uid, "resourceName": "nvidia.com/gpu", "deviceIDs": list(ids), **more}


HOSTILE: list[tuple[str, object, str]] = [
    ("not an object", "GPU-1", 'Device n: annotation kgpu.io/devices-checkpoints[1] is "GPU-1"'),
    (
        "no pod",
        {"resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-1"]},
        "expected a podUID, or a podNamespace and a podName",
    ),
    (
        "an id no GPU has",
        entry("u2", "GPU-9"),
        '[1].deviceIDs[0] is "GPU-9", expected the uuid of a GPU in spec.devices',
    ),
    ("an id twice", entry("u2", "GPU-1", "GPU-1"), '[1].deviceIDs[1] is "GPU-1", expected each'),
    ("not a string", entry("u2", 1), "[1].deviceIDs[0] is 1, expected a device id of 1 to 253"),
    (
        "too many ids",
        entry("u2", *[f"GPU-{i}" for i in range(300)]),
        '[1].deviceIDs is "a list of 300 ids", expected at most 256 ids',
    ),
    ("a long name", entry("u2", podName="p" * 300), "[1].podName is"),
    ("the same pod twice", entry("u1", "GPU-1"), "expected one entry per pod and resource"),
    (
        "a GPU another entry names",
        entry("u2", "GPU-0"),
        'checkpoint entry of pod UID u1 names nvidia.com/gpu "GPU-0", expected a device no '
        "other entry names",
    ),
]


@pytest.mark.parametrize(("bad", "message"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_a_bad_checkpoint_entry_is_refused_alone(bad: object, message: str) -> None:
    """Entry [0] holds GPU 0; [1] is bad; [2], by namespace and name, holds GPU 2."""
    good = entry("u1", "GPU-0")
    by_name = {"podNamespace": "ns", "podName": "p", "deviceIDs": ["GPU-2"]}
    devices = devices_from_k8s(with_checkpoints([good, bad, by_name]))
    shares_gpu_0 = bad == entry("u2", "GPU-0")  # then neither entry naming it is used
    assert len(devices.refused) == 1 + shares_gpu_0, devices.refused
    assert message in devices.refused[0]
    kept = {Checkpoint("", "nvidia.com/gpu", ("GPU-2",), "ns", "p")}
    if not shares_gpu_0:
        kept.add(Checkpoint("u1", "nvidia.com/gpu", ("GPU-0",)))
    assert set(devices.checkpoints) == kept


def shared(uid: str, *ids: str) -> dict[str, object]:
    return {"podUID": uid, "resourceName": "nvidia.com/gpu.shared", "deviceIDs": list(ids)}


def test_replicas_of_a_shared_gpu_are_read_and_each_replica_is_one_pod_s() -> None:
    """NVIDIA's plugin under MPS names the k-th replica of a GPU ``<uuid>::k``."""
    entries = [
        shared("u1", "GPU-1::0"),
        shared("u2", "GPU-1::1", "GPU-1::2"),  # two replicas of the same GPU: fine
        shared("u3", "GPU-1::0"),  # a replica u1 holds: neither entry is used
        shared("u4", "GPU-7::0"),  # no such GPU
        shared("u5", "GPU-2::x"),  # not a replica id
        shared("u6", "GPU-0::0"),  # GPU 0 is also given whole (below): neither is used
        entry("u7", "GPU-0"),
        entry("u8", "GPU-1::3"),  # whole GPUs are named by uuid
    ]
    devices = devices_from_k8s(with_checkpoints(entries))
    assert set(devices.checkpoints) == {
        Checkpoint("u2", "nvidia.com/gpu.shared", ("GPU-1::1", "GPU-1::2"))
    }
    expected = (
        '[3].deviceIDs[0] is "GPU-7::0", expected a replica of a GPU in spec.devices '
        "(<uuid>::<n>), or its uuid",
        '[4].deviceIDs[0] is "GPU-2::x", expected a replica of a GPU',
        '[7].deviceIDs[0] is "GPU-1::3", expected the uuid of a GPU in spec.devices',
        'pod UID u1 names nvidia.com/gpu.shared "GPU-1::0", expected a device no other entry',
        'pod UID u3 names nvidia.com/gpu.shared "GPU-1::0", expected a device no other entry',
        'pod UID u6 names nvidia.com/gpu.shared "GPU-0::0", expected a device no other entry',
        'pod UID u7 names nvidia.com/gpu "GPU-0", expected a device no other entry names',
    )
    assert len(devices.refused) == len(expected), devices.refused
    for part in expected:
        assert any(part in r for r in devices.refused), part
    assert devices.gpu_slots_of(("GPU-1::2",), replicas=True) == (1,)
    assert devices.gpu_slots_of(("GPU-1::2",)) is None


def test_annotations_nested_too_deep_are_refused_not_a_crash() -> None:
    deep = "[" * 50_000 + "]" * 50_000
    devices = devices_from_k8s(with_checkpoints(deep))
    assert devices.checkpoints == ()
    assert devices.refused[0].startswith('Device n: annotation kgpu.io/devices-checkpoints is "[[[')
    with pytest.raises(ConversionError) as caught:
        devices_from_k8s(device_cr(gpu(0), **{"kgpu.io/gpu-topology": deep}))
    assert "(nested 50000 deep, at most 32)" in str(caught.value)
