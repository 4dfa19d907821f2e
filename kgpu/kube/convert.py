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

import json
import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from kgpu.model.gpu import NO_GPU, GpuRequest, gpu_share, whole_gpus
from kgpu.model.node import DEFAULT_MAX_PODS, NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.quantity import EXPECTED, QuantityError, non_negative
from kgpu.model.taints import Effect, Taint, Toleration
from kgpu.model.units import MIB, MILLI_PER_CPU, MILLI_PER_GPU

GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
GPU_REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
GPU_FRACTION_ANNOTATION: Final = "gpu-fraction"
CARD_NAME_ANNOTATION: Final = "volcano.sh/card.name"
QUEUE_LABELS: Final = ("kgpu.io/queue", "kai.scheduler/queue")  # the first one set wins

# GPU dialects that a later issue parses. Until then a pod using one is refused with a clear
# message rather than placed as if it asked for no GPU at all.
_UNSUPPORTED_GPU_RESOURCES: Final = re.compile(
    r"(kubernetes\.io|koordinator\.sh)/gpu(-core|-memory|-memory-ratio)?|nvidia\.com/(gpu\.shared|mig-.+)"
)
_UNSUPPORTED_GPU_ANNOTATION: Final = "gpu-memory"
_NATIVE_RESOURCES: Final = re.compile(
    r"cpu|memory|ephemeral-storage|hugepages-.+|.*kubernetes\.io/.+"
)
_DECIMAL: Final = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_DIGITS: Final = re.compile(r"[0-9]+")
_MISSING: Final = object()
_EFFECTS: Final = tuple(e.value for e in Effect)


def show(value: object) -> str:
    """A value as the message shows it: JSON-like, so strings are quoted and numbers not."""
    if value is _MISSING:
        return "missing"
    return json.dumps(value, ensure_ascii=False, default=str)


class ConversionError(ValueError):
    """A Kubernetes object that cannot be turned into a model object.

    ``obj`` is the object as "Kind namespace/name", ``field`` the offending field, ``value``
    what it held and ``expected`` what would have been accepted.
    """

    def __init__(self, obj: str, field: str, value: object, expected: str) -> None:
        self.obj = obj
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"{obj}: {field} is {show(value)}, expected {expected}")


