"""Kubernetes Nodes and Pods, as plain dicts, into the model's NodeInfo and PodSpec.

The dicts are what the API server returns (or what a manifest file holds), so the live
scheduler and ``kgpu simulate manifests`` parse objects the same way. Every malformed value
raises :class:`ConversionError`, whose message names the object, the field, the value and
what was expected, so that a pending pod can say exactly what to fix:

    Pod default/p: annotation gpu-fraction is "abc", expected a number with 0 < f <= 1

Pod requests are summed as kube-scheduler sums them (``PodRequests`` in
k8s.io/component-helpers): containers add up, a sidecar (an init container with
``restartPolicy: Always``) adds to them, each other init container needs its own request
plus the sidecars started before it, the pod needs the largest of all that, plus
``spec.overhead``. A resource given only as a limit is requested at the limit, as the API
server defaults it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any, Final

from kgpu.kube.objects.device_cr import TOPOLOGY_ANNOTATION, devices_from_k8s, links_annotation
from kgpu.kube.objects.fields import MISSING as _MISSING
from kgpu.kube.objects.fields import ConversionError, Fields, show
from kgpu.kube.objects.gpu_dialects import (
    CARD_NAME_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_RESOURCE,
    MIG_PREFIX,
    MPS_RESOURCE,
    gpu_request_from_pod,
)
from kgpu.kube.objects.object_bounds import (
    at_most,
    bounded_json,
    check_devices,
    check_requests,
    label_number_within,
)
from kgpu.model.devices import NodeDevices
from kgpu.model.limits import (
    MAX_GPU_MEMORY_MIB,
    MAX_GPU_REPLICAS,
    MAX_MIG_INSTANCES,
    MAX_MIG_PROFILES,
    MAX_NODE_CPU,
    MAX_NODE_DEVICES,
    MAX_NODE_GPUS,
    MAX_NODE_MEMORY_MIB,
    MAX_NODE_PODS,
)
from kgpu.model.node import DEFAULT_MAX_PODS, NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.taints import Effect, Taint, Toleration
from kgpu.model.units import MIB, MILLI_PER_CPU

__all__ = [
    "CARD_NAME_ANNOTATION",
    "GPU_FRACTION_ANNOTATION",
    "GPU_RESOURCE",
    "ConversionError",
    "gpu_request_from_pod",
    "node_from_k8s",
    "object_ref",
    "pod_from_k8s",
    "pod_node_name",
    "show",
]

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
GPU_REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
QUEUE_LABELS: Final = ("kgpu.io/queue", "kai.scheduler/queue")  # the first one set wins
DEVICE_RESOURCES: Final = ("rdma", "fpga")  # kubernetes.io/<kind> (or koordinator.sh/), 100 each

_NATIVE_RESOURCES: Final = re.compile(
    r"cpu|memory|ephemeral-storage|hugepages-.+|.*kubernetes\.io/.+"
)
_MIG_COUNT_LABEL: Final = re.compile(r"nvidia\.com/mig-(?P<profile>.+)\.count")
_EFFECTS: Final = tuple(e.value for e in Effect)


def object_ref(kind: str, obj: Mapping[str, Any]) -> str:
    """ "Pod default/p" or "Node n1", as far as the object's metadata allows."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    name = name if isinstance(name, str) and name else "(no name)"
    if kind == "Node":
        return f"Node {name}"
    namespace = meta.get("namespace")
    namespace = namespace if isinstance(namespace, str) and namespace else "default"
    return f"{kind} {namespace}/{name}"


def _identify(kind: str, obj: Mapping[str, Any]) -> tuple[Fields, Mapping[str, Any]]:
    fields = Fields(object_ref(kind, obj))
    meta = fields.mapping(obj, "metadata", "metadata")
    name = meta.get("name", _MISSING)
    if not isinstance(name, str) or not name:
        raise fields.fail("metadata.name", name, "a non-empty string")
    fields.string(meta, "namespace", "metadata.namespace")
    return fields, meta


# ---------------------------------------------------------------------------- nodes


