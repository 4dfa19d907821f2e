"""The kubelet's pod-resources API: which devices the kubelet gave which pod, and all it has.

The kubelet serves it over gRPC on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``): ``List`` names each pod's containers'
devices by resource (``nvidia.com/gpu`` and the device plugin's ids, ``GPU-…`` for
NVIDIA's); ``GetAllocatableResources`` (v1, kubelet 1.21+, by default from 1.23) lists every
device its plugins registered. v1 is asked first; a kubelet that answers UNIMPLEMENTED
(before 1.20) is asked v1alpha1, which has ``List`` only.

The answers are the node's word, but they are read defensively: an answer larger than
:data:`MAX_ANSWER_BYTES`, more pods, containers or ids than a node can hold, or an id or
name that is no printable token, is refused with :class:`PodResourcesError`, which names
what was wrong, so a kubelet's bug (or someone else's server on the socket) costs one
round's reading, never the agent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc

from kgpu.agent.kubelet import DEFAULT_SOCKET
from kgpu.agent.podresources.v1 import api_pb2 as v1
from kgpu.agent.podresources.v1 import api_pb2_grpc as v1_grpc
from kgpu.agent.podresources.v1alpha1 import api_pb2 as v1alpha1
from kgpu.agent.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc

GPU_RESOURCE: Final = "nvidia.com/gpu"
NVIDIA_PREFIX: Final = "nvidia.com/"
# Bounds on what is believed. A node runs at most a few hundred pods (110 by default), a
# pod a few dozen containers, and a GPU node holds tens of GPUs (each shared at most a few
# dozen ways by NVIDIA's time-slicing); an answer beyond these is a fault, not a node.
MAX_ANSWER_BYTES: Final = 16 << 20
MAX_PODS: Final = 5000
MAX_CONTAINERS: Final = 500  # per pod
MAX_DEVICE_IDS: Final = 4096  # per answer of one container's devices, or of allocatable
# A device plugin's id, a pod's namespace and name: printable, no blanks or quotes, and
# short (a UUID is 40 characters; a namespace 63, a pod's name 253).
_TOKEN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,252}")
_NOT_SERVED: Final = (grpc.StatusCode.UNIMPLEMENTED,)
_STUBS: Final[dict[str, Callable[[grpc.Channel], Any]]] = {
    "v1": v1_grpc.PodResourcesListerStub,
    "v1alpha1": v1alpha1_grpc.PodResourcesListerStub,
}


class PodResourcesError(Exception):
    """The kubelet could not be asked, or its answer is refused: the reason says which."""


@dataclass(frozen=True, slots=True)
class AllocatableDevice:
    """A device the kubelet has, with its NUMA node (-1 where it has none or several)."""

    id: str
    numa: int = -1


class PodResourcesClient:
    """One channel to the kubelet's socket, opened at the first call; ``close`` closes it.
    ``api`` says which version answered ``List`` last ("" before the first answer)."""

    def __init__(self, socket: Path = DEFAULT_SOCKET, timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout
        self.api = ""
        self._channel: grpc.Channel | None = None
        self._v1alpha1_only = False  # a kubelet that said UNIMPLEMENTED to v1's List
        self._allocatable_served: bool | None = None  # None: not asked yet

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def __enter__(self) -> PodResourcesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> grpc.Channel:
        if self._channel is None:
            options = [("grpc.max_receive_message_length", MAX_ANSWER_BYTES)]
            self._channel = grpc.insecure_channel(f"unix://{self.socket.absolute()}", options)
        return self._channel

    def pod_devices(self) -> list[dict[str, Any]]:
        """The devices of ``nvidia.com/`` resources the kubelet gave pods, as the Device's
        checkpoint entries: ``{"podNamespace", "podName", "resourceName", "deviceIDs"}``,
        one per pod and resource, its containers' ids merged in order without repeats."""
        if not self._v1alpha1_only:
            try:
                answer = self._call("v1", "List", v1.ListPodResourcesRequest())
            except _Unimplemented:
                self._v1alpha1_only = True
            else:
                self.api = "v1"
                return pod_entries(answer.pod_resources, self._where("v1 List"))
        answer = self._call("v1alpha1", "List", v1alpha1.ListPodResourcesRequest())
        self.api = "v1alpha1"
        return pod_entries(answer.pod_resources, self._where("v1alpha1 List"))

    def allocatable(self, resource: str = GPU_RESOURCE) -> list[AllocatableDevice] | None:
        """Every device of ``resource`` the kubelet has, healthy or not, in its order; None
        where the kubelet does not serve GetAllocatableResources (before 1.21, or with the
        KubeletPodResourcesGetAllocatable feature gate off), which is then not asked again."""
        found = self.allocatable_of((resource,))
        return None if found is None else found[resource]

    def allocatable_of(
        self, resources: tuple[str, ...]
    ) -> dict[str, list[AllocatableDevice]] | None:
        """:meth:`allocatable` for each of ``resources``, from one call."""
        if self._allocatable_served is False:
            return None
        try:
            answer = self._call("v1", "GetAllocatableResources", v1.AllocatableResourcesRequest())
        except _Unimplemented:
            self._allocatable_served = False
            return None
        self._allocatable_served = True
        where = self._where("v1 GetAllocatableResources")
        return {r: allocatable_devices(answer.devices, r, where) for r in resources}

    def _where(self, call: str) -> str:
        return f"kubelet pod-resources {call} at {self.socket}"

    def _call(self, api: str, method: str, request: Any) -> Any:
        try:
            try:
                return getattr(_STUBS[api](self._open()), method)(request, timeout=self.timeout)
            except grpc.RpcError as exc:
                if not isinstance(exc, grpc.Call) or exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                # The kubelet restarted (a new socket) or dropped the connection: once more
                # on a new channel, as a restarted kubelet answers at once.
                self.close()
                return getattr(_STUBS[api](self._open()), method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
            # A kubelet 1.21-1.22 with the feature gate off answers GetAllocatableResources
            # with a plain error that says so.
            if code in _NOT_SERVED or (
                code == grpc.StatusCode.UNKNOWN and "disabled" in str(details)
            ):
                raise _Unimplemented from exc
            where = self._where(f"{api} {method}")
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise PodResourcesError(
                    f"{where}: the answer is larger than {MAX_ANSWER_BYTES >> 20} MiB, more "
                    f"than a node's pods can hold; refused ({details})"
                ) from exc
            name = code.name if code is not None else "no status"
            raise PodResourcesError(f"{where}: {name}: {details}") from exc


class _Unimplemented(Exception):
    """The kubelet does not serve the method asked."""


def pod_entries(pods: Iterable[Any], where: str) -> list[dict[str, Any]]:
    """``List``'s pods as checkpoint entries (see :meth:`PodResourcesClient.pod_devices`)."""
    pods = list(pods)
    if len(pods) > MAX_PODS:
        raise PodResourcesError(f"{where}: {len(pods)} pods, more than {MAX_PODS}; refused")
    # Ids as dict keys: in order, each once, however many containers repeat them.
    merged: dict[tuple[str, str, str], dict[str, None]] = {}
    for i, pod in enumerate(pods):
        at = f"{where}: pod_resources[{i}]"
        namespace = _token(pod.namespace, f"{at}.namespace", "a namespace")
        name = _token(pod.name, f"{at}.name", "a pod's name")
        if len(pod.containers) > MAX_CONTAINERS:
            raise PodResourcesError(
                f"{at} ({namespace}/{name}): {len(pod.containers)} containers, more than "
                f"{MAX_CONTAINERS}; refused"
            )
        for c, container in enumerate(pod.containers):
            for d, devices in enumerate(container.devices):
                resource = devices.resource_name
                if not resource.startswith(NVIDIA_PREFIX):
                    continue
                found = _ids(devices.device_ids, f"{at}.containers[{c}].devices[{d}]")
                merged.setdefault((namespace, name, resource), {}).update(dict.fromkeys(found))
    return [
        {"podNamespace": ns, "podName": name, "resourceName": resource, "deviceIDs": list(ids)}
        for (ns, name, resource), ids in merged.items()
    ]


def allocatable_devices(
    devices: Iterable[Any], resource: str, where: str
) -> list[AllocatableDevice]:
    """GetAllocatableResources' devices of ``resource``, each id once."""
    out: dict[str, AllocatableDevice] = {}
    for d, entry in enumerate(devices):
        if entry.resource_name != resource:
            continue
        nodes = {node.ID for node in entry.topology.nodes} if entry.HasField("topology") else set()
        numa = next(iter(nodes)) if len(nodes) == 1 else -1
        for device in _ids(entry.device_ids, f"{where}: devices[{d}]"):
            out.setdefault(device, AllocatableDevice(device, int(numa)))
        if len(out) > MAX_DEVICE_IDS:
            raise PodResourcesError(
                f"{where}: more than {MAX_DEVICE_IDS} {resource} devices; refused"
            )
    return list(out.values())


def _ids(values: Iterable[str], where: str) -> list[str]:
    ids = list(values)
    if len(ids) > MAX_DEVICE_IDS:
        raise PodResourcesError(
            f"{where}.device_ids: {len(ids)} ids, more than {MAX_DEVICE_IDS}; refused"
        )
    return [_token(device, f"{where}.device_ids", "a device plugin's id") for device in ids]


def _token(value: str, where: str, what: str) -> str:
    if _TOKEN.fullmatch(value) is None:
        shown = value if len(value) <= 60 else f"{value[:60]}… ({len(value)} characters)"
        raise PodResourcesError(
            f"{where} is {shown!r}, not {what} (printable, no blanks, at most 253 "
            "characters); refused"
        )
    return value
