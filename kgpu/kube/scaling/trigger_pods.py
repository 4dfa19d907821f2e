"""Trigger pods as Kubernetes objects: rendered from the planner's specs, read back.

A trigger pod is a pending ``registry.k8s.io/pause`` pod that asks for exactly the GPUs,
CPU and memory a group of kgpu's pending pods is missing, with their node selector,
affinity and tolerations, so that Karpenter (or the cluster autoscaler) provisions the node
they need: those pods themselves show an autoscaler no GPU demand when they ask for a
share or for GPU memory in an annotation. kgpu never creates NodeClaims.

What makes a trigger safe to leave to the default scheduler:

- a PriorityClass below every real pod's, with ``preemptionPolicy: Never``: a trigger
  never preempts anything, and real pods preempt it. Its value (-5) stays above the
  cluster autoscaler's ``--expendable-pods-priority-cutoff`` (-10), under which the cluster
  autoscaler would ignore the trigger;
- ``activeDeadlineSeconds: 600``, which ends a trigger that reached a node and was left
  behind. It does not end one that stays pending (the deadline counts from the start on a
  node), which is why the controller times triggers out itself;
- ``cluster-autoscaler.kubernetes.io/safe-to-evict``, so a trigger never keeps a node up.

The original request travels in the ``kgpu.io/original-request`` annotation (JSON): the
pods a trigger stands for are read back from there, which is what keeps the controller
from making a second trigger for the same demand after a restart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kgpu.autoscale.demand import DemandGroup, TriggerSpec, UnplacedPod
from kgpu.autoscale.observed import ObservedTrigger
from kgpu.kube.api.resource_types import parse_time
from kgpu.kube.objects.node_pod import ConversionError, object_ref, pod_from_k8s
from kgpu.kube.objects.queue_podgroup import GANG_ANNOTATIONS
from kgpu.model.json_text import read_json
from kgpu.model.limits import MAX_CLUSTER_GPUS
from kgpu.model.nodepool import (
    GPU_PRODUCT_LABEL,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    NodeRequirement,
    NodeTerm,
)
from kgpu.model.pod import PodKey
from kgpu.model.quantity import cpu_milli, memory_mib
from kgpu.model.units import MILLI_PER_GPU

COMPONENT_LABEL: Final = "kgpu.io/component"
COMPONENT: Final = "autoscale-trigger"
GPU_MODEL_LABEL: Final = "kgpu.io/gpu-model"
POOL_LABEL: Final = "kgpu.io/nodepool"
GROUP_LABEL: Final = "kgpu.io/trigger-group"
TRIGGER_TYPE_LABEL: Final = "kgpu.io/trigger-type"
CREATED_BY: Final = "kgpu.io/created-by"
PURPOSE: Final = "kgpu.io/purpose"
ORIGINAL_REQUEST: Final = "kgpu.io/original-request"
CLEANUP_AFTER: Final = "kgpu.io/cleanup-after"
SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
GPU_RESOURCE: Final = "nvidia.com/gpu"
SELECTOR: Final = f"{COMPONENT_LABEL}={COMPONENT}"  # a label selector for every trigger
_TARGET_KEYS: Final = (GPU_PRODUCT_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL)
GPU_MEMORY_ANNOTATION: Final = "gpu-memory"  # MiB of one shared GPU (KAI's annotation)


@dataclass(frozen=True, slots=True)
class TriggerPodConfig:
    namespace: str = "kgpu-system"
    image: str = "registry.k8s.io/pause:3.9"
    priority_class: str = "kgpu-autoscale-trigger"
    priority: int = -5
    active_deadline_s: int = 600
    scheduler_name: str = "default-scheduler"


def render_trigger_pod(spec: TriggerSpec, config: TriggerPodConfig) -> dict[str, Any]:
    """The Pod object of one trigger, ready to POST."""
    target = spec.group.target
    labels = {
        COMPONENT_LABEL: COMPONENT,
        "app.kubernetes.io/managed-by": "kgpu",
        GROUP_LABEL: spec.group.id,
        TRIGGER_TYPE_LABEL: "gpu-scale-up",
        GPU_MODEL_LABEL: target.model or "any",
    }
    if target.pool:
        labels[POOL_LABEL] = target.pool
    annotations = {
        CREATED_BY: "kgpu-autoscaler",
        PURPOSE: "trigger-node-scale-up",
        CLEANUP_AFTER: "node-ready",
        ORIGINAL_REQUEST: original_request(spec),
        SAFE_TO_EVICT: "true",
    }
    requests: dict[str, str] = {GPU_RESOURCE: str(spec.gpus)}
    if spec.cpu_milli:
        requests["cpu"] = _cpu(spec.cpu_milli)
    if spec.memory_mib:
        requests["memory"] = f"{spec.memory_mib}Mi"
    pod_spec: dict[str, Any] = {
        "schedulerName": config.scheduler_name,
        "priorityClassName": config.priority_class,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": config.active_deadline_s,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "trigger",
                "image": config.image,
                # An extended resource must be given as a limit; requests equal it.
                "resources": {"requests": requests, "limits": {GPU_RESOURCE: str(spec.gpus)}},
            }
        ],
    }
    selector = _node_selector(spec.group)
    if selector:
        pod_spec["nodeSelector"] = selector
    terms = _affinity_terms(spec.group)
    if terms:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    if spec.group.tolerations:
        pod_spec["tolerations"] = [
            {
                k: v
                for k, v in (
                    ("key", t.key),
                    ("operator", t.operator),
                    ("value", t.value),
                    ("effect", t.effect),
                )
                if v
            }
            for t in spec.group.tolerations
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": spec.name,
            "namespace": config.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": pod_spec,
    }


def render_priority_class(config: TriggerPodConfig) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": config.priority_class},
        "value": config.priority,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "kgpu autoscale trigger pods: below all real work, never preempting",
    }


def original_request(spec: TriggerSpec) -> str:
    """What the trigger stands for, as compact JSON with sorted keys."""
    target = spec.group.target
    pods = []
    for d in spec.pods:
        item: dict[str, Any] = {"pod": d.pod, "gpus": d.gpus}
        if d.milli < MILLI_PER_GPU:
            item["gpuFraction"] = d.milli / MILLI_PER_GPU
        if d.gpu_memory_mib:
            item["gpuMemoryMiB"] = d.gpu_memory_mib
        if d.gang:
            item["gang"] = d.gang
        pods.append(item)
    body = {
        "gpus": spec.gpus,
        "cpu": _cpu(spec.cpu_milli),
        "memory": f"{spec.memory_mib}Mi",
        "models": list(target.models),
        "pool": target.pool,
        "instanceTypes": list(target.instance_types),
        "pods": pods,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _node_selector(group: DemandGroup) -> dict[str, str]:
    selector = dict(group.node_selector)
    target = group.target
    if target.pool:
        selector[NODEPOOL_LABEL] = target.pool
    elif len(target.models) == 1:
        selector.setdefault(GPU_PRODUCT_LABEL, target.models[0])
    return selector


def _affinity_terms(group: DemandGroup) -> list[dict[str, Any]]:
    """The pods' terms, each ANDed with what the target adds: (A or B) and X is
    (A and X) or (B and X). A pool target replaces the pods' own requirements on the GPU
    product, instance type and pool by the pool's instance types: a node that does not
    exist yet has no GFD label, and Karpenter does not launch for a label it cannot set."""
    target = group.target
    extra: NodeTerm = ()
    if target.pool:
        extra = (NodeRequirement(INSTANCE_TYPE_LABEL, "In", target.instance_types),)
    elif len(target.models) > 1 and GPU_PRODUCT_LABEL not in dict(group.node_selector):
        extra = (NodeRequirement(GPU_PRODUCT_LABEL, "In", target.models),)
    terms = group.affinity or ((),)
    out = []
    for term in terms:
        kept = tuple(r for r in term if not (target.pool and r.key in _TARGET_KEYS))
        reqs = kept + extra
        if reqs:
            out.append({"matchExpressions": [_requirement(r) for r in reqs]})
    return out


def _requirement(r: NodeRequirement) -> dict[str, Any]:
    out: dict[str, Any] = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = list(r.values)
    return out


# ---------------------------------------------------------------------------- reading


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def observed_trigger(obj: Mapping[str, Any]) -> ObservedTrigger | None:
    """A trigger pod read back; None for a pod that is not one of kgpu's triggers.

    A trigger whose annotation was edited into something unreadable stands for no pod:
    the controller then times it out rather than trusting it.
    """
    meta = _mapping(obj, "metadata")
    labels = _mapping(meta, "labels")
    if labels.get(COMPONENT_LABEL) != COMPONENT:
        return None
    pods, gpus, cpu, memory = _read_request(_mapping(meta, "annotations"))
    status = _mapping(obj, "status")
    failed = ""
    if status.get("phase") == "Failed":
        failed = f"trigger pod failed: {status.get('reason') or status.get('message') or 'Failed'}"
    return ObservedTrigger(
        name=str(meta.get("name", "")),
        group=str(labels.get(GROUP_LABEL, "")),
        pods=pods,
        gpus=gpus,
        created_at=parse_time(meta.get("creationTimestamp")),
        pool=str(labels.get(POOL_LABEL, "")),
        node=str(_mapping(obj, "spec").get("nodeName") or ""),
        failed=failed,
        deleting=meta.get("deletionTimestamp") is not None,
        cpu_milli=cpu,
        memory_mib=memory,
    )


def _read_request(
    annotations: Mapping[str, Any],
) -> tuple[tuple[PodKey, ...], int, int | None, int | None]:
    """Pods, GPUs, CPU and memory of the original-request annotation; what cannot be read
    is empty (no pods) or None (requests not known)."""
    try:
        body: Any = read_json(annotations.get(ORIGINAL_REQUEST, "{}"))
        pods = tuple(PodKey(str(p["pod"])) for p in body.get("pods", []))
        gpus = int(body.get("gpus", 0))
    except (ValueError, TypeError, KeyError, AttributeError):
        return (), 0, None, None
    if not 0 <= gpus <= MAX_CLUSTER_GPUS:
        return (), 0, None, None
    try:
        return pods, gpus, cpu_milli(body["cpu"]), memory_mib(body["memory"])
    except (ValueError, TypeError, KeyError):
        return pods, gpus, None, None


def pending_from_k8s(obj: Mapping[str, Any]) -> UnplacedPod:
    """A pod kgpu could not place, with what the planner reads beyond its PodSpec: its GPU
    memory request, its gang and its required node affinity.

    Raises :class:`ConversionError` as :func:`pod_from_k8s` does, naming the field.
    """
    meta = _mapping(obj, "metadata")
    annotations = dict(_mapping(meta, "annotations"))
    ref = object_ref("Pod", obj)
    memory = 0
    text = annotations.pop(GPU_MEMORY_ANNOTATION, None)
    if text is not None:
        # Read here, not by pod_from_k8s, which refuses the annotation until GPU memory is
        # scheduled; the planner only needs the figure to size the demand.
        if not isinstance(text, str) or not text.strip().isdigit() or int(text) <= 0:
            raise ConversionError(
                ref, f"annotation {GPU_MEMORY_ANNOTATION}", text, "a whole number of MiB above 0"
            )
        memory = int(text)
    pod = pod_from_k8s({**obj, "metadata": {**meta, "annotations": annotations}})
    namespace = pod.key.split("/", 1)[0]
    gang = next((annotations[k] for k in GANG_ANNOTATIONS if annotations.get(k)), "")
    return UnplacedPod(
        pod,
        gpu_memory_mib=memory if not pod.gpu.count else 0,
        gang=f"{namespace}/{gang}" if gang else "",
        affinity=_required_terms(ref, _mapping(obj, "spec")),
    )


def _required_terms(ref: str, spec: Mapping[str, Any]) -> tuple[NodeTerm, ...]:
    node_affinity = _mapping(_mapping(spec, "affinity"), "nodeAffinity")
    required = _mapping(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") or []
    field = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    out = []
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        reqs = []
        exprs = (term.get("matchExpressions") or []) if isinstance(term, Mapping) else []
        for j, expr in enumerate(exprs):
            where = f"{field}.nodeSelectorTerms[{i}].matchExpressions[{j}]"
            try:
                values = tuple(str(v) for v in expr.get("values") or ())
                reqs.append(NodeRequirement(str(expr["key"]), str(expr["operator"]), values))
            except (KeyError, ValueError, AttributeError, TypeError):
                raise ConversionError(
                    ref, where, expr, "a key, an operator (In, NotIn, Exists, ...) and values"
                ) from None
        out.append(tuple(reqs))
    return tuple(out)
