"""What each cached Node and Pod reads as, remembered between sessions by version.

A session's snapshot is built from every object in the informers' caches, but between two
sessions only the pods just bound, created or deleted change: the rest are the very same
versions. An object's ``(uid, resourceVersion)`` names its content (the API server gives
every write a new version), so what was read of it (its PodSpec, or the ConversionError
that says why it cannot be read, the fields the snapshot sorts and filters by, its
``kgpu.io/device-allocation`` record) is kept and reused until the version changes.
Objects without a resourceVersion (hand-written ones) are read afresh every time.

A pod's version written by its own Binding, which sets ``spec.nodeName`` and adds the
allocation annotations and changes nothing else the reading depends on, keeps the PodSpec
read of its pending version, with the new annotations (:func:`_bound_spec`): each pod's
request is parsed once, not once pending and again bound (the parse is about 70 of the
100 CPU µs a pod's reading takes; comparing the two versions, about 10). A new pod that
asks what an earlier one asked, and a record written alike, are not parsed again either
(:mod:`kgpu.kube.snapshot.alike_pods`).

Entries of objects gone from the caches are dropped at the end of each build
(:meth:`ConversionCache.forget`), so memory follows the cluster's size, not its history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kgpu.kube.anchors.koordinator import DEVICE_ALLOCATED_ANNOTATION, node_info
from kgpu.kube.api.resource_types import meta
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, DeviceAllocation, parse
from kgpu.kube.objects.gpu_env import asks_device_plugin, own_env
from kgpu.kube.objects.node_pod import ConversionError, object_ref, pod_from_k8s
from kgpu.kube.objects.record_signature import RECORDS, RecordKey
from kgpu.kube.snapshot.alike_pods import AlikePods
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec


@dataclass(frozen=True, slots=True)
class PodReading:
    """One version of a pod, read once: what the snapshot sorts, filters and accounts by.

    ``allocation`` is the ``kgpu.io/device-allocation`` annotation as parsed (None when the
    pod has none); ``obj`` is the dict it was read from, the one events name.
    """

    obj: Mapping[str, Any]
    key: str  # "namespace/name": the cache key
    uid: str
    version: str
    order: tuple[str, str]  # (creationTimestamp, key): the order pods are accounted in
    scheduler: str  # spec.schedulerName, "default-scheduler" when unset
    node: str  # spec.nodeName, "" while pending
    phase: str
    deleting: bool
    spec: PodSpec | ConversionError
    allocation: DeviceAllocation | ConversionError | None
    # It asks the device plugin (``nvidia.com/...``): the kubelet hands out its GPUs. Other
    # GPU requests hold GPUs through reservation pods (kgpu.kube.objects.gpu_env).
    device_plugin: bool = False
    # Why its records (kgpu.kube.objects.record_signature) are not kgpu's; "" when they are,
    # it has none, or no key checks them. Untrusted records are not read: ``allocation``
    # is then None.
    untrusted: str = ""
    # A pending pod's own GPU environment where it differs from what the webhook leaves
    # (kgpu.kube.objects.gpu_env.own_env): read once per version, not every session.
    own_env: tuple[str, object, str] | None = None


def pod_fields(obj: Mapping[str, Any]) -> tuple[str, str, str, bool]:
    """(spec.schedulerName, spec.nodeName, status.phase, being deleted), read leniently."""
    # As decoded from JSON they are dicts: the ABC check only for anything else (this runs
    # for every watch event and every pod of every session).
    spec = obj.get("spec")
    if type(spec) is not dict and not isinstance(spec, Mapping):
        spec = {}
    status = obj.get("status")
    if type(status) is not dict and not isinstance(status, Mapping):
        status = {}
    return (
        str(spec.get("schedulerName") or "default-scheduler"),
        str(spec.get("nodeName") or ""),
        str(status.get("phase") or ""),
        meta(obj).get("deletionTimestamp") is not None,
    )


# What a Binding adds to a pod's annotations (kgpu.kube.live.binder): kgpu's records, and
# Koordinator's copy of the allocation for koordlet (kgpu.kube.anchors.koordinator).
_BINDING_ANNOTATIONS = frozenset((*RECORDS, DEVICE_ALLOCATED_ANNOTATION))


def read_pod(
    obj: Mapping[str, Any],
    known: PodSpec | None = None,
    record_key: RecordKey | None = None,
    alike: AlikePods | None = None,
) -> PodReading:
    """Read one pod version; its PodSpec from scratch unless ``known`` gives it (or
    ``alike`` has read a pod that asks the same). With ``record_key``, its records are read
    only if their signature verifies."""
    m = meta(obj)
    untrusted = record_key.problem(obj) if record_key is not None else ""
    key = _key(m)
    scheduler, node, phase, deleting = pod_fields(obj)
    spec: PodSpec | ConversionError
    if known is not None:
        spec = known
    else:
        try:
            spec = pod_from_k8s(obj) if alike is None else alike.read(obj)
        except ConversionError as exc:
            spec = exc
    plugin = asks_device_plugin(obj)
    env = None
    if not node and isinstance(spec, PodSpec):
        gpu = spec.gpu
        env = own_env(obj, gpu.gpu_slots > 0 and not plugin, gpu.count == 0 and not plugin)
    return PodReading(
        obj,
        key,
        str(m.get("uid", "")),
        str(m.get("resourceVersion", "")),
        (str(m.get("creationTimestamp") or ""), key),
        scheduler,
        node,
        phase,
        deleting,
        spec,
        None if untrusted else _allocation(obj, m, alike),
        plugin,
        untrusted,
        env,
    )


def _bound_spec(before: PodReading, obj: Mapping[str, Any]) -> PodSpec | None:
    """The PodSpec of ``obj`` if it is ``before`` (a readable pending version of the same
    pod) bound: ``spec`` the same but for ``nodeName``, the same labels, and the same
    annotations but for the Binding's, which hold strings; else None (read it afresh).
    Nothing else of the pod is read into a PodSpec, and the Binding's annotations are not
    part of its request, so this is the spec a fresh read would give."""
    spec = before.spec
    if before.node or not isinstance(spec, PodSpec):
        return None
    was, now = before.obj, obj
    was_spec, now_spec = was.get("spec"), now.get("spec")
    if not isinstance(was_spec, Mapping) or not isinstance(now_spec, Mapping):
        return None
    node = now_spec.get("nodeName")
    if not node or {**was_spec, "nodeName": node} != now_spec:
        return None
    was_meta, now_meta = meta(was), meta(now)
    if any(was_meta.get(k) != now_meta.get(k) for k in ("name", "namespace", "labels")):
        return None
    was_notes, now_notes = was_meta.get("annotations") or {}, now_meta.get("annotations") or {}
    if not isinstance(was_notes, Mapping) or not isinstance(now_notes, Mapping):
        return None
    if any(not isinstance(now_notes[k], str) for k in _BINDING_ANNOTATIONS.intersection(now_notes)):
        return None
    if _without_binding(was_notes) != _without_binding(now_notes):
        return None
    return replace(spec, annotations={str(k): v for k, v in now_notes.items()})


def _without_binding(annotations: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in annotations.items() if k not in _BINDING_ANNOTATIONS}


def _allocation(
    obj: Mapping[str, Any], m: Mapping[str, Any], alike: AlikePods | None = None
) -> DeviceAllocation | ConversionError | None:
    annotations = m.get("annotations")
    text = annotations.get(ALLOCATION_ANNOTATION) if isinstance(annotations, Mapping) else None
    if text is None:
        return None
    try:
        if alike is not None:
            return alike.allocation(obj, str(text))
        return parse(object_ref("Pod", obj), str(text))
    except ConversionError as exc:
        return exc


class ConversionCache:
    """Readings of pods and nodes by ``(uid or key, resourceVersion)``."""

    def __init__(self, record_key: RecordKey | None = None) -> None:
        self.record_key = record_key
        self._alike = AlikePods()
        self._pods: dict[str, PodReading] = {}
        self._nodes: dict[str, tuple[str, NodeInfo | ConversionError]] = {}
        self._pods_seen: set[str] = set()
        self._nodes_seen: set[str] = set()

    def pod(self, obj: Mapping[str, Any]) -> PodReading:
        m = meta(obj)
        version = str(m.get("resourceVersion", ""))
        mark = str(m.get("uid", "")) or _key(m)
        known = self._pods.get(mark)
        self._pods_seen.add(mark)
        if known is not None and version and known.version == version:
            return known
        spec = None
        if known is not None and known.uid and known.uid == m.get("uid"):
            spec = _bound_spec(known, obj)
        reading = read_pod(obj, spec, self.record_key, self._alike)
        self._pods[mark] = reading
        return reading

    def node(
        self, key: str, obj: Mapping[str, Any], device: Mapping[str, Any] | None = None
    ) -> NodeInfo | ConversionError:
        """The node ``key`` read together with its Device resource (kgpu's or
        Koordinator's), if it has one."""
        version = _version(obj) + ("/" + _version(device) if device else "")
        known = self._nodes.get(key)
        self._nodes_seen.add(key)
        if known is not None and known[0] == version and version:
            return known[1]
        try:
            node: NodeInfo | ConversionError = node_info(obj, device)
        except ConversionError as exc:
            node = exc
        self._nodes[key] = (version, node)
        return node

    def forget(self) -> None:
        """Drop the readings of objects not asked for since the last call: they are gone."""
        for table, seen in ((self._pods, self._pods_seen), (self._nodes, self._nodes_seen)):
            if len(seen) < len(table):
                for mark in [k for k in table if k not in seen]:
                    del table[mark]
            seen.clear()

    def __len__(self) -> int:
        return len(self._pods) + len(self._nodes)


def _key(m: Mapping[str, Any]) -> str:
    """``object_key`` from the metadata already at hand."""
    namespace = m.get("namespace")
    name = str(m.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


def _version(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion", ""))
