"""``kgpu run`` against the API double when the node's Device says the kubelet gave a pod
other GPUs than kgpu's annotation names: corrected once, reported, and the next pod placed
on the GPUs that are really free; a conflicting claim reported and not applied; hostile
checkpoints refused alone."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.kube_double import KubeDouble
from tests.kube_objects import allocation_of, node_obj, pod_obj, signed, wait_until
from tests.test_kube_scheduler import Start, double, events, start  # noqa: F401

CHECKPOINTS = "kgpu.io/devices-checkpoints"


def device(node: str, gpus: int, checkpoints: list[Any] | None = None) -> dict[str, Any]:
    """The node agent's Device: GPU minor m is fake-gpu-m, as on the test node."""
    notes = {} if checkpoints is None else {CHECKPOINTS: json.dumps(checkpoints)}
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Device",
        "metadata": {"name": node, "annotations": notes},
        "spec": {
            "devices": [
                {"type": "gpu", "minor": m, "uuid": f"fake-gpu-{m}", "health": True}
                for m in range(gpus)
            ]
        },
    }


def held(name: str, *ids: str, namespace: str = "default") -> dict[str, Any]:
    """A checkpoint entry as the agent writes it from the pod-resources API."""
    return {"podNamespace": namespace, "podName": name, "resourceName": "nvidia.com/gpu",
            "deviceIDs": list(ids)}  # fmt: skip


def metrics(scheduler: RunningScheduler) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics") as answer:
        return str(answer.read().decode())


@pytest.fixture
def crds(double: KubeDouble) -> None:  # noqa: F811
    """The double serves kgpu's custom resources (the Device among them)."""
    double.install_crds()


def pod(api: KubeDouble, name: str) -> dict[str, Any]:
    return api.get("pods", name, "default") or {}


def pod_patches(api: KubeDouble) -> list[str]:
    return [r.path for r in api.requests if r.method == "PATCH" and "/pods/" in r.path]


def test_the_kubelet_s_gpus_correct_the_annotation_once(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,
) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(device("n1", 2))
    double.put(pod_obj("a", gpus=1))
    scheduler = start()
    wait_until(lambda: double.bound() == {"a": "n1"})
    [chosen] = allocation_of(pod(double, "a"))[1]
    other = 1 - chosen
    # The kubelet gave the container the other GPU: the agent says so.
    double.put(device("n1", 2, [held("a", f"fake-gpu-{other}")]))
    wait_until(lambda: allocation_of(pod(double, "a"))[1] == [other])
    notes = pod(double, "a")["metadata"]["annotations"]
    assert notes["kgpu.io/visible-devices"] == str(other)
    assert json.loads(notes["kgpu.io/device-allocation"])["gpu"][0]["uuid"] == f"fake-gpu-{other}"
    wait_until(lambda: len(events(double, "DeviceAllocationCorrected")) == 1)
    assert events(double, "DeviceAllocationCorrected") == [
        f"a: the kubelet gave this pod GPU {other} of node n1, not GPU {chosen} as annotation "
        f"kgpu.io/device-allocation said; the annotation now names GPU {other} and kgpu "
        "counts them as the pod's"
    ]
    assert 'kgpu_device_allocation_corrections_total{node="n1"} 1.0' in metrics(scheduler)
    # The next pod goes where the GPU really is free: the one kgpu had first chosen.
    double.put(pod_obj("b", gpus=1))
    wait_until(lambda: "b" in double.bound())
    assert allocation_of(pod(double, "b"))[1] == [chosen]
    time.sleep(0.5)  # sessions after the correction: the difference is gone, nothing again
    assert pod_patches(double) == ["/api/v1/namespaces/default/pods/a"]
    assert len(events(double, "DeviceAllocationCorrected")) == 1
    assert 'kgpu_device_allocation_corrections_total{node="n1"} 1.0' in metrics(scheduler)


