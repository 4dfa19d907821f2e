"""A kubelet's pod-resources API for the agent's tests: a real gRPC server on a unix socket.

What :mod:`tests.kube_double` is for the API server, this is for the kubelet's socket: the
agent's client under test talks gRPC to it as to a kubelet, and the test says what the
kubelet knows (which pod's containers hold which devices, which devices its plugins
registered) and which API versions and methods it serves. It answers from that state on
every call, through the messages generated from the kubelet's own .proto files.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from kgpu.agent.podresources.v1 import api_pb2 as v1
from kgpu.agent.podresources.v1 import api_pb2_grpc as v1_grpc
from kgpu.agent.podresources.v1alpha1 import api_pb2 as v1alpha1
from kgpu.agent.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc


@dataclass
class PodDevices:
    """One pod as the kubelet holds it: ``containers[name][resource]`` the device ids."""

    namespace: str
    name: str
    containers: dict[str, dict[str, list[str]]] = field(default_factory=dict)


class KubeletDouble:
    """Serves ``apis`` (v1, v1alpha1 or both) on ``socket`` while in a ``with`` block.
    ``allocatable`` False: v1's GetAllocatableResources answers UNIMPLEMENTED, as a kubelet
    1.20 does. ``calls`` records each call, as "v1/List". ``unavailable``: how many of the
    next calls are answered UNAVAILABLE, as by a kubelet restarting or a dropped connection
    (a fault a real kubelet does not make on demand)."""

    def __init__(
        self,
        socket: Path,
        *,
        apis: tuple[str, ...] = ("v1", "v1alpha1"),
        allocatable: bool = True,
    ) -> None:
        self.socket = socket
        self.apis = apis
        self.allocatable = allocatable
        self.pods: list[PodDevices] = []
        self.devices: dict[str, list[str]] = {}  # by resource: what the plugins registered
        self.numa: dict[str, int] = {}  # a device's NUMA node, where it has one
        self.calls: list[str] = []
        self.unavailable = 0
        self._server: grpc.Server | None = None

    def give(self, namespace: str, name: str, container: str, resource: str, *ids: str) -> None:
        """The kubelet gives a pod's container devices (as its Allocate did)."""
        pod = next((p for p in self.pods if (p.namespace, p.name) == (namespace, name)), None)
        if pod is None:
            pod = PodDevices(namespace, name)
            self.pods.append(pod)
        pod.containers.setdefault(container, {}).setdefault(resource, []).extend(ids)

    def called(self, name: str, context: grpc.ServicerContext) -> None:
        self.calls.append(name)
        if self.unavailable > 0:
            self.unavailable -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")

    def register(self, resource: str, *ids: str) -> None:
        self.devices.setdefault(resource, []).extend(ids)

    def __enter__(self) -> KubeletDouble:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        if "v1" in self.apis:
            v1_grpc.add_PodResourcesListerServicer_to_server(_V1(self), server)
        if "v1alpha1" in self.apis:
            v1alpha1_grpc.add_PodResourcesListerServicer_to_server(_V1alpha1(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.stop(None).wait()
            self._server = None

    def answer(self, pb: Any) -> Any:
        """The List answer in ``pb``'s messages (v1 or v1alpha1's module)."""
        return pb.ListPodResourcesResponse(
            pod_resources=[
                pb.PodResources(
                    namespace=pod.namespace,
                    name=pod.name,
                    containers=[
                        pb.ContainerResources(
                            name=container,
                            devices=[
                                pb.ContainerDevices(resource_name=r, device_ids=ids)
                                for r, ids in held.items()
                            ],
                        )
                        for container, held in pod.containers.items()
                    ],
                )
                for pod in self.pods
            ]
        )


class _V1:
    def __init__(self, kubelet: KubeletDouble) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.kubelet.called("v1/List", context)
        return self.kubelet.answer(v1)

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.kubelet.called("v1/GetAllocatableResources", context)
        if not self.kubelet.allocatable:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "method GetAllocatableResources not implemented"
            )
        devices = []
        for resource, ids in self.kubelet.devices.items():
            for device in ids:  # one entry per device, with its NUMA node, as the kubelet does
                numa = self.kubelet.numa.get(device)
                topology = v1.TopologyInfo(nodes=[] if numa is None else [v1.NUMANode(ID=numa)])
                devices.append(
                    v1.ContainerDevices(
                        resource_name=resource, device_ids=[device], topology=topology
                    )
                )
        return v1.AllocatableResourcesResponse(devices=devices)


class _V1alpha1:
    def __init__(self, kubelet: KubeletDouble) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.kubelet.called("v1alpha1/List", context)
        return self.kubelet.answer(v1alpha1)


def fake_gpus(count: int) -> Iterator[str]:
    """The ids of kube-node's fake device plugin: fake-gpu-0, fake-gpu-1, ..."""
    return (f"fake-gpu-{i}" for i in range(count))
