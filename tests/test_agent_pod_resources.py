"""The kubelet's pod-resources API as the agent reads it, from a real gRPC server on a unix
socket (tests.kubelet_double): List in v1 and v1alpha1, GetAllocatableResources where it is
served, and answers refused for what is wrong with them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.agent.pod_resources_client import (
    MAX_DEVICE_IDS,
    MAX_PODS,
    AllocatableDevice,
    PodResourcesClient,
    PodResourcesError,
)
from tests.kubelet_double import KubeletDouble, fake_gpus


@pytest.fixture
def client(tmp_path: Path) -> Iterator[PodResourcesClient]:
    with PodResourcesClient(tmp_path / "kubelet.sock", timeout=5.0) as c:
        yield c


def _node(kubelet: KubeletDouble) -> None:
    kubelet.register("nvidia.com/gpu", *fake_gpus(4))
    kubelet.give("team-a", "two-gpus", "main", "nvidia.com/gpu", "fake-gpu-3", "fake-gpu-0")
    kubelet.give("team-a", "two-gpus", "side", "nvidia.com/gpu", "fake-gpu-0", "fake-gpu-1")
    kubelet.give("team-a", "two-gpus", "side", "example.com/nic", "nic0")
    kubelet.give("team-b", "one-gpu", "main", "nvidia.com/gpu", "fake-gpu-2")
    kubelet.give("team-b", "no-gpu", "main", "example.com/nic", "nic1")


EXPECTED = [
    {
        "podNamespace": "team-a",
        "podName": "two-gpus",
        "resourceName": "nvidia.com/gpu",
        "deviceIDs": ["fake-gpu-3", "fake-gpu-0", "fake-gpu-1"],
    },
    {
        "podNamespace": "team-b",
        "podName": "one-gpu",
        "resourceName": "nvidia.com/gpu",
        "deviceIDs": ["fake-gpu-2"],
    },
]


def test_v1_list_gives_one_entry_per_pod_and_nvidia_resource(
    tmp_path: Path, client: PodResourcesClient
) -> None:
    with KubeletDouble(client.socket) as kubelet:
        _node(kubelet)
        assert client.pod_devices() == EXPECTED
        assert client.api == "v1"
        kubelet.pods.pop()  # the kubelet's state changes: the next answer says so
        kubelet.pods.pop()
        assert client.pod_devices() == EXPECTED[:1]
    assert kubelet.calls == ["v1/List", "v1/List"]


def test_a_kubelet_without_v1_is_asked_v1alpha1_from_then_on(client: PodResourcesClient) -> None:
    with KubeletDouble(client.socket, apis=("v1alpha1",)) as kubelet:
        _node(kubelet)
        assert client.pod_devices() == EXPECTED
        assert client.api == "v1alpha1"
        assert client.pod_devices() == EXPECTED
        # v1 once (UNIMPLEMENTED: the server has no such service), then v1alpha1 only;
        # and GetAllocatableResources, a v1 method, is not served there.
        assert client.allocatable() is None
    assert kubelet.calls == ["v1alpha1/List", "v1alpha1/List"]


def test_get_allocatable_resources_lists_the_devices_with_their_numa_node(
    client: PodResourcesClient,
) -> None:
    with KubeletDouble(client.socket) as kubelet:
        _node(kubelet)
        kubelet.register("example.com/nic", "nic0")
        kubelet.numa = {"fake-gpu-0": 0, "fake-gpu-1": 1}
        assert client.allocatable() == [
            AllocatableDevice("fake-gpu-0", 0),
            AllocatableDevice("fake-gpu-1", 1),
            AllocatableDevice("fake-gpu-2", -1),
            AllocatableDevice("fake-gpu-3", -1),
        ]
        assert client.allocatable("example.com/nic") == [AllocatableDevice("nic0")]


def test_a_kubelet_that_does_not_serve_get_allocatable_resources_is_asked_once(
    client: PodResourcesClient,
) -> None:
    with KubeletDouble(client.socket, allocatable=False) as kubelet:
        _node(kubelet)
        assert client.allocatable() is None
        assert client.allocatable() is None
        assert client.pod_devices() == EXPECTED  # List still is
    assert kubelet.calls == ["v1/GetAllocatableResources", "v1/List"]


def test_no_server_on_the_socket_is_an_error_that_says_where(client: PodResourcesClient) -> None:
    client.timeout = 0.5
    with pytest.raises(PodResourcesError) as caught:
        client.pod_devices()
    assert str(caught.value).startswith(
        f"kubelet pod-resources v1 List at {client.socket}: UNAVAILABLE: "
    )


@pytest.mark.parametrize(
    ("junk", "message"),
    [
        ("GPU-a b", "containers[0].devices[0].device_ids is 'GPU-a b', not a device plugin's id"),
        ("", "containers[0].devices[0].device_ids is '', not a device plugin's id"),
        ("GPU-\n\x1b[2J", "is 'GPU-\\n\\x1b[2J', not a device plugin's id"),
        ("x" * 300, f"is '{'x' * 60}… (300 characters)', not a device plugin's id"),
    ],
)
def test_a_junk_device_id_is_refused_with_what_was_wrong(
    client: PodResourcesClient, junk: str, message: str
) -> None:
    with KubeletDouble(client.socket) as kubelet:
        kubelet.give("team-a", "p", "main", "nvidia.com/gpu", "GPU-ok", junk)
        with pytest.raises(PodResourcesError) as caught:
            client.pod_devices()
    assert f"kubelet pod-resources v1 List at {client.socket}: pod_resources[0]." in str(
        caught.value
    )
    assert message in str(caught.value)
    assert str(caught.value).endswith("(printable, no blanks, at most 253 characters); refused")


def test_a_junk_pod_name_is_refused(client: PodResourcesClient) -> None:
    with KubeletDouble(client.socket) as kubelet:
        kubelet.give("team-a", "p q", "main", "nvidia.com/gpu", "GPU-ok")
        with pytest.raises(
            PodResourcesError, match=r"pod_resources\[0\]\.name is 'p q', not a pod's name"
        ):
            client.pod_devices()


def test_too_many_ids_or_pods_are_refused(client: PodResourcesClient) -> None:
    with KubeletDouble(client.socket) as kubelet:
        many = [f"GPU-{i}" for i in range(MAX_DEVICE_IDS + 1)]
        kubelet.give("team-a", "p", "main", "nvidia.com/gpu", *many)
        with pytest.raises(PodResourcesError) as caught:
            client.pod_devices()
        assert str(caught.value).endswith(
            f"pod_resources[0].containers[0].devices[0].device_ids: {MAX_DEVICE_IDS + 1} ids, "
            f"more than {MAX_DEVICE_IDS}; refused"
        )
        kubelet.pods = []
        for i in range(MAX_PODS + 1):
            kubelet.give("team-a", f"p{i}", "main", "example.com/nic", "nic0")
        with pytest.raises(
            PodResourcesError, match=f"{MAX_PODS + 1} pods, more than {MAX_PODS}; refused"
        ):
            client.pod_devices()
        kubelet.pods = []
        kubelet.register("nvidia.com/gpu", *many)
        with pytest.raises(
            PodResourcesError, match=f"more than {MAX_DEVICE_IDS} nvidia.com/gpu devices; refused"
        ):
            client.allocatable()


def test_an_answer_too_large_to_be_a_nodes_is_refused(client: PodResourcesClient) -> None:
    with KubeletDouble(client.socket) as kubelet:
        # 17 MiB of ids in 3000 pods: past the answer's bound before any count is looked at.
        for i in range(3000):
            kubelet.give("team-a", f"p{i}", "main", "nvidia.com/gpu", *(["x" * 200] * 30))
        with pytest.raises(PodResourcesError) as caught:
            client.pod_devices()
    assert "the answer is larger than 16 MiB, more than a node's pods can hold; refused" in str(
        caught.value
    )


def test_a_kubelet_restarted_between_two_rounds_answers_the_next_call(
    client: PodResourcesClient,
) -> None:
    with KubeletDouble(client.socket) as kubelet:
        _node(kubelet)
        assert client.pod_devices() == EXPECTED
    # The kubelet goes and a new one serves a new socket at the same path: the client's
    # connection to the old one is dead, and the next call still gets the new one's answer.
    client.socket.unlink(missing_ok=True)
    with KubeletDouble(client.socket) as kubelet:
        kubelet.give("team-c", "after", "main", "nvidia.com/gpu", "fake-gpu-1")
        assert client.pod_devices() == [
            {
                "podNamespace": "team-c",
                "podName": "after",
                "resourceName": "nvidia.com/gpu",
                "deviceIDs": ["fake-gpu-1"],
            }
        ]


def test_an_unavailable_kubelet_is_asked_once_more_then_named_in_the_error(
    client: PodResourcesClient,
) -> None:
    with KubeletDouble(client.socket) as kubelet:
        _node(kubelet)
        kubelet.unavailable = 1  # one dropped call: the next one answers
        assert client.pod_devices() == EXPECTED
        assert kubelet.calls == ["v1/List", "v1/List"]
        kubelet.unavailable = 2  # still down on the second try: the round fails, saying so
        with pytest.raises(PodResourcesError, match=r"v1 List at .*: UNAVAILABLE: kubelet"):
            client.pod_devices()
        assert client.api == "v1"  # UNAVAILABLE is not UNIMPLEMENTED: no fall back to v1alpha1
