"""A fresh ClusterState for each scheduling session, built from the informers' caches.

What is in it:

- Nodes: the Ready ones, by name order (so ties break the same way every session). A node
  that cannot be read is left out with a Warning naming the field.
- Every pod bound to one of them that has not finished (Succeeded and Failed pods hold
  nothing, as kube-scheduler counts them), whichever scheduler bound it, so kgpu shares
  nodes with the default scheduler:

  1. Our pods first, each on the GPU minors its ``kgpu.io/device-allocation`` annotation
     records: this is how a restarted scheduler gets back the allocations it made. Where
     the node's Device says the kubelet gave the pod other GPUs, on those, if they have
     room; each such pod is a ``Difference`` (:mod:`kgpu.kube.snapshot.kubelet_claims`)
     that the live loop corrects or reports.
  2. Then every other bound pod on the GPUs the kubelet's checkpoint names for it (the
     node's Device resource carries it), else on the lowest-numbered GPUs that have room
     for it (the device plugin's choice is not otherwise visible from the API).
  3. Then the pods this scheduler placed whose binding the cache has not shown yet
     (``Assumed``), so two sessions never hand out the same GPU.
  4. With a reservation namespace set, the reservation pods there hold shared GPUs for our
     shares (:mod:`kgpu.kube.snapshot.reservations`): a share recorded on the GPU a
     reservation was made for is accounted on the GPU it really holds, and a reservation
     whose GPU holds no share holds that GPU whole.

- The pods to schedule: ours (``spec.schedulerName``), unbound, not being deleted, and not
  assumed. With reservations, a share the mutating webhook did not name a GPU-env ConfigMap
  for is not scheduled (its containers could not be confined to their GPU): it is
  ``unreadable``, with a message that says so.

Bad input never loses or double-counts an allocation. An annotation that cannot be read,
or that names GPUs the pod cannot have, gives a Warning (a ``Problem``) and the pod is
accounted as a foreign pod is, once. A bound pod that does not fit where it is (an
overcommitted node, or a request kgpu cannot read) holds everything the node has left:
the node is full to kgpu until the pod goes, which over-reserves rather than over-commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kgpu.kube.api.resource_types import meta, object_key
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, DeviceAllocation
from kgpu.kube.objects.fields import MISSING
from kgpu.kube.objects.gpu_env import (
    ENV_CONFIGMAP_ANNOTATION,
    ENV_CONFIGMAP_PREFIX,
    env_configmap,
)
from kgpu.kube.objects.node_pod import ConversionError, object_ref
from kgpu.kube.objects.record_signature import RecordKey
from kgpu.kube.objects.reservation_pod import is_reservation
from kgpu.kube.snapshot.allocation_rebuild import (
    account_recorded,
    account_unrecorded,
    minors_of,
)
from kgpu.kube.snapshot.conversion_cache import ConversionCache, PodReading, pod_fields
from kgpu.kube.snapshot.kubelet_claims import Difference, KubeletClaims, account_claimed
from kgpu.kube.snapshot.reservations import Reservation, ReservationBook
from kgpu.model.node import NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.state.cluster import ClusterState
from kgpu.state.holding import hold_rest

__all__ = [
    "Assumed",
    "CacheSnapshot",
    "Difference",
    "PendingPod",
    "Problem",
    "Reservation",
    "SnapshotBuilder",
    "pod_fields",
]

TERMINAL_PHASES = ("Succeeded", "Failed")
# A bound pod of ours whose records kgpu did not write (kgpu.kube.objects.record_signature).
UNTRUSTED = "UntrustedRecord"


@dataclass(frozen=True, slots=True)
class Assumed:
    """A pod this scheduler placed whose binding the cache has not shown yet.

    ``expires`` (a ``time.monotonic`` instant) is set when the outcome of the binding is
    unknown (a timeout): if the cache still shows the pod unbound then, the reservation
    goes and the pod is scheduled again. None while the bind is in flight or after it
    succeeded: the entry then lasts until the cache shows the pod bound or deleted.
    """

    uid: str
    spec: PodSpec
    node: NodeName
    gpus: tuple[int, ...]
    expires: float | None = None
    backed: bool = False  # it holds GPUs through reservation pods (not the device plugin)


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong with an object, to report as a Warning event on it."""

    obj: Mapping[str, Any]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PendingPod:
    obj: Mapping[str, Any]
    spec: PodSpec