def node_from_k8s(
    obj: Mapping[str, Any],
    device: Mapping[str, Any] | None = None,
    *,
    devices: NodeDevices | None = None,
    agent_gpus: tuple[int, int] | None = None,
) -> NodeInfo:
    """A Node: allocatable resources, GFD labels, taints and cordon, and its devices.

    ``device`` is the node's ``kgpu.io/v1alpha1`` Device resource when there is one: its
    GPUs (UUIDs, health, memory, topology) then are the node's GPUs. The node annotation
    ``kgpu.io/gpu-topology`` gives the GPU link matrix (and wins over the Device's).

    An anchor's own objects come already read (:mod:`kgpu.kube.anchors`): ``devices`` is
    another agent's Device in place of ``device``, ``agent_gpus`` the (GPUs, MiB per GPU)
    another agent's node resources say, used only where the device plugin and GFD's labels
    say nothing.
    """
    fields, meta = _identify("Node", obj)
    labels = fields.strings(meta, "labels", "label")
    annotations = fields.strings(meta, "annotations", "annotation")
    status = fields.mapping(obj, "status", "status")
    # The API server fills allocatable from capacity; a hand-written node may give either.
    has_capacity_only = status.get("allocatable") is None and status.get("capacity") is not None
    where = "capacity" if has_capacity_only else "allocatable"
    alloc = fields.mapping(status, where, f"status.{where}")

    def amount(resource: str) -> Fraction:
        field = f"status.{where}[{resource}]"
        return fields.quantity(alloc.get(resource, _MISSING), field)

    def label_number(label: str, limit: int, unit: str = "") -> int | None:
        if label not in labels:
            return None
        return label_number_within(fields, label, labels[label], limit, unit)

    label_count = label_number(GPU_COUNT_LABEL, MAX_NODE_GPUS)
    replicas = label_number(GPU_REPLICAS_LABEL, MAX_GPU_REPLICAS) or 1
    # kgpu keeps a row per GPU, so a node claiming a million would take gigabytes; with
    # time-slicing each GPU is advertised once per replica.
    advertised = MAX_NODE_GPUS * replicas
    gpus = None
    if GPU_RESOURCE in alloc:
        field = f"status.{where}[{GPU_RESOURCE}]"
        gpus = at_most(fields, field, alloc[GPU_RESOURCE], advertised, "GPUs")
    if replicas > 1:
        # Time-slicing advertises each GPU ``replicas`` times (as nvidia.com/gpu, or as
        # nvidia.com/gpu.shared when renamed); the node has the physical ones.
        shared = alloc.get(MPS_RESOURCE)
        if gpus is None and shared is not None:
            field = f"status.{where}[{MPS_RESOURCE}]"
            gpus = at_most(fields, field, shared, advertised, "GPU replicas")
        gpus = label_count if label_count is not None else (gpus or 0) // replicas
    elif gpus is None:
        # Without the device plugin's figure, GFD's count of the hardware is what there is.
        gpus = label_count or (agent_gpus[0] if agent_gpus else 0)
    gpu_memory = (
        (label_number(GPU_MEMORY_LABEL, MAX_GPU_MEMORY_MIB, " of MiB") or 0)
        or (agent_gpus[1] if agent_gpus else 0)
        if gpus
        else 0
    )
    if device is not None:
        devices = devices_from_k8s(device)
    links_text = annotations.get(TOPOLOGY_ANNOTATION)
    links = (
        None
        if links_text is None
        else links_annotation(
            fields, bounded_json(fields, links_text, f"annotation {TOPOLOGY_ANNOTATION}")
        )
    )
    if links is not None:
        devices = replace(devices or NodeDevices(), links=links)
    if devices is not None:
        check_devices(fields, devices)
    if devices is not None and devices.gpus:
        # The node agent sees every GPU, the unhealthy ones too (they keep their minors).
        gpus = len(devices.gpus)
        gpu_memory = gpu_memory or min(d.memory_mib for d in devices.gpus)
    if links is not None and links.size != (
        len(devices.gpus) if devices and devices.gpus else gpus
    ):
        raise fields.fail(
            f"annotation {TOPOLOGY_ANNOTATION}",
            links_text,
            f"a {gpus}x{gpus} matrix, one row per GPU",
        )
    mig = _mig_counts(fields, alloc, where, labels)
    pods = alloc.get("pods")
    spec = fields.mapping(obj, "spec", "spec")
    unschedulable = spec.get("unschedulable") or False
    if not isinstance(unschedulable, bool):
        raise fields.fail("spec.unschedulable", unschedulable, "true or false")
    cpu, memory = amount("cpu"), amount("memory")
    if cpu > MAX_NODE_CPU:
        raise fields.fail(f"status.{where}[cpu]", alloc["cpu"], f"at most {MAX_NODE_CPU} CPUs")
    if memory > MAX_NODE_MEMORY_MIB * MIB:
        raise fields.fail(
            f"status.{where}[memory]", alloc["memory"], f"at most {MAX_NODE_MEMORY_MIB}Mi"
        )
    return NodeInfo(
        name=NodeName(meta["name"]),
        cpu_milli=math.floor(cpu * MILLI_PER_CPU),
        memory_mib=math.floor(memory / MIB),
        gpu_count=gpus,
        gpu_model=labels.get(GPU_PRODUCT_LABEL, "") if gpus or mig else "",
        gpu_memory_mib=gpu_memory,
        max_pods=DEFAULT_MAX_PODS
        if pods is None
        else at_most(fields, f"status.{where}[pods]", pods, MAX_NODE_PODS, "pods"),
        labels=labels,
        taints=tuple(
            _taint(fields, t, i) for i, t in enumerate(fields.items(spec, "taints", "spec.taints"))
        ),
        unschedulable=unschedulable,
        gpu_replicas=replicas,
        mig=mig,
        rdma=_device_count(fields, alloc, where, "rdma"),
        fpga=_device_count(fields, alloc, where, "fpga"),
        devices=devices,
    )


