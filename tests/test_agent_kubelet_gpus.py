"""The agent on a node without NVML: its GPUs as the kubelet lists them (the pod-resources
API's GetAllocatableResources, else the checkpoint file's RegisteredDevices), and which pod
holds which (List, else the file), published through the same loop into the API double."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent.agent_loop import Agent, AgentOptions, Observer
from kgpu.agent.device_object import CHECKPOINT_ANNOTATION
from kgpu.agent.inventory import discover
from kgpu.agent.kubelet_gpus import NO_DRIVER, KubeletGpuProbe, gfd_memory_mib, natural_key
from kgpu.agent.pod_resources_client import PodResourcesClient
from kgpu.agent.probe import ProbeError
from kgpu.agent.publish import DevicePublisher
from kgpu.kube.api.client import KubeClient
from kgpu.kube.objects.device_cr import devices_from_k8s
from tests.agent_double import NODE, Clock, client, device_of, double
from tests.kube_double import KubeDouble
from tests.kubelet_double import KubeletDouble, fake_gpus

__all__ = ["client", "double"]  # the fixtures this module uses, from tests.agent_double


@pytest.fixture
def pod_resources(tmp_path: Path) -> Iterator[PodResourcesClient]:
    with PodResourcesClient(tmp_path / "kubelet.sock", timeout=5.0) as c:
        yield c


def _checkpoint(tmp_path: Path, registered: object, entries: object = None) -> Path:
    path = tmp_path / "kubelet_internal_checkpoint"
    data = {"PodDeviceEntries": entries, "RegisteredDevices": {"nvidia.com/gpu": registered}}
    path.write_text(json.dumps({"Data": data, "Checksum": 1}))
    return path


def test_minors_follow_the_ids_natural_order() -> None:
    ids = ["fake-gpu-10", "fake-gpu-2", "fake-gpu-9", "fake-gpu-0"]
    assert sorted(ids, key=natural_key) == ["fake-gpu-0", "fake-gpu-2", "fake-gpu-9", "fake-gpu-10"]
    assert sorted(["GPU-b", "GPU-a1", "GPU-a"], key=natural_key) == ["GPU-a", "GPU-a1", "GPU-b"]


def test_from_the_checkpoint_files_registered_devices(tmp_path: Path) -> None:
    registered = [f"fake-gpu-{i}" for i in (3, 11, 0, 2, 1)]
    probe = KubeletGpuProbe(None, _checkpoint(tmp_path, registered), memory_mib=16384)
    found = discover(probe)
    assert [(g.minor, g.uuid) for g in found.gpus] == [
        (0, "fake-gpu-0"),
        (1, "fake-gpu-1"),
        (2, "fake-gpu-2"),
        (3, "fake-gpu-3"),
        (4, "fake-gpu-11"),
    ]
    assert {(g.memory_mib, g.numa, g.problem) for g in found.gpus} == {(16384, -1, "")}
    assert found.driver == NO_DRIVER
    assert set(found.links[0][1:]) == {"SYS"}  # nothing claimed that only NVML knows


def test_get_allocatable_resources_is_preferred_and_gives_numa_nodes(
    tmp_path: Path, pod_resources: PodResourcesClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kgpu.agent.kubelet_gpus")
    checkpoint = _checkpoint(tmp_path, ["stale-0"])
    probe = KubeletGpuProbe(pod_resources, checkpoint)
    with KubeletDouble(pod_resources.socket) as kubelet:
        kubelet.register("nvidia.com/gpu", "fake-gpu-1", "fake-gpu-0")
        kubelet.numa = {"fake-gpu-0": 0, "fake-gpu-1": 1}
        found = discover(probe)
    assert [(g.minor, g.uuid, g.numa) for g in found.gpus] == [
        (0, "fake-gpu-0", 0),
        (1, "fake-gpu-1", 1),
    ]
    # A kubelet 1.20 serves no GetAllocatableResources: the file's list, then.
    with KubeletDouble(pod_resources.socket, allocatable=False):
        again = KubeletGpuProbe(PodResourcesClient(pod_resources.socket), checkpoint)
        assert [g.uuid for g in discover(again).gpus] == ["stale-0"]
        again.close()
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"nvidia.com/gpu GPUs read from the kubelet's pod-resources GetAllocatableResources at "
        f"{pod_resources.socket}",
        f"nvidia.com/gpu GPUs read from the kubelet's checkpoint file {checkpoint}",
    ]


def test_a_gpu_the_kubelet_stops_listing_keeps_its_minor_and_turns_unhealthy(
    tmp_path: Path,
) -> None:
    probe = KubeletGpuProbe(None, _checkpoint(tmp_path, list(fake_gpus(3))))
    first = discover(probe)
    _checkpoint(tmp_path, ["fake-gpu-0", "fake-gpu-2"])
    second = discover(probe, first)
    assert [(g.minor, g.uuid, g.problem) for g in second.gpus] == [
        (0, "fake-gpu-0", ""),
        (1, "fake-gpu-1", "the kubelet no longer lists nvidia.com/gpu fake-gpu-1: its device "
         "plugin found it unhealthy, or is gone"),
        (2, "fake-gpu-2", ""),
    ]  # fmt: skip
    _checkpoint(tmp_path, list(fake_gpus(3)))
    assert discover(probe, second).unhealthy == []


def test_a_gpu_listed_later_takes_the_next_minor_and_moves_none(tmp_path: Path) -> None:
    probe = KubeletGpuProbe(None, _checkpoint(tmp_path, ["fake-gpu-1", "fake-gpu-2"]))
    first = discover(probe)
    _checkpoint(tmp_path, ["fake-gpu-3", "fake-gpu-0", "fake-gpu-1", "fake-gpu-2"])
    second = discover(probe, first)
    assert [(g.minor, g.uuid) for g in second.gpus] == [
        (0, "fake-gpu-1"),
        (1, "fake-gpu-2"),
        (2, "fake-gpu-0"),
        (3, "fake-gpu-3"),
    ]


@pytest.mark.parametrize(
    ("registered", "message"),
    [
        ({"a": 1}, 'Data.RegisteredDevices["nvidia.com/gpu"] is {"a": 1}, expected a list of '
         "device ids"),
        ([f"g{i}" for i in range(5000)], 'Data.RegisteredDevices["nvidia.com/gpu"] has 5000 '
         "ids, more than 4096; refused"),
    ],
)  # fmt: skip
def test_a_malformed_registered_list_is_a_probe_error_naming_it(
    tmp_path: Path, registered: object, message: str
) -> None:
    path = _checkpoint(tmp_path, registered)
    with pytest.raises(ProbeError) as caught:
        KubeletGpuProbe(None, path).count()
    assert str(caught.value) == (
        f"the kubelet's GPUs cannot be read: kubelet checkpoint {path}: {message}"
    )


def test_the_nodes_gfd_memory_label_in_mib() -> None:
    assert gfd_memory_mib({"nvidia.com/gpu.memory": "81920"}) == 81920
    assert gfd_memory_mib({"nvidia.com/gpu.memory": "lots"}) == 0
    assert gfd_memory_mib({"nvidia.com/gpu.memory": "8²"}) == 0  # a digit, but not ASCII
    assert gfd_memory_mib({}) == 0


def _agent(client: KubeClient, probe: KubeletGpuProbe, checkpoint: Path) -> Agent:
    observer = Observer(probe, checkpoint, pod_resources=probe.pod_resources)
    publisher = DevicePublisher(client, NODE, now=lambda: "2026-11-22T10:00:00Z")
    return Agent(observer, publisher, AgentOptions(NODE, 0.1, 60.0), Clock())


def _annotation(obj: dict[str, Any]) -> Any:
    return json.loads(obj["metadata"]["annotations"][CHECKPOINT_ANNOTATION])


def test_the_loop_publishes_the_kubelets_gpus_and_which_pod_holds_which(
    double: KubeDouble,
    client: KubeClient,
    pod_resources: PodResourcesClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kgpu.agent.agent_loop")
    checkpoint = _checkpoint(
        tmp_path,
        list(fake_gpus(4)),
        [{"PodUID": "u9", "ContainerName": "c", "ResourceName": "nvidia.com/gpu",
          "DeviceIDs": {"-1": ["fake-gpu-1"]}}],
    )  # fmt: skip
    agent = _agent(client, KubeletGpuProbe(pod_resources, checkpoint, 24576), checkpoint)
    with KubeletDouble(pod_resources.socket) as kubelet:
        kubelet.register("nvidia.com/gpu", *fake_gpus(4))
        kubelet.give("team-a", "two", "main", "nvidia.com/gpu", "fake-gpu-3", "fake-gpu-0")
        kubelet.give("team-b", "one", "main", "nvidia.com/gpu", "fake-gpu-2")
        assert agent.round() is True
        obj = device_of(double)
        assert _annotation(obj) == [
            {"podNamespace": "team-a", "podName": "two", "resourceName": "nvidia.com/gpu",
             "deviceIDs": ["fake-gpu-3", "fake-gpu-0"]},
            {"podNamespace": "team-b", "podName": "one", "resourceName": "nvidia.com/gpu",
             "deviceIDs": ["fake-gpu-2"]},
        ]  # fmt: skip
        assert obj["spec"]["devices"][2] == {
            "type": "gpu",
            "minor": 2,
            "uuid": "fake-gpu-2",
            "health": True,
            "resources": {
                "kubernetes.io/gpu-core": 100,
                "kubernetes.io/gpu-memory-ratio": 100,
                "kubernetes.io/gpu-memory": "24576Mi",
            },
            "topology": {"nodeID": -1},
        }
        # What the scheduler makes of the GPUs: each device id names one minor.
        without = {k: v for k, v in obj.items() if k != "metadata"} | {"metadata": {"name": NODE}}
        gpus = devices_from_k8s(without).gpus
        assert [(g.minor, g.uuid, g.memory_mib) for g in gpus] == [
            (i, f"fake-gpu-{i}", 24576) for i in range(4)
        ]
        kubelet.pods.pop()  # a pod ends: the next round says so
        assert agent.round() is True
        assert [e["podName"] for e in _annotation(device_of(double))] == ["two"]
    # The kubelet's socket goes (the server stopped, its file removed): the checkpoint
    # file says, from then on, and the log says which source is read.
    pod_resources.socket.unlink(missing_ok=True)
    assert agent.round() is True
    assert _annotation(device_of(double)) == [
        {"podUID": "u9", "resourceName": "nvidia.com/gpu", "deviceIDs": ["fake-gpu-1"]}
    ]
    said = [r.getMessage() for r in caplog.records if r.name == "kgpu.agent.agent_loop"]
    assert said[0] == (
        f"which devices the kubelet gave pods: read from its pod-resources API v1 at "
        f"{pod_resources.socket}"
    )
    assert said[-2] == (
        f"which devices the kubelet gave pods: read from its checkpoint file {checkpoint} "
        f"(no socket at {pod_resources.socket})"
    )


def test_a_refused_answer_leaves_the_annotation_and_the_loop_runs_on(
    double: KubeDouble,
    client: KubeClient,
    pod_resources: PodResourcesClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpoint = _checkpoint(tmp_path, list(fake_gpus(2)))
    agent = _agent(client, KubeletGpuProbe(pod_resources, checkpoint), checkpoint)
    with KubeletDouble(pod_resources.socket, allocatable=False) as kubelet:
        kubelet.give("team-a", "p", "main", "nvidia.com/gpu", "fake-gpu-0")
        agent.round()
        kubelet.give("team-a", "p", "main", "nvidia.com/gpu", "GPU-0 ; rm -rf /")
        agent.round()
        agent.round()
        assert [d["uuid"] for d in device_of(double)["spec"]["devices"]] == list(fake_gpus(2))
    assert [e["deviceIDs"] for e in _annotation(device_of(double))] == [["fake-gpu-0"]]
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused == [  # once, not every round
        f"kubelet pod-resources v1 List at {pod_resources.socket}: pod_resources[0]"
        ".containers[0].devices[0].device_ids is 'GPU-0 ; rm -rf /', not a device plugin's id "
        "(printable, no blanks, at most 253 characters); refused; the Device's checkpoint "
        "annotation is left as it is"
    ]


def test_replicas_of_shared_gpus_are_one_gpu_each(
    tmp_path: Path, pod_resources: PodResourcesClient, caplog: pytest.LogCaptureFixture
) -> None:
    # NVIDIA's plugin under MPS (renamed nvidia.com/gpu.shared) lists each GPU per replica.
    caplog.set_level(logging.INFO, logger="kgpu.agent.kubelet_gpus")
    probe = KubeletGpuProbe(pod_resources, None)
    with KubeletDouble(pod_resources.socket) as kubelet:
        kubelet.register(
            "nvidia.com/gpu.shared", "GPU-b::0", "GPU-b::1", "GPU-a::0", "GPU-a::1", "GPU-a::2"
        )
        kubelet.numa = {"GPU-b::0": 1, "GPU-a::0": 0}
        found = discover(probe)
    assert [(g.minor, g.uuid, g.numa) for g in found.gpus] == [(0, "GPU-a", 0), (1, "GPU-b", 1)]
    assert [r.getMessage() for r in caplog.records] == [
        "nvidia.com/gpu.shared GPUs read from the kubelet's pod-resources "
        f"GetAllocatableResources at {pod_resources.socket}"
    ]
    # A kubelet 1.20: the checkpoint file's registered replicas say the same.
    path = tmp_path / "kubelet_internal_checkpoint"
    registered = {"nvidia.com/gpu.shared": ["GPU-b::0", "GPU-a::0", "GPU-a::1"]}
    path.write_text(json.dumps({"Data": {"RegisteredDevices": registered}, "Checksum": 1}))
    found = discover(KubeletGpuProbe(None, path))
    assert [(g.minor, g.uuid) for g in found.gpus] == [(0, "GPU-a"), (1, "GPU-b")]