def _bound(name: str, minor: int, milli: int, created: str, **kw: Any) -> dict[str, Any]:
    note = {
        "minor": minor,
        "resources": {"kgpu.io/gpu-milli": milli, "kubernetes.io/gpu-core": milli // 10},
    }
    obj = pod_obj(name, node="n1", **kw)
    obj["metadata"]["annotations"]["kgpu.io/device-allocation"] = json.dumps({"gpu": [note]})
    obj["metadata"]["creationTimestamp"] = created
    return obj


def test_a_claim_on_a_gpu_another_pod_holds_is_reported_not_applied(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,
) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(signed(double, _bound("share", 1, 500, "2025-01-01T00:00:00Z", fraction="0.5")))
    double.put(signed(double, _bound("whole", 0, 1000, "2025-01-01T00:00:01Z", gpus=1)))
    double.put(device("n1", 2, [held("whole", "fake-gpu-1")]))
    scheduler = start()
    wait_until(lambda: len(events(double, "DeviceAllocationConflict")) == 1)
    [said] = events(double, "DeviceAllocationConflict")
    assert said.startswith(
        "whole: the kubelet gave this pod GPU 1 of node n1, not GPU 0 as annotation "
        "kgpu.io/device-allocation says, but GPUs [1] of n1 have no room for it in kgpu's books"
    )
    assert said.endswith("kgpu counts GPU 0 as the pod's until this is resolved")
    assert 'kgpu_device_allocation_conflicts_total{node="n1"} 1.0' in metrics(scheduler)
    # Nothing written, nothing counted twice: only the other half of GPU 1 is left.
    double.put(pod_obj("half", fraction="0.5"))
    double.put(pod_obj("one", gpus=1))
    wait_until(lambda: "half" in double.bound())
    assert allocation_of(pod(double, "half"))[1] == [1]
    wait_until(lambda: any(e.startswith("one:") for e in events(double, "FailedScheduling")))
    time.sleep(0.3)
    assert pod_patches(double) == []
    assert allocation_of(pod(double, "whole"))[1] == [0]
    assert len(events(double, "DeviceAllocationConflict")) == 1


def test_hostile_checkpoints_are_refused_alone_and_scheduling_goes_on(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,
) -> None:
    double.put(node_obj("n1", gpus=4))
    double.put(node_obj("n2", gpus=1))
    double.put(pod_obj("theirs", gpus=1, scheduler="default-scheduler", node="n1"))
    double.put(pod_obj("elsewhere", gpus=1, scheduler="default-scheduler", node="n2"))
    claims: list[Any] = [
        held("theirs", "fake-gpu-3"),  # good: the foreign pod holds GPU 3
        held("ghost", "fake-gpu-0", namespace="kube-system"),  # no such pod
        held("elsewhere", "fake-gpu-1"),  # a pod of another node
        held("x", "fake-gpu-9"),  # no such GPU
        held("y", "fake-gpu-2", "fake-gpu-2"),  # a GPU twice
        held("z", *[f"id-{i}" for i in range(1000)]),  # more ids than any pod gets
        "fake-gpu-2",
    ]
    double.put(device("n1", 4, claims))
    double.put(pod_obj("mine", gpus=3))
    start()
    wait_until(lambda: "mine" in double.bound())
    assert allocation_of(pod(double, "mine"))[:2] == ("n1", [0, 1, 2])
    wait_until(lambda: len(events(double, "InvalidDeviceCheckpoint")) == 1)
    [refused] = events(double, "InvalidDeviceCheckpoint")
    for part in (
        'n1: Device n1: annotation kgpu.io/devices-checkpoints[3].deviceIDs[0] is "fake-gpu-9", '
        "expected the uuid of a GPU in spec.devices",
        '[4].deviceIDs[1] is "fake-gpu-2", expected each device id once',
        '[5].deviceIDs is "a list of 1000 ids", expected at most 256 ids',
        '[6] is "fake-gpu-2", expected a JSON list such as',
    ):
        assert part in refused
    wait_until(lambda: len(events(double, "UnknownCheckpointPod")) == 1)
    assert events(double, "UnknownCheckpointPod") == [
        "n1: Device n1: checkpoint entries for pods not on node n1 are not used: "
        "pod kube-system/ghost, which does not exist (fake-gpu-0); "
        "pod default/elsewhere, which is bound to node n2 (fake-gpu-1)"
    ]


def mps_node(name: str, gpus: int, replicas: int) -> dict[str, Any]:
    """A node whose GPUs NVIDIA's plugin shares under MPS, renamed nvidia.com/gpu.shared."""
    obj = node_obj(name, gpus=gpus, labels={"nvidia.com/gpu.replicas": str(replicas)})
    allocatable = obj["status"]["allocatable"]  # the capacity too: one dict
    del allocatable["nvidia.com/gpu"]
    allocatable["nvidia.com/gpu.shared"] = str(gpus * replicas)
    return obj


def mps_pod(name: str, replicas: int) -> dict[str, Any]:
    obj = pod_obj(name)
    obj["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu.shared": str(replicas)}
    return obj


def replicas_held(name: str, *ids: str) -> dict[str, Any]:
    return {**held(name, *ids), "resourceName": "nvidia.com/gpu.shared"}


def test_mps_replicas_the_kubelet_gave_on_another_gpu_move_the_pod_there(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,
) -> None:
    double.put(mps_node("n1", gpus=2, replicas=2))
    double.put(device("n1", 2))
    double.put(mps_pod("a", 1))
    scheduler = start()
    wait_until(lambda: double.bound() == {"a": "n1"})
    _, [chosen], milli = allocation_of(pod(double, "a"))
    assert milli == 500  # one replica of two
    other = 1 - chosen
    # The device plugin gave the container a replica of the other GPU.
    double.put(device("n1", 2, [replicas_held("a", f"fake-gpu-{other}::1")]))
    wait_until(lambda: allocation_of(pod(double, "a"))[1] == [other])
    wait_until(lambda: len(events(double, "DeviceAllocationCorrected")) == 1)
    assert events(double, "DeviceAllocationCorrected") == [
        f"a: the kubelet gave this pod GPU {other} of node n1, not GPU {chosen} as annotation "
        f"kgpu.io/device-allocation said; the annotation now names GPU {other} and kgpu "
        "counts them as the pod's"
    ]
    assert 'kgpu_device_allocation_corrections_total{node="n1"} 1.0' in metrics(scheduler)
    # Three more replicas fill both GPUs exactly: none holds more than its two replicas.
    for name in ("b", "c", "d"):
        double.put(mps_pod(name, 1))
    wait_until(lambda: len(double.bound()) == 4)
    use: dict[int, int] = {}
    for name in "abcd":
        _, [minor], milli = allocation_of(pod(double, name))
        use[minor] = use.get(minor, 0) + milli
    assert use == {0: 1000, 1: 1000}


def test_mps_replicas_of_two_gpus_for_a_one_gpu_request_are_reported_not_applied(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,
) -> None:
    double.put(mps_node("n1", gpus=2, replicas=4))
    double.put(device("n1", 2))
    obj = mps_pod("a", 2)
    obj["spec"]["nodeName"] = "n1"
    obj["metadata"]["annotations"]["kgpu.io/device-allocation"] = json.dumps(
        {
            "gpu": [
                {"minor": 0, "resources": {"kgpu.io/gpu-milli": 500, "kubernetes.io/gpu-core": 50}}
            ]
        }
    )
    double.put(signed(double, obj))
    double.put(device("n1", 2, [replicas_held("a", "fake-gpu-0::0", "fake-gpu-1::0")]))
    start()
    wait_until(lambda: len(events(double, "DeviceAllocationConflict")) == 1)
    assert events(double, "DeviceAllocationConflict") == [
        "a: the kubelet gave this pod GPUs 0,1 of node n1, not GPU 0 as annotation "
        "kgpu.io/device-allocation says, but it asks 2 replicas of one GPU, yet the kubelet "
        "gave it replicas of GPUs [0, 1]; kgpu counts GPU 0 as the pod's until this is resolved"
    ]
    assert allocation_of(pod(double, "a"))[1] == [0]
