"""Which GPUs the kubelet says each bound pod holds, and where kgpu's books say otherwise.

The node's agent publishes the kubelet's device assignments in the Device resource's
checkpoint annotation (:mod:`kgpu.kube.objects.device_cr` reads and bounds it). For a
whole-GPU pod (``nvidia.com/gpu: N``) the kubelet, through the device plugin, picks the
GPUs, and kgpu cannot steer that: its ``kgpu.io/device-allocation`` annotation may name
GPU 1 while the container got GPU 2. The kubelet is right about what the container uses,
so a pod of ours whose entry names other GPUs than its annotation is accounted on the
kubelet's GPUs, if kgpu's books have them free (:func:`account_claimed`), and the
difference is kept (:class:`Difference`) for the live loop to correct the annotation and
report it. Otherwise the books keep the annotation and the difference is a conflict, to
report: never a GPU counted twice.

An entry is matched to a pod bound to the Device's node, by UID when it has one, else by
namespace and name. An entry that names a pod that does not exist or is bound elsewhere is
reported, and otherwise left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from kgpu.kube.objects.device_allocation import DeviceAllocation
from kgpu.kube.objects.device_cr import SHARED_GPU_RESOURCE, WHOLE_GPU_RESOURCE
from kgpu.kube.snapshot.allocation_rebuild import account_recorded, claim_problem, minors_of
from kgpu.kube.snapshot.conversion_cache import PodReading
from kgpu.model.devices import Checkpoint
from kgpu.model.gpu import GpuKind
from kgpu.model.pod import PodKey, PodSpec
from kgpu.state.cluster import ClusterState

# Stray entries a report names before it says how many more there are.
_NAMED = 5


@dataclass(frozen=True, slots=True)
class Difference:
    """A pod of ours that the kubelet gave other GPUs than its annotation names.

    ``conflict`` is "" when the snapshot accounts the pod on the kubelet's GPUs (its
    annotation is then to be corrected), else why the books keep what the annotation says.
    """

    obj: Mapping[str, Any]
    key: PodKey
    node: str
    recorded: tuple[int, ...]  # the GPU minors of its annotation
    kubelet: tuple[int, ...]  # the GPU minors the kubelet gave it
    conflict: str = ""
    # For a share: the reservation pods whose GPUs the kubelet gave (it gave the share none).
    reservation: str = ""


class Strays(NamedTuple):
    """A node's checkpoint entries no pod there took, said in a sentence; ``unseen``: some
    name a pod the cache does not have (deleted, or created a moment ago and not in the
    cache yet)."""

    text: str
    unseen: bool


class KubeletClaims:
    """The ``nvidia.com/gpu`` and ``nvidia.com/gpu.shared`` checkpoint entries of every node
    of a ClusterState, by pod: the GPUs, or replicas of a GPU, the kubelet gave it."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._by_uid: dict[tuple[int, str, str], Checkpoint] = {}
        self._by_name: dict[tuple[int, str, str], Checkpoint] = {}
        self._taken: set[tuple[int, Checkpoint]] = set()
        for index, devices in enumerate(state.devices):
            for entry in devices.checkpoints:
                if entry.resource not in (WHOLE_GPU_RESOURCE, SHARED_GPU_RESOURCE):
                    continue
                if entry.pod_uid:
                    self._by_uid[index, entry.pod_uid, entry.resource] = entry
                else:  # a UID names one incarnation of a pod; a name, whichever is there now
                    key = f"{entry.pod_namespace}/{entry.pod_name}"
                    self._by_name[index, key, entry.resource] = entry

    def slots(self, index: int, pod: PodReading) -> tuple[int, ...] | None:
        """The GPU slots of node ``index`` the kubelet gave ``pod`` (for MPS cards, the GPUs
        of the replicas it gave); None when it says none."""
        if not self._by_uid and not self._by_name:
            return None
        spec = pod.spec
        shared = isinstance(spec, PodSpec) and spec.gpu.kind is GpuKind.MPS
        resource = SHARED_GPU_RESOURCE if shared else WHOLE_GPU_RESOURCE
        entry = self._by_uid.get((index, pod.uid, resource)) or self._by_name.get(
            (index, pod.key, resource)
        )
        if entry is None:
            return None
        self._taken.add((index, entry))
        return self._state.devices[index].gpu_slots_of(entry.device_ids, replicas=shared)

    def strays(self, readings: Iterable[PodReading]) -> dict[int, Strays]:
        """By node index: the entries no pod there took whose pod does not exist or is bound
        to another node, said in a sentence (a pod not bound yet, or finished, is no stray)."""
        left = [
            (i, e)
            for table in (self._by_uid, self._by_name)
            for (i, _, _), e in table.items()
            if (i, e) not in self._taken
        ]
        if not left:
            return {}
        node_by_uid: dict[str, str] = {}
        node_by_key: dict[str, str] = {}
        for reading in readings:
            node_by_uid[reading.uid] = node_by_key[reading.key] = reading.node
        said: dict[int, list[str]] = {}
        unseen: set[int] = set()
        for index, entry in left:
            name = self._state.nodes[index].name
            where: str | None
            if entry.pod_uid:
                pod, where = f"UID {entry.pod_uid}", node_by_uid.get(entry.pod_uid)
            else:
                pod = f"{entry.pod_namespace}/{entry.pod_name}"
                where = node_by_key.get(pod)
            if where is None:
                text = f"pod {pod}, which does not exist"
                unseen.add(index)
            elif where and where != name:
                text = f"pod {pod}, which is bound to node {where}"
            else:
                continue
            said.setdefault(index, []).append(f"{text} ({', '.join(entry.device_ids)})")
        return {
            index: Strays(
                f"checkpoint entries for pods not on node {self._state.nodes[index].name} "
                f"are not used: {'; '.join(texts[:_NAMED])}"
                + (f"; and {len(texts) - _NAMED} more" if len(texts) > _NAMED else ""),
                index in unseen,
            )
            for index, texts in said.items()
        }


def account_claimed(
    state: ClusterState, spec: PodSpec, node: int, found: DeviceAllocation, slots: tuple[int, ...]
) -> str:
    """Account a pod of ours on the GPU ``slots`` the kubelet gave it instead of those its
    annotation ``found`` names; "" if done, else why not (nothing is then allocated)."""
    why = claim_problem(state, spec, node, slots)
    if why:
        return why
    minors = minors_of(state, node, slots)
    return account_recorded(state, spec, node, replace(found, minors=minors, memory_mib=()))
