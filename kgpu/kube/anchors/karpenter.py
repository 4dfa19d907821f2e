"""Karpenter's objects read into the autoscaler's model: NodePools, NodeClaims and Nodes.

``kgpu run --autoscale`` watches NodePools and NodeClaims (``karpenter.sh/v1``) live: a
NodePool created, edited or deleted changes what the next autoscale round plans with
(:func:`live_nodepools`), and one that cannot be read is refused alone, with why. The
NodePools of ``--nodepool`` files stay for offline use (``kgpu simulate autoscale``) and, live,
for pools the cluster does not define; a live NodePool of the same name wins.

A NodePool (``karpenter.sh/v1``) says which instance types its nodes may be, but not what
they hold: GPUs, CPU and memory come from the cloud provider. kgpu reads them from its
catalogue (:data:`kgpu.model.nodepool.CATALOGUE`) or from ``InstanceType`` documents
(``kgpu.io/v1alpha1``) given beside the NodePool::

    apiVersion: kgpu.io/v1alpha1
    kind: InstanceType
    metadata: {name: my-8x-h200}
    spec: {gpus: 8, gpuProduct: NVIDIA-H200, gpuMemoryMiB: 143771, cpu: "192", memory: 2048Gi}

``cpu`` and ``memory`` are the machine's capacity; kgpu subtracts the kubelet's reserve as
Karpenter does. A NodePool must therefore name its instance types with a
``node.kubernetes.io/instance-type In [...]`` requirement: a pool that lets Karpenter pick
any type gives kgpu nothing to size GPU demand against.

Errors are :class:`NodePoolError`, naming the object, the field and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from kgpu.autoscale.observed import ObservedNode, ObservedNodeClaim
from kgpu.kube.api.resource_types import Resource, parse_time
from kgpu.model.nodepool import (
    CATALOGUE,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    OPERATORS,
    InstanceType,
    NodePool,
    NodeRequirement,
    instance_type,
)
from kgpu.model.quantity import QuantityError, cpu_milli, memory_mib, whole_number
from kgpu.model.taints import Effect, Taint

NODECLAIMS: Final = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)
NODEPOOLS: Final = Resource("karpenter.sh", "v1", "nodepools", "NodePool", namespaced=False)
GPU_RESOURCE: Final = "nvidia.com/gpu"
# A NodeClaim that reports one of these False will not become a node: Karpenter deletes it.
FAILING_CONDITIONS: Final = ("Launched", "Registered")


class NodePoolError(ValueError):
    """A NodePool or InstanceType document kgpu cannot use."""


def _ref(kind: str, obj: Mapping[str, Any]) -> str:
    name = _map(obj, "metadata").get("name")
    return f"{kind} {name if isinstance(name, str) and name else '(no name)'}"


def _map(obj: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    """``obj[path[0]][path[1]]...`` when every step is a mapping, else an empty one."""
    for key in path:
        value = obj.get(key)
        obj = value if isinstance(value, Mapping) else {}
    return obj


def _list(obj: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = obj.get(key)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _whole(ref: str, value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise NodePoolError(f"{ref}: {field} is {value!r}, expected a whole number")
    try:
        return whole_number(value)
    except QuantityError as exc:
        raise NodePoolError(f"{ref}: {field} is {value!r}, expected {exc.expected}") from None


def instance_type_from_k8s(obj: Mapping[str, Any]) -> InstanceType:
    ref = _ref("InstanceType", obj)
    spec = _map(obj, "spec")
    name = _map(obj, "metadata").get("name")
    gpus = _whole(ref, spec.get("gpus", 0), "spec.gpus")
    product = spec.get("gpuProduct", "")
    try:
        cpu = cpu_milli(spec.get("cpu", 0))
        memory = memory_mib(spec.get("memory", 0), round_up=False)
    except QuantityError as exc:
        raise NodePoolError(f"{ref}: spec.cpu or spec.memory: {exc}") from None
    if not isinstance(name, str) or not name or not isinstance(product, str):
        raise NodePoolError(f"{ref}: expected metadata.name and a string spec.gpuProduct")
    if (gpus and not product) or cpu < 1000 or memory < 1024:
        raise NodePoolError(
            f"{ref}: expected spec.gpuProduct when spec.gpus > 0, spec.cpu of at least 1 "
            "and spec.memory of at least 1Gi"
        )
    return instance_type(
        name,
        cpu // 1000,
        memory // 1024,
        gpus,
        product,
        _whole(ref, spec.get("gpuMemoryMiB", 0), "spec.gpuMemoryMiB"),
        _whole(ref, spec.get("maxPods", 110), "spec.maxPods"),
    )


def nodepool_from_k8s(
    obj: Mapping[str, Any], known: Mapping[str, InstanceType] | None = None
) -> NodePool:
    """A NodePool object; ``known`` instance types add to (and override) the catalogue."""
    types = {**CATALOGUE, **(known or {})}
    ref = _ref("NodePool", obj)
    if not isinstance(obj.get("metadata"), Mapping) or ref == "NodePool (no name)":
        raise NodePoolError(f"{ref}: metadata.name is missing, expected a non-empty string")
    for path in (("spec",), ("spec", "template"), ("spec", "template", "spec"), ("spec", "limits")):
        value = _map(obj, *path[:-1]).get(path[-1])
        if value is not None and not isinstance(value, Mapping):
            raise NodePoolError(f"{ref}: {'.'.join(path)} is {value!r}, expected a mapping")
    spec = _map(obj, "spec")
    tspec = _map(spec, "template", "spec")
    labels = {str(k): str(v) for k, v in _map(spec, "template", "metadata", "labels").items()}
    requirements = [_requirement(ref, r, i) for i, r in enumerate(_list(tspec, "requirements"))]
    taints = [_taint(ref, t, i) for i, t in enumerate(_list(tspec, "taints"))]
    weight = spec.get("weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise NodePoolError(f"{ref}: spec.weight is {weight!r}, expected an integer")
    limits = _map(spec, "limits")
    limit = None
    if GPU_RESOURCE in limits:
        limit = _whole(ref, limits[GPU_RESOURCE], f"spec.limits[{GPU_RESOURCE}]")
    named = [r for r in requirements if r.key == INSTANCE_TYPE_LABEL and r.operator == "In"]
    if not named:
        raise NodePoolError(
            f"{ref}: spec.template.spec.requirements has no {INSTANCE_TYPE_LABEL} In [...]: "
            "kgpu needs the instance types to know the nodes' GPUs"
        )
    chosen = []
    for name in dict.fromkeys(v for r in named for v in r.values):
        if name not in types:
            raise NodePoolError(
                f"{ref}: instance type {name!r} is unknown: expected one of "
                f"{', '.join(sorted(types))}, or an InstanceType document for it"
            )
        if all(r.allows(name) for r in requirements if r.key == INSTANCE_TYPE_LABEL):
            chosen.append(types[name])
    return NodePool(
        name=ref.removeprefix("NodePool "),
        instance_types=tuple(chosen),
        labels=tuple(sorted(labels.items())),
        requirements=tuple(r for r in requirements if r.key != INSTANCE_TYPE_LABEL),
        taints=tuple(taints),
        weight=weight,
        gpu_limit=limit,
    )


def nodepools_from_documents(documents: Sequence[Mapping[str, Any]]) -> tuple[NodePool, ...]:
    """The NodePools of a file's documents, with its InstanceType documents applied."""
    known = {
        t.name: t
        for t in (instance_type_from_k8s(d) for d in documents if d.get("kind") == "InstanceType")
    }
    pools = tuple(nodepool_from_k8s(d, known) for d in documents if d.get("kind") == "NodePool")
    if not pools:
        raise NodePoolError("no NodePool (karpenter.sh/v1) among the documents")
    return pools