def _mig_counts(
    fields: Fields, alloc: Mapping[str, Any], where: str, labels: Mapping[str, str]
) -> tuple[tuple[str, int], ...]:
    """MIG instances per profile: the device plugin's ``nvidia.com/mig-<profile>``, else
    GFD's ``nvidia.com/mig-<profile>.count`` labels."""
    found: dict[str, int] = {}
    for name, value in alloc.items():
        if str(name).startswith(MIG_PREFIX):
            field = f"status.{where}[{name}]"
            count = at_most(fields, field, value, MAX_MIG_INSTANCES, "MIG instances")
            found[str(name).removeprefix(MIG_PREFIX)] = count
    # Every count label is checked, used or not: the node's cards are read from them too.
    labelled = {
        match["profile"]: label_number_within(fields, key, value, MAX_MIG_INSTANCES)
        for key, value in labels.items()
        if (match := _MIG_COUNT_LABEL.fullmatch(key)) is not None
    }
    found = found or labelled
    mig = tuple(sorted((p, n) for p, n in found.items() if n > 0))
    if len(mig) > MAX_MIG_PROFILES or len(labelled) > MAX_MIG_PROFILES:
        field = f"status.{where}" if len(mig) > MAX_MIG_PROFILES else "labels"
        raise fields.fail(
            field,
            f"{max(len(mig), len(labelled))} MIG profiles",
            f"at most {MAX_MIG_PROFILES} MIG profiles",
        )
    return mig


def _device_count(fields: Fields, alloc: Mapping[str, Any], where: str, kind: str) -> int:
    """Whole RDMA or FPGA devices: Koordinator reports 100 per device."""
    for prefix in ("kubernetes.io/", "koordinator.sh/"):
        value = alloc.get(prefix + kind)
        if value is not None:
            field = f"status.{where}[{prefix}{kind}]"
            count = int(fields.quantity(value, field)) // 100
            if count > MAX_NODE_DEVICES:
                raise fields.fail(field, value, f"at most {MAX_NODE_DEVICES * 100} (100 each)")
            return count
    return 0


def _taint(fields: Fields, taint: Mapping[str, Any], i: int) -> Taint:
    field = f"spec.taints[{i}]"
    key = fields.string(taint, "key", f"{field}.key")
    if not key:
        raise fields.fail(f"{field}.key", taint.get("key", _MISSING), "a non-empty string")
    effect = taint.get("effect", _MISSING)
    if effect not in _EFFECTS:
        raise fields.fail(f"{field}.effect", effect, "one of " + ", ".join(Effect))
    return Taint(key, fields.string(taint, "value", f"{field}.value"), Effect(effect))


# ---------------------------------------------------------------------------- pods