@dataclass(slots=True)
class CacheSnapshot:
    state: ClusterState
    pending: list[PendingPod] = field(default_factory=list)
    unreadable: list[tuple[Mapping[str, Any], ConversionError]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    specs: list[PodSpec] = field(default_factory=list)  # every readable pod: typical pods
    # Our readable pods bound to a Ready node and not being deleted: a session's running
    # tasks (a pod on its way out is no one's victim any more).
    bound: list[PendingPod] = field(default_factory=list)
    # Bound pods of ours whose records kgpu did not sign: their kgpu.io/admitted-queue too is
    # not believed (kgpu.kube.snapshot.session_input).
    unsigned: set[PodKey] = field(default_factory=set)
    # Ready nodes where some pod is terminating: still holding what it held until it is
    # gone (a preemptor nominated there waits for that, see kgpu.kube.live.waiting).
    terminating: set[str] = field(default_factory=set)
    from_annotations: int = 0
    foreign: int = 0
    assumed: int = 0
    held: int = 0  # bound pods accounted as filling what their node had left
    # Pods of ours the kubelet gave other GPUs than their annotation names.
    differences: list[Difference] = field(default_factory=list)
    # Nodes whose Device checkpoint names pods the cache does not have: maybe pods created a
    # moment ago, whose GPUs may explain a difference there (kgpu.kube.live.allocation_correction).
    unseen_holders: set[str] = field(default_factory=set)
    # Reservation pods, the GPUs they hold, and the GPUs our bound shares hold through them.
    reservations: ReservationBook = field(default_factory=ReservationBook)
    # Our bound pods that hold GPUs through reservations, with the minors their annotation
    # records (the GPU-env ConfigMap is written only once those are the reserved GPUs).
    backed: list[tuple[PendingPod, str, tuple[int, ...]]] = field(default_factory=list)


def is_ready(node: Mapping[str, Any]) -> bool:
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


class SnapshotBuilder:
    """Builds snapshots; what each object reads as is remembered by (uid, resourceVersion)
    between sessions (:mod:`kgpu.kube.snapshot.conversion_cache`), so a session reads only
    the objects that changed since the last one."""

    def __init__(
        self,
        scheduler_name: str,
        reservation_namespace: str | None = None,
        *,
        record_key: RecordKey | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        # None: shares are accounted only; no reservation pods are read.
        self.reservation_namespace = reservation_namespace
        # Records are used only where their signature verifies with it; None: as written
        # (offline readers: the simulator, tests of the accounting alone).
        self.conversions = ConversionCache(record_key)

    def build(
        self,
        node_objs: Iterable[Mapping[str, Any]],
        pod_objs: Iterable[Mapping[str, Any]],
        assumed: Mapping[PodKey, Assumed],
        devices: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> CacheSnapshot:
        """``devices`` maps node names to their ``Device`` resources (UUIDs, health,
        topology and the kubelet's checkpoint), for the nodes that have one."""
        problems: list[Problem] = []
        nodes = []
        read = self.conversions
        every_node = sorted(node_objs, key=object_key)
        for obj in every_node:
            if not is_ready(obj):
                continue
            key = object_key(obj)
            node = read.node(key, obj, (devices or {}).get(str(meta(obj).get("name"))))
            if isinstance(node, ConversionError):
                problems.append(
                    Problem(obj, "InvalidNode", f"{node}; the node is not scheduled to")
                )
            else:
                nodes.append(node)
        snap = CacheSnapshot(ClusterState(nodes), problems=problems)
        ours: list[tuple[PodReading, PodSpec, int]] = []
        others: list[tuple[PodReading, int]] = []
        index_of = snap.state.index
        readings = sorted((read.pod(obj) for obj in pod_objs), key=_creation_order)
        read.forget()
        namespace = self.reservation_namespace
        reserving: list[tuple[PodReading, int]] = []
        for pod in readings:
            if namespace is not None and pod.node and is_reservation(pod.obj, namespace):
                reserving.append((pod, index_of.get(NodeName(pod.node), -1)))
                continue
            if pod.phase in TERMINAL_PHASES:
                continue
            spec = pod.spec
            if isinstance(spec, PodSpec):
                snap.specs.append(spec)
            if pod.node:
                index = index_of.get(NodeName(pod.node))
                if index is None:
                    continue  # on a node that is not Ready (or not there): nothing to share
                if pod.deleting:
                    snap.terminating.add(pod.node)
                if pod.scheduler == self.scheduler_name and isinstance(spec, PodSpec):
                    ours.append((pod, spec, index))
                    if not pod.deleting:
                        snap.bound.append(PendingPod(pod.obj, spec))
                    if pod.untrusted:
                        snap.unsigned.add(spec.key)
                else:
                    others.append((pod, index))
            elif pod.scheduler == self.scheduler_name and not pod.deleting:
                entry = assumed.get(PodKey(pod.key))
                if entry is not None and entry.uid == pod.uid:
                    continue
                if isinstance(spec, PodSpec) and namespace is not None:
                    spec = _confinable(pod, spec)
                if isinstance(spec, ConversionError):
                    snap.unreadable.append((pod.obj, spec))
                else:
                    snap.pending.append(PendingPod(pod.obj, spec))
        claims = KubeletClaims(snap.state)
        book = snap.reservations
        if reserving:
            names = {str(meta(n).get("name")) for n in every_node}
            book.read(snap.state, reserving, claims, names)
        # Shares whose reservation holds another GPU than they record go last, so that two
        # groups of shares whose reservations got each other's GPU trade places.
        moving: list[tuple[PodReading, PodSpec, int, DeviceAllocation]] = []
        for pod, spec, index in ours:
            backed = namespace is not None and _backed(pod, spec)
            found = pod.allocation
            if (
                backed
                and book.moves
                and isinstance(found, DeviceAllocation)
                and book.moved(index, found.minors)[1]
            ):
                moving.append((pod, spec, index, found))
                continue
            self._account_ours(snap, pod, spec, index, claims.slots(index, pod))
            if backed:
                self._note_backed(snap, pod, spec)
        for pod, spec, index, found in moving:
            if not self._account_moved(snap, pod, spec, index, found):
                self._account_ours(snap, pod, spec, index, None)
            self._note_backed(snap, pod, spec)
        for pod, index in others:
            obj, maybe = pod.obj, pod.spec
            if isinstance(maybe, ConversionError):
                _hold(snap.state, PodKey(object_key(obj)), index)
                snap.held += 1
                problems.append(
                    Problem(
                        obj,
                        "UnreadableBoundPod",
                        (
                            f"{maybe}; kgpu counts node {snap.state.nodes[index].name} as full while this pod runs there"
                        ),
                    )
                )
            else:
                self._account_lowest(snap, maybe, index, claims.slots(index, pod))
                snap.foreign += 1
        self._device_problems(snap, claims, readings, devices or {})
        for key, entry in sorted(assumed.items()):
            index = snap.state.index.get(entry.node)
            if index is None or key in snap.state.allocations:
                continue
            if _fits(snap.state, entry.spec, index, entry.gpus):
                snap.state.allocate(entry.spec, index, entry.gpus)
                if entry.backed:
                    book.back(entry.node, minors_of(snap.state, index, entry.gpus))
            else:
                _hold(snap.state, key, index)
                snap.held += 1
            snap.assumed += 1
        book.hold_idle(snap.state)
        return snap

    @staticmethod
    def _note_backed(snap: CacheSnapshot, pod: PodReading, spec: PodSpec) -> None:
        """Remember a bound share of ours and the GPUs it holds, for its reservation and its
        GPU-env ConfigMap."""
        alloc = snap.state.allocations.get(spec.key)
        if alloc is None or not alloc.gpus:
            return
        minors = minors_of(snap.state, alloc.node, alloc.gpus)
        snap.reservations.back(pod.node, minors)
        found = pod.allocation
        if not pod.deleting and isinstance(found, DeviceAllocation):
            snap.backed.append((PendingPod(pod.obj, spec), pod.node, found.minors))

    def _account_ours(
        self,
        snap: CacheSnapshot,
        pod: PodReading,
        spec: PodSpec,
        index: int,
        claimed: tuple[int, ...] | None,
    ) -> None:
        """Account a pod of ours: on the GPUs its annotation records, unless the kubelet
        gave it others (``claimed``, slots), which then win where they have room."""
        obj = pod.obj
        if not spec.gpu.wants_devices:
            where = self._account_lowest(snap, spec, index, claimed)
            if pod.untrusted:
                why = f"{object_ref('Pod', obj)}: {pod.untrusted}"
                snap.problems.append(Problem(obj, UNTRUSTED, f"{why}; not used, accounted {where}"))
            return
        found = pod.allocation
        if isinstance(found, DeviceAllocation) and claimed is not None:
            state = snap.state
            kubelet = minors_of(state, index, claimed)
            if kubelet != found.minors:
                conflict = account_claimed(state, spec, index, found, claimed)
                node = state.nodes[index].name
                snap.differences.append(
                    Difference(obj, spec.key, node, found.minors, kubelet, conflict)
                )
                if not conflict:
                    snap.from_annotations += 1
                    return
        reason = "InvalidDeviceAllocation"
        if found is None and pod.untrusted:
            why = f"{object_ref('Pod', obj)}: {pod.untrusted}; they are not used"
            reason = UNTRUSTED
        elif found is None:
            why = f"{object_ref('Pod', obj)}: annotation {ALLOCATION_ANNOTATION} is missing"
        elif isinstance(found, ConversionError):
            why = str(found)
        else:
            why = account_recorded(snap.state, spec, index, found)
            if not why:
                snap.from_annotations += 1
                return
            why = f"{object_ref('Pod', obj)}: annotation {ALLOCATION_ANNOTATION} {why}"
        where = self._account_lowest(snap, spec, index, claimed)
        snap.problems.append(Problem(obj, reason, f"{why}; accounted {where}"))

    @staticmethod
    def _account_moved(
        snap: CacheSnapshot, pod: PodReading, spec: PodSpec, index: int, found: DeviceAllocation
    ) -> bool:
        """Account a share on the GPUs its reservations hold, where those are not the ones
        its annotation records; True if it is accounted there."""
        book = snap.reservations
        moved, by = book.moved(index, found.minors)
        names = ", ".join(r.name for r in by)
        state = snap.state
        node = state.nodes[index].name
        pairs = sorted(zip(moved, found.memory_mib or (0,) * len(moved), strict=True))
        there = replace(
            found,
            minors=tuple(m for m, _ in pairs),
            memory_mib=tuple(mib for _, mib in pairs) if found.memory_mib else (),
        )
        why = account_recorded(state, spec, index, there)
        snap.differences.append(
            Difference(pod.obj, spec.key, node, found.minors, there.minors, why, names)
        )
        if why:
            return False
        for r in by:
            r.moved += 1
        snap.from_annotations += 1
        return True

    @staticmethod
    def _account_lowest(
        snap: CacheSnapshot, spec: PodSpec, index: int, claimed: tuple[int, ...] | None
    ) -> str:
        """Account a pod on the GPUs the kubelet's checkpoint names (``claimed``), else the
        lowest GPUs with room; say where, for messages."""
        state = snap.state
        where = account_unrecorded(state, spec, index, claimed)
        if where is not None:
            return where
        hold_rest(state, spec.key, index)
        snap.held += 1
        return f"as filling what is left of {state.nodes[index].name}"

    @staticmethod
    def _device_problems(
        snap: CacheSnapshot,
        claims: KubeletClaims,
        readings: list[PodReading],
        devices: Mapping[str, Mapping[str, Any]],
    ) -> None:
        """Warnings on Device resources: checkpoint entries refused as they were read, and
        entries for pods that are not on the Device's node."""
        state = snap.state
        for node in state.nodes:
            refused = node.devices.refused if node.devices is not None else ()
            obj = devices.get(node.name)
            if refused and obj is not None:
                text = "; ".join(refused[:5]) + (
                    f"; and {len(refused) - 5} more" if len(refused) > 5 else ""
                )
                snap.problems.append(
                    Problem(obj, "InvalidDeviceCheckpoint", f"{text}; those entries are not used")
                )
        for index, strays in claims.strays(readings).items():
            name = state.nodes[index].name
            if strays.unseen:
                snap.unseen_holders.add(name)
            obj = devices.get(name)
            if obj is not None:
                snap.problems.append(
                    Problem(obj, "UnknownCheckpointPod", f"Device {name}: {strays.text}")
                )


def _creation_order(pod: PodReading) -> tuple[str, str]:
    return pod.order


def _backed(pod: PodReading, spec: PodSpec) -> bool:
    """Does the pod hold GPUs through reservation pods (GPUs, not from the device plugin)?"""
    return spec.gpu.gpu_slots > 0 and not pod.device_plugin


def _confinable(pod: PodReading, spec: PodSpec) -> PodSpec | ConversionError:
    """``spec``, or why a pending pod cannot be scheduled: its containers would not be
    confined to the GPUs it is given (the webhook did not give it its GPU environment)."""
    share = _backed(pod, spec)
    again = (
        "create the pod again while the webhook serves (kgpu run serves it, kgpu manifests "
        "installs it)"
    )
    if share and env_configmap(pod.obj) is None:
        notes = meta(pod.obj).get("annotations")
        value = (
            notes.get(ENV_CONFIGMAP_ANNOTATION, MISSING) if isinstance(notes, Mapping) else MISSING
        )
        return ConversionError(
            object_ref("Pod", pod.obj),
            f"annotation {ENV_CONFIGMAP_ANNOTATION}",
            value,
            "the name of a ConfigMap kgpu's mutating webhook chose when the pod was created "
            f"({ENV_CONFIGMAP_PREFIX}...): without it the pod's containers could not be "
            f"confined to the GPU it would be given; {again}",
        )
    wrong = pod.own_env
    if wrong is None:
        return spec
    field, value, expected = wrong
    return ConversionError(
        object_ref("Pod", pod.obj),
        field,
        value,
        f"{expected}, as kgpu's mutating webhook sets it: the pod's own would show its "
        f"containers other GPUs than kgpu gives it; {again}",
    )


def _fits(state: ClusterState, spec: PodSpec, index: int, gpus: Iterable[int]) -> bool:
    """Would ``state.allocate`` accept this? (It raises on a misfit, which is for bugs.)"""
    return not state.fits(spec, index, gpus)


def _hold(state: ClusterState, key: PodKey, index: int) -> None:
    """Reserve everything node ``index`` has left for pod ``key``."""
    hold_rest(state, key, index)
