"""A placed Workspace as Kubernetes objects, and its status conditions: pure functions.

The workload follows from the placement alone (:class:`WorkspacePlacement`):

- one node holds a replica: a ``Deployment`` of ``replicas`` pods;
- a replica spans ``k`` nodes: a ``StatefulSet`` per replica of ``k`` pods, pod 0 the
  leader (it serves) and the others workers, under one headless ``Service`` so each finds
  its leader by name; or, when asked (the LeaderWorkerSet CRD is installed), one
  ``LeaderWorkerSet`` of ``replicas`` groups of size ``k``;
- a ``Service`` named after the workspace in front of the serving pods.

Every pod selects the workspace's nodes (its ``matchLabels`` as ``nodeSelector``, its
``matchExpressions`` as required node affinity) plus ``nvidia.com/gpu.product=<product>``
(``node.kubernetes.io/instance-type`` under NAP), and requests ``nvidia.com/gpu: <count>``,
every GPU of its node: that is what keeps two replicas off one node without affinity rules.
The group is written on each object (annotation ``kgpu.io/node-group``), so the controller
can scale later without choosing again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from kgpu.actions.workspace_placement import WorkspacePlacement
from kgpu.model.workspace import WorkspaceSpec

Obj = dict[str, Any]

WORKSPACE_LABEL: Final = "kgpu.io/workspace"
REPLICA_LABEL: Final = "kgpu.io/replica"
NODE_GROUP_ANNOTATION: Final = "kgpu.io/node-group"
POD_INDEX_LABEL: Final = "apps.kubernetes.io/pod-index"  # set by the StatefulSet controller
LWS_WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
GPU_RESOURCE: Final = "nvidia.com/gpu"
# vLLM's OpenAI-compatible server, pinned: an inference image that moves under a running
# workspace would change its behaviour on the next pod restart.
DEFAULT_IMAGE: Final = "vllm/vllm-openai:v0.10.1"
RAY_PORT: Final = 6379


class MultiNode(StrEnum):
    STATEFUL_SET = "StatefulSet"
    LEADER_WORKER_SET = "LeaderWorkerSet"


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    image: str = DEFAULT_IMAGE
    port: int = 8000
    multi_node: MultiNode = MultiNode.STATEFUL_SET
    scheduler_name: str = ""  # "": the cluster's default scheduler


def owner_reference(workspace: Mapping[str, Any]) -> Obj:
    """The Workspace as owner, so that deleting it deletes its workload."""
    meta = workspace.get("metadata", {})
    return {
        "apiVersion": workspace.get("apiVersion", "kgpu.io/v1alpha1"),
        "kind": "Workspace",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_workload(
    placement: WorkspacePlacement,
    owner: Obj | None = None,
    options: WorkloadOptions | None = None,
) -> list[Obj]:
    """The objects that run the workspace on its placement, Services first."""
    options = options or WorkloadOptions()
    ws = placement.workspace
    objects = [_service(ws, placement, options, owner)]
    if placement.nodes_per_replica == 1:
        objects.append(_deployment(placement, options, owner))
    elif options.multi_node is MultiNode.LEADER_WORKER_SET:
        objects.append(_leader_worker_set(placement, options, owner))
    else:
        objects.append(_headless_service(ws, owner))
        objects.extend(_stateful_set(placement, options, owner, i) for i in range(ws.replicas))
    return objects


def _meta(
    ws: WorkspaceSpec, name: str, owner: Obj | None, placement: WorkspacePlacement | None
) -> Obj:
    meta: Obj = {"name": name, "namespace": ws.namespace, "labels": {WORKSPACE_LABEL: ws.name}}
    if placement is not None:
        meta["annotations"] = {NODE_GROUP_ANNOTATION: placement.key.encode()}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def _service(
    ws: WorkspaceSpec, placement: WorkspacePlacement, options: WorkloadOptions, owner: Obj | None
) -> Obj:
    selector = {WORKSPACE_LABEL: ws.name}
    if placement.nodes_per_replica > 1:
        # Only leaders serve; workers hold the rest of the model.
        if options.multi_node is MultiNode.LEADER_WORKER_SET:
            selector[LWS_WORKER_INDEX_LABEL] = "0"
        else:
            selector[POD_INDEX_LABEL] = "0"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ws, ws.name, owner, None),
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": 80, "targetPort": options.port}],
        },
    }


def _headless_service(ws: WorkspaceSpec, owner: Obj | None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ws, f"{ws.name}-headless", owner, None),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # workers must reach a leader not yet ready
            "selector": {WORKSPACE_LABEL: ws.name},
            "ports": [{"name": "ray", "port": RAY_PORT}],
        },
    }


def node_selection(placement: WorkspacePlacement) -> Obj:
    """``nodeSelector`` and, for ``matchExpressions``, required node affinity."""
    selector = placement.workspace.selector
    out: Obj = {"nodeSelector": dict(selector.match_labels) | dict(placement.node_selector)}
    if selector.match_expressions:
        expressions = [
            {
                "key": r.key,
                "operator": r.operator.value,
                **({"values": list(r.values)} if r.values else {}),
            }
            for r in selector.match_expressions
        ]
        out["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": expressions}]
                }
            }
        }
    return out


def _serve_args(placement: WorkspacePlacement, options: WorkloadOptions) -> list[str]:
    ws = placement.workspace
    args = ["--model", ws.model_id] if ws.model_id else []
    args += ["--port", str(options.port), "--tensor-parallel-size", str(placement.key.gpu_count)]
    if placement.nodes_per_replica > 1:
        args += ["--pipeline-parallel-size", str(placement.nodes_per_replica)]
    return args


def _container(placement: WorkspacePlacement, options: WorkloadOptions, role: str) -> Obj:
    gpus = {GPU_RESOURCE: str(placement.key.gpu_count)}
    container: Obj = {
        "name": "inference",
        "image": options.image,
        "resources": {"requests": dict(gpus), "limits": dict(gpus)},
    }
    serve = " ".join(["vllm", "serve", *_serve_args(placement, options)])
    # Kubernetes expands $(VAR) from the container's env before the shell runs.
    leader_var = (
        "LWS_LEADER_ADDRESS"
        if options.multi_node is MultiNode.LEADER_WORKER_SET
        else "LEADER_ADDRESS"
    )
    worker = f"ray start --block --address=$({leader_var}):{RAY_PORT}"
    leader = f"ray start --head --port={RAY_PORT} && exec {serve}"
    if role == "single":
        container["args"] = _serve_args(placement, options)
    elif role == "leader":
        container["command"] = ["sh", "-c", leader]
    elif role == "worker":
        container["command"] = ["sh", "-c", worker]
    else:  # a StatefulSet's pods share one template: the ordinal decides the role
        script = f'if [ "$POD_INDEX" = 0 ]; then {leader}; else {worker}; fi'
        container["command"] = ["sh", "-c", script]
    if role in ("single", "leader", "either"):
        container["ports"] = [{"name": "http", "containerPort": options.port}]
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": options.port}}
    return container


def _pod_template(
    placement: WorkspacePlacement, options: WorkloadOptions, role: str, labels: Obj, env: list[Obj]
) -> Obj:
    container = _container(placement, options, role)
    if env:
        container["env"] = env
    spec: Obj = {
        **node_selection(placement),
        # GPU nodes are often tainted so that only GPU pods land there.
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
    }
    if options.scheduler_name:
        spec["schedulerName"] = options.scheduler_name
    annotations = {NODE_GROUP_ANNOTATION: placement.key.encode()}
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def _deployment(placement: WorkspacePlacement, options: WorkloadOptions, owner: Obj | None) -> Obj:
    ws = placement.workspace
    labels = {WORKSPACE_LABEL: ws.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ws, ws.name, owner, placement),
        "spec": {
            "replicas": ws.replicas,
            "selector": {"matchLabels": labels},
            # Each pod takes a whole node: a surge pod would find no node to go to.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": _pod_template(placement, options, "single", labels, []),
        },
    }


def stateful_set_name(ws: WorkspaceSpec, replica: int) -> str:
    return f"{ws.name}-{replica}"


def _stateful_set(
    placement: WorkspacePlacement, options: WorkloadOptions, owner: Obj | None, replica: int
) -> Obj:
    ws = placement.workspace
    name = stateful_set_name(ws, replica)
    labels = {WORKSPACE_LABEL: ws.name, REPLICA_LABEL: str(replica)}
    leader = f"{name}-0.{ws.name}-headless.{ws.namespace}.svc.cluster.local"
    env: list[Obj] = [
        {"name": "LEADER_ADDRESS", "value": leader},
        {
            "name": "POD_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{POD_INDEX_LABEL}']"}},
        },
    ]
    meta = _meta(ws, name, owner, placement)
    meta["labels"][REPLICA_LABEL] = str(replica)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "replicas": placement.nodes_per_replica,
            "serviceName": f"{ws.name}-headless",
            "podManagementPolicy": "Parallel",  # workers need not wait for the leader
            "selector": {"matchLabels": labels},
            "template": _pod_template(placement, options, "either", labels, env),
        },
    }


def _leader_worker_set(
    placement: WorkspacePlacement, options: WorkloadOptions, owner: Obj | None
) -> Obj:
    ws = placement.workspace
    labels = {WORKSPACE_LABEL: ws.name}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(ws, ws.name, owner, placement),
        "spec": {
            "replicas": ws.replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": placement.nodes_per_replica,
                # The LeaderWorkerSet controller gives each pod LWS_LEADER_ADDRESS.
                "leaderTemplate": _pod_template(placement, options, "leader", labels, []),
                "workerTemplate": _pod_template(placement, options, "worker", labels, []),
            },
        },
    }


# ---------------------------------------------------------------------------- status


def ready_replicas(objects: Sequence[Mapping[str, Any]], nodes_per_replica: int) -> int:
    """Replicas that serve, from the workload's status as the API server reports it."""
    ready = 0
    for obj in objects:
        status = obj.get("status") or {}
        kind = obj.get("kind")
        if kind in ("Deployment", "LeaderWorkerSet"):
            ready += int(status.get("readyReplicas") or 0)
        elif kind == "StatefulSet":
            # A spanning replica serves only when all its pods are ready.
            ready += int(int(status.get("readyReplicas") or 0) >= nodes_per_replica)
    return ready