class _Fields:
    """Typed reads from one object's dicts, failing with the object's name in the message."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def fail(self, field: str, value: object, expected: str) -> ConversionError:
        return ConversionError(self.ref, field, value, expected)

    def mapping(self, parent: Mapping[str, Any], key: str, field: str) -> Mapping[str, Any]:
        value = parent.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(field, value, "a mapping")
        return value

    def items(self, parent: Mapping[str, Any], key: str, field: str) -> list[Mapping[str, Any]]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(field, value, "a list")
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise self.fail(f"{field}[{i}]", item, "a mapping")
        return value

    def string(self, parent: Mapping[str, Any], key: str, field: str, default: str = "") -> str:
        value = parent.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.fail(field, value, "a string")
        return value

    def strings(self, parent: Mapping[str, Any], key: str, what: str) -> dict[str, str]:
        """Labels, annotations or a node selector: string keys to string values."""
        out = {}
        for k, v in self.mapping(parent, key, what).items():
            if not isinstance(v, str):
                raise self.fail(f"{what} {k}", v, "a string (quote it in YAML)")
            out[str(k)] = v
        return out

    def quantity(self, value: object, field: str) -> Fraction:
        if not isinstance(value, str | int | float):
            raise self.fail(field, value, EXPECTED)
        try:
            return non_negative(value)
        except QuantityError as exc:
            raise self.fail(field, value, exc.expected) from None

    def whole(self, value: object, field: str, expected: str) -> int:
        amount = self.quantity(value, field)
        if amount.denominator != 1:
            raise self.fail(field, value, expected)
        return int(amount)


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


def _identify(kind: str, obj: Mapping[str, Any]) -> tuple[_Fields, Mapping[str, Any]]:
    fields = _Fields(object_ref(kind, obj))
    meta = fields.mapping(obj, "metadata", "metadata")
    name = meta.get("name", _MISSING)
    if not isinstance(name, str) or not name:
        raise fields.fail("metadata.name", name, "a non-empty string")
    fields.string(meta, "namespace", "metadata.namespace")
    return fields, meta


# ---------------------------------------------------------------------------- nodes


def node_from_k8s(obj: Mapping[str, Any]) -> NodeInfo:
    """A Node: allocatable resources, GFD labels, taints and cordon."""
    fields, meta = _identify("Node", obj)
    labels = fields.strings(meta, "labels", "label")
    status = fields.mapping(obj, "status", "status")
    # The API server fills allocatable from capacity; a hand-written node may give either.
    has_capacity_only = status.get("allocatable") is None and status.get("capacity") is not None
    where = "capacity" if has_capacity_only else "allocatable"
    alloc = fields.mapping(status, where, f"status.{where}")

    def amount(resource: str) -> Fraction:
        field = f"status.{where}[{resource}]"
        return fields.quantity(alloc.get(resource, _MISSING), field)

    def label_number(label: str, unit: str = "") -> int | None:
        # GFD writes plain decimal integers; "80GB" or "8.0" means the label was hand-edited.
        if label not in labels:
            return None
        if not _DIGITS.fullmatch(labels[label]):
            raise fields.fail(f"label {label}", labels[label], f"a whole number{unit}")
        return int(labels[label])

    gpus = None
    if GPU_RESOURCE in alloc:
        gpus = fields.whole(
            alloc[GPU_RESOURCE], f"status.{where}[{GPU_RESOURCE}]", "a whole number of GPUs"
        )
    label_count = label_number(GPU_COUNT_LABEL)
    replicas = label_number(GPU_REPLICAS_LABEL) or 1
    if replicas > 1:
        # Time-slicing advertises each GPU ``replicas`` times; the node has the physical ones.
        gpus = label_count if label_count is not None else (gpus or 0) // replicas
    elif gpus is None:
        # Without the device plugin's figure, GFD's count of the hardware is what there is.
        gpus = label_count or 0
    pods = alloc.get("pods")
    spec = fields.mapping(obj, "spec", "spec")
    unschedulable = spec.get("unschedulable") or False
    if not isinstance(unschedulable, bool):
        raise fields.fail("spec.unschedulable", unschedulable, "true or false")
    return NodeInfo(
        name=NodeName(meta["name"]),
        cpu_milli=math.floor(amount("cpu") * MILLI_PER_CPU),
        memory_mib=math.floor(amount("memory") / MIB),
        gpu_count=gpus,
        gpu_model=labels.get(GPU_PRODUCT_LABEL, "") if gpus else "",
        gpu_memory_mib=(label_number(GPU_MEMORY_LABEL, " of MiB") or 0) if gpus else 0,
        max_pods=DEFAULT_MAX_PODS
        if pods is None
        else fields.whole(pods, f"status.{where}[pods]", "a whole number of pods"),
        labels=labels,
        taints=tuple(
            _taint(fields, t, i) for i, t in enumerate(fields.items(spec, "taints", "spec.taints"))
        ),
        unschedulable=unschedulable,
    )


def _taint(fields: _Fields, taint: Mapping[str, Any], i: int) -> Taint:
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
    fields = _Fields(object_ref("Pod", obj))
    return fields.string(fields.mapping(obj, "spec", "spec"), "nodeName", "spec.nodeName")


def _container_requests(
    fields: _Fields, container: Mapping[str, Any], field: str
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
        total[name] = total.get(name, Fraction(0)) + value


def _at_least(total: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        total[name] = max(total.get(name, Fraction(0)), value)


def _pod_requests(fields: _Fields, spec: Mapping[str, Any]) -> dict[str, Fraction]:
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


def _toleration(fields: _Fields, item: Mapping[str, Any], i: int) -> Toleration:
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


def gpu_request_from_pod(
    ref: str, requests: Mapping[str, Fraction], annotations: Mapping[str, str]
) -> GpuRequest:
    """The pod's GPU request, whichever way it was written.

    Read today: ``nvidia.com/gpu: N`` (N whole GPUs), the ``gpu-fraction`` annotation (a share
    of one GPU; 1 means one whole GPU) and the ``volcano.sh/card.name`` annotation ("A100" or
    "A100|H100", the allowed GPU models in order of preference). A ``nodeSelector`` on
    ``nvidia.com/gpu.product`` stays a selector and is not repeated here. ``ref`` names the
    pod in error messages; ``requests`` are the pod's requests, summed as kube-scheduler does.
    """
    fields = _Fields(ref)
    for name, value in requests.items():
        if value and _UNSUPPORTED_GPU_RESOURCES.fullmatch(name):
            raise fields.fail(
                f"resource {name}",
                _number(value),
                f"{GPU_RESOURCE} or the {GPU_FRACTION_ANNOTATION} annotation ({name} is not supported yet)",
            )
    name = _UNSUPPORTED_GPU_ANNOTATION
    if name in annotations:
        raise fields.fail(
            f"annotation {name}",
            annotations[name],
            f"the {GPU_FRACTION_ANNOTATION} annotation instead ({name} is not supported yet)",
        )
    count = int(requests.get(GPU_RESOURCE, 0))
    fraction = annotations.get(GPU_FRACTION_ANNOTATION)
    if fraction is not None and count:
        raise fields.fail(
            f"annotation {GPU_FRACTION_ANNOTATION}",
            fraction,
            f"no {GPU_FRACTION_ANNOTATION} on a pod that requests {GPU_RESOURCE}: {count}",
        )
    if fraction is None and not count:
        return NO_GPU
    models = _card_models(fields, annotations)
    if fraction is None:
        return whole_gpus(count, models)
    milli = _fraction_milli(fields, fraction)
    return whole_gpus(1, models) if milli == MILLI_PER_GPU else gpu_share(milli, models)


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _fraction_milli(fields: _Fields, text: str) -> int:
    field = f"annotation {GPU_FRACTION_ANNOTATION}"
    if not _DECIMAL.fullmatch(text.strip()):
        raise fields.fail(field, text, "a number with 0 < f <= 1")
    share = Fraction(text.strip())
    if not 0 < share <= 1:
        raise fields.fail(field, text, "a number with 0 < f <= 1")
    # Rounded down, so that three pods asking "0.333" (a third each) fit on one GPU.
    milli = math.floor(share * MILLI_PER_GPU)
    if milli == 0:
        raise fields.fail(field, text, "at least 0.001, the smallest share kgpu accounts")
    return milli


def _card_models(fields: _Fields, annotations: Mapping[str, str]) -> tuple[str, ...]:
    text = annotations.get(CARD_NAME_ANNOTATION)
    if text is None:
        return ()
    field = f"annotation {CARD_NAME_ANNOTATION}"
    models = tuple(m.strip() for m in text.split("|"))
    if not all(models):
        raise fields.fail(field, text, 'GPU product names separated by "|", such as "A100|H100"')
    if any("/" in m for m in models):
        raise fields.fail(
            field, text, "whole-GPU card names (MIG and MPS cards are not supported yet)"
        )
    return models
