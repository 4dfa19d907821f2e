"""The agent writing its node's Device, over real HTTP against the API double: what the
scheduler then reads, what is left alone, and how conflicts and failures are met."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgpu.agent.device_object import CHECKPOINT_ANNOTATION
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, NotFound, Unavailable
from kgpu.kube.objects.device_cr import TOPOLOGY_ANNOTATION, devices_from_k8s
from tests.agent_double import (
    DEVICE_PATH,
    NODE,
    Clock,
    client,
    device_of,
    double,
    make_agent,
    writes,
)
from tests.gpu_probes import hgx_h100
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj

__all__ = ["client", "double"]  # the fixtures this module uses, from tests.agent_double


def test_the_first_round_creates_the_device_the_scheduler_reads(
    double: KubeDouble, client: KubeClient, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "kubelet_internal_checkpoint"
    checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": [
        {"PodUID": "u1", "ContainerName": "c", "ResourceName": "nvidia.com/gpu",
         "DeviceIDs": {"0": ["GPU-00000002-0000-0000-0000-000000000000"]}},
    ]}}))  # fmt: skip
    agent = make_agent(client, hgx_h100(4), checkpoint)
    assert agent.round() is True
    obj = device_of(double)
    node = double.get("nodes", NODE)
    assert node is not None
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"]}
    ]
    first = obj["spec"]["devices"][0]
    assert first == {
        "type": "gpu",
        "minor": 0,
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "health": True,
        "resources": {
            "kubernetes.io/gpu-core": 100,
            "kubernetes.io/gpu-memory-ratio": 100,
            "kubernetes.io/gpu-memory": "81559Mi",
        },
        "topology": {"nodeID": 0, "busID": "0000:18:00.0", "nvlinkPeers": [1, 2, 3]},
    }
    assert obj["status"]["conditions"] == [
        {
            "type": "GpusHealthy",
            "status": "True",
            "reason": "AllHealthy",
            "message": "4 GPUs, driver 580.159.04",
            "lastTransitionTime": "2026-11-22T10:00:00Z",
        }
    ]
    # What the scheduler makes of it.
    devices = devices_from_k8s(obj)
    assert [d.uuid[:12] for d in devices.gpus] == [f"GPU-0000000{i}" for i in range(4)]
    assert devices.links is not None and devices.links.plan().islands == [0b1111]
    assert devices.links.rank(0, 3) == 118  # NV18
    assert devices.gpu_slots_of(devices.checkpoints[0].device_ids) == (2,)
    assert devices.checkpoints[0].pod_uid == "u1"


def test_a_round_that_finds_nothing_new_calls_nothing(
    double: KubeDouble, client: KubeClient
) -> None:
    clock = Clock()
    agent = make_agent(client, hgx_h100(2), clock=clock)
    agent.round()
    before = len(double.requests)
    clock.now = 30.0
    assert agent.round() is False
    assert len(double.requests) == before
    # Past the resync period the Device is read back, and left alone when it holds.
    clock.now = 61.0
    assert agent.round() is False
    assert [r.method for r in double.requests[before:]] == ["GET"]


def test_a_device_deleted_by_hand_is_written_again_at_the_resync(
    double: KubeDouble, client: KubeClient
) -> None:
    clock = Clock()
    agent = make_agent(client, hgx_h100(2), clock=clock)
    agent.round()
    double.remove("devices", NODE)
    clock.now = 61.0
    assert agent.round() is True
    assert len(device_of(double)["spec"]["devices"]) == 2


def test_what_others_wrote_on_the_device_is_kept(double: KubeDouble, client: KubeClient) -> None:
    double.put(
        {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "Device",
            "metadata": {"name": NODE, "annotations": {"team": "infra"}},
            "spec": {
                "devices": [
                    {"type": "gpu", "minor": 7, "uuid": "GPU-stale"},
                    {"type": "rdma", "minor": 0, "uuid": "mlx5_0", "topology": {"nodeID": 0}},
                ]
            },
            "status": {"conditions": [{"type": "Other", "status": "True"}]},
        }
    )
    make_agent(client, hgx_h100(2)).round()
    obj = device_of(double)
    assert [(d["type"], d["minor"]) for d in obj["spec"]["devices"]] == [
        ("gpu", 0),
        ("gpu", 1),
        ("rdma", 0),
    ]
    assert obj["metadata"]["annotations"]["team"] == "infra"
    assert json.loads(obj["metadata"]["annotations"][TOPOLOGY_ANNOTATION]) == [
        ["X", "NV18"],
        ["NV18", "X"],
    ]
    assert [c["type"] for c in obj["status"]["conditions"]] == ["GpusHealthy", "Other"]
    # No checkpoint file read: the annotation is not the agent's to write.
    assert CHECKPOINT_ANNOTATION not in obj["metadata"]["annotations"]


def test_a_gpu_gone_bad_is_marked_unhealthy_and_the_condition_says_why(
    double: KubeDouble, client: KubeClient
) -> None:
    probe = hgx_h100(4)
    agent = make_agent(client, probe)
    agent.round()
    probe.lost[1] = "GPU is lost"
    probe.set_problem(3, "row remapping failed: GPU memory has uncorrectable errors")
    agent.publisher._now = lambda: "2026-11-22T10:05:00Z"
    assert agent.round() is True
    obj = device_of(double)
    assert [d["health"] for d in obj["spec"]["devices"]] == [True, False, True, False]
    (condition,) = obj["status"]["conditions"]
    assert condition == {
        "type": "GpusHealthy",
        "status": "False",
        "reason": "GpusUnhealthy",
        "message": "GPU 1 (GPU-00000001-0000-0000-0000-000000000000): NVML cannot read GPU 1: "
        "GPU is lost; GPU 3 (GPU-00000003-0000-0000-0000-000000000000): row remapping "
        "failed: GPU memory has uncorrectable errors",
        "lastTransitionTime": "2026-11-22T10:05:00Z",
    }
    devices = devices_from_k8s(obj)
    assert [d.healthy for d in devices.gpus] == [True, False, True, False]


def test_a_conflict_reads_the_device_again_and_keeps_what_changed_meanwhile(
    double: KubeDouble, client: KubeClient
) -> None:
    probe = hgx_h100(2)
    agent = make_agent(client, probe, clock=Clock())
    agent.round()

    def someone_adds_a_nic() -> None:
        obj = device_of(double)
        obj["spec"]["devices"].append({"type": "rdma", "minor": 0, "uuid": "mlx5_0"})
        double.put(obj)

    # Between the agent's read and its write, another writer changes the object: the
    # agent's PUT carries the version it read, so the server refuses it (409).
    double.before("PUT", DEVICE_PATH + "$", someone_adds_a_nic)
    probe.set_problem(0, "row remapping failed: GPU memory has uncorrectable errors")
    assert agent.round() is True
    obj = device_of(double)
    assert [(d["type"], d.get("health")) for d in obj["spec"]["devices"]] == [
        ("gpu", False),
        ("gpu", True),
        ("rdma", None),
    ]
    assert writes(double)[-3:] == [
        f"PUT {DEVICE_PATH}",
        f"PUT {DEVICE_PATH}",
        f"PATCH {DEVICE_PATH}/status",
    ]
    assert [r.status for r in double.requests if r.method == "PUT"][-2:] == [409, 200]


def test_an_object_that_keeps_changing_gives_up_with_a_conflict(
    double: KubeDouble, client: KubeClient
) -> None:
    agent = make_agent(client, hgx_h100(2))
    double.fail("POST", "/devices$", 409, times=None)
    with pytest.raises(Conflict, match=f"Device {NODE}: still changing after 5 attempts"):
        agent.round()


def test_a_failed_write_is_made_again_next_round(double: KubeDouble, client: KubeClient) -> None:
    agent = make_agent(client, hgx_h100(2))
    double.fail("POST", "/devices$", 500)
    with pytest.raises(Unavailable):
        agent.round()
    assert double.get("devices", NODE) is None
    assert agent.round() is True
    assert len(device_of(double)["spec"]["devices"]) == 2


def test_a_node_not_in_the_cluster_still_gets_its_device_without_an_owner(
    double: KubeDouble, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    double.remove("nodes", NODE)
    make_agent(client, hgx_h100(1)).round()
    assert "ownerReferences" not in device_of(double)["metadata"]
    assert f"Node {NODE} does not exist" in caplog.text


def test_without_the_crd_the_error_says_to_install_it(tmp_path: Path) -> None:
    with KubeDouble(crds=False) as bare:
        bare.put(node_obj(NODE, gpus=1))
        c = KubeClient.from_kubeconfig(bare.kubeconfig(tmp_path))
        try:
            with pytest.raises(NotFound) as caught:
                make_agent(c, hgx_h100(1)).round()
        finally:
            c.close()
    assert str(caught.value).startswith(
        f"Device {NODE} cannot be created: the API server has no kgpu.io/v1alpha1 devices ("
    )
    assert str(caught.value).endswith(
        "install the CRDs with `kgpu manifests --crds-only | kubectl apply -f -`"
    )