def pod_from_k8s(obj: Mapping[str, Any]) -> PodSpec:
    """A Pod: summed requests, its GPU request, selector, tolerations, priority and queue."""
    fields, meta = _identify("Pod", obj)
    namespace = fields.string(meta, "namespace", "metadata.namespace", "default") or "default"
    labels = fields.strings(meta, "labels", "label")
    annotations = fields.strings(meta, "annotations", "annotation")
    spec = fields.mapping(obj, "spec", "spec")
    requests = _pod_requests(fields, spec)
    check_requests(fields, requests)
    selector = fields.strings(spec, "nodeSelector", "spec.nodeSelector")
    priority = spec.get("priority")
    priority = 0 if priority is None else priority
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise fields.fail("spec.priority", priority, "an integer")
    tolerations = fields.items(spec, "tolerations", "spec.tolerations")
    return PodSpec(
        key=PodKey(f"{namespace}/{meta['name']}"),
        cpu_milli=math.ceil(requests.get("cpu", 0) * MILLI_PER_CPU),
        memory_mib=math.ceil(requests.get("memory", 0) / MIB),
        gpu=gpu_request_from_pod(fields.ref, requests, annotations),
        priority=priority,
        queue=next((labels[k] for k in QUEUE_LABELS if labels.get(k)), ""),
        # Sorted, so that two pods with the same selector written in another order share a shape.
        node_selector=tuple(sorted(selector.items())),
        tolerations=tuple(_toleration(fields, t, i) for i, t in enumerate(tolerations)),
        annotations=annotations,
    )


def pod_node_name(obj: Mapping[str, Any]) -> str:
    """``spec.nodeName``: the node a pod is already bound to, or "" if none."""
    fields = Fields(object_ref("Pod", obj))
    return fields.string(fields.mapping(obj, "spec", "spec"), "nodeName", "spec.nodeName")


def _container_requests(
    fields: Fields, container: Mapping[str, Any], field: str
) -> dict[str, Fraction]:
    resources = fields.mapping(container, "resources", f"{field}.resources")
    out: dict[str, Fraction] = {}
    # Limits first, so that a request given beside its limit wins (the API server's default).
    for section in ("limits", "requests"):
        for name, value in fields.mapping(
            resources, section, f"{field}.resources.{section}"
        ).items():
            where = f"{field}.resources.{section}[{name}]"
            if _NATIVE_RESOURCES.fullmatch(str(name)):
                out[str(name)] = fields.quantity(value, where)
            else:
                # Kubernetes accepts only whole numbers of an extended resource.
                out[str(name)] = Fraction(fields.whole(value, where, "a whole number"))
    return out


def _add(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        # A first value is taken as it is: Fraction(0) + value is the same, at a Fraction
        # construction and an addition more (most pods have one container).
        total[name] = total[name] + value if name in total else value


def _at_least(total: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, Fraction(0)), value)


def _pod_requests(fields: Fields, spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """What the pod needs of each resource while it runs, as kube-scheduler counts it."""
    total: dict[str, Fraction] = {}
    for i, container in enumerate(fields.items(spec, "containers", "spec.containers")):
        _add(total, _container_requests(fields, container, f"spec.containers[{i}]"))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for i, container in enumerate(fields.items(spec, "initContainers", "spec.initContainers")):
        own = _container_requests(fields, container, f"spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _at_least(init_peak, sidecars)
        else:
            _add(own, sidecars)
            _at_least(init_peak, own)
    _at_least(total, init_peak)
    overhead = fields.mapping(spec, "overhead", "spec.overhead")
    _add(total, {str(k): fields.quantity(v, f"spec.overhead[{k}]") for k, v in overhead.items()})
    return total


def _toleration(fields: Fields, item: Mapping[str, Any], i: int) -> Toleration:
    field = f"spec.tolerations[{i}]"
    key = fields.string(item, "key", f"{field}.key")
    operator = fields.string(item, "operator", f"{field}.operator", "Equal")
    value = fields.string(item, "value", f"{field}.value")
    effect = fields.string(item, "effect", f"{field}.effect")
    if operator not in ("Equal", "Exists"):
        raise fields.fail(f"{field}.operator", operator, "Equal or Exists")
    if operator == "Exists" and value:
        raise fields.fail(f"{field}.value", value, "no value with operator Exists")
    if operator == "Equal" and not key:
        raise fields.fail(f"{field}.operator", operator, "Exists when the key is empty")
    if effect and effect not in _EFFECTS:
        raise fields.fail(f"{field}.effect", effect, "empty or one of " + ", ".join(Effect))
    return Toleration(key=key, operator=operator, value=value, effect=effect)