def live_nodepools(
    objs: Sequence[Mapping[str, Any]], known: Mapping[str, InstanceType] | None = None
) -> tuple[list[NodePool], list[tuple[Mapping[str, Any], str]]]:
    """The NodePools of the API server, each read alone: those that can be used, in name
    order, and each that cannot with why (the others are used all the same)."""
    pools: list[NodePool] = []
    refused: list[tuple[Mapping[str, Any], str]] = []
    for obj in sorted(objs, key=lambda o: str(_map(o, "metadata").get("name"))):
        try:
            pools.append(nodepool_from_k8s(obj, known))
        except NodePoolError as exc:
            refused.append((obj, f"{exc}; kgpu plans no node of this NodePool until it is fixed"))
    return pools, refused


def _requirement(ref: str, item: Mapping[str, Any], i: int) -> NodeRequirement:
    key, operator, values = item.get("key"), item.get("operator"), item.get("values") or []
    if (
        not isinstance(key, str)
        or not key
        or operator not in OPERATORS
        or not isinstance(values, list)
    ):
        raise NodePoolError(
            f"{ref}: spec.template.spec.requirements[{i}] is {dict(item)!r}, expected a key, "
            "an operator (In, NotIn, Exists, DoesNotExist, Gt, Lt) and a list of values"
        )
    return NodeRequirement(key, str(operator), tuple(str(v) for v in values))


def _taint(ref: str, item: Mapping[str, Any], i: int) -> Taint:
    effect, key = item.get("effect"), item.get("key")
    if effect not in tuple(Effect) or not isinstance(key, str) or not key:
        raise NodePoolError(
            f"{ref}: spec.template.spec.taints[{i}] is {dict(item)!r}, expected a key and an "
            "effect (NoSchedule, PreferNoSchedule, NoExecute)"
        )
    return Taint(key, str(item.get("value") or ""), Effect(str(effect)))


# ---------------------------------------------------------------------------- observing


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return _list(_map(obj, "status"), "conditions")


def observed_nodeclaim(obj: Mapping[str, Any]) -> ObservedNodeClaim:
    meta = _map(obj, "metadata")
    conditions = {str(c.get("type")): str(c.get("status")) for c in _conditions(obj)}
    failure = ""
    for c in _conditions(obj):
        if c.get("type") in FAILING_CONDITIONS and c.get("status") == "False":
            why = ": ".join(str(c[k]) for k in ("reason", "message") if c.get(k))
            failure = f"{c['type']}=False" + (f": {why}" if why else "")
            break
    return ObservedNodeClaim(
        name=str(meta.get("name", "")),
        pool=str(_map(meta, "labels").get(NODEPOOL_LABEL, "")),
        created_at=parse_time(meta.get("creationTimestamp")),
        conditions=conditions,
        node=str(_map(obj, "status").get("nodeName") or ""),
        failure=failure,
        deleting=meta.get("deletionTimestamp") is not None,
    )


def observed_node(obj: Mapping[str, Any]) -> ObservedNode:
    meta = _map(obj, "metadata")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in _conditions(obj))
    return ObservedNode(
        str(meta.get("name", "")), ready, str(_map(meta, "labels").get(NODEPOOL_LABEL, ""))
    )
