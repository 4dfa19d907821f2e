"""The Workspace controller: each Workspace into its inference workload and status.

:func:`reconcile` decides and :class:`WorkspaceController` carries the decision out, so
that the decision is data a test reads without a server. One pass:

1. Read the Workspace; a malformed one gets ``Failed`` with the field to fix, and waits for
   the object to change (no requeue: nothing else can fix it).
2. Find its node group: the one stored in its status (``status.nodeGroup``) or on its
   workload (annotation ``kgpu.io/node-group``) if it has one. The group is chosen once, at
   creation, as the KAITO design states: raising ``inference.replicas`` later only scales
   the workload on the same group, and pods that do not fit stay pending, visibly.
   Otherwise the group cycle chooses now; when no group fits, ``NodeGroupSelected`` is
   False with the denial and every group's reason, and the pass asks to be requeued (nodes
   may join or be relabelled).
3. Render the workload for the group and compare it with what exists (objects labelled
   ``kgpu.io/workspace=<name>``): create what is missing, scale what has another replica
   count, delete StatefulSets of replicas scaled away.
4. Conditions: ``NodeGroupSelected``, ``ResourcesReady``, ``InferenceReady`` (ready replicas
   out of desired) and ``Failed``; requeue until inference is ready.

Errors of the API server are left to the caller, who retries with back-off; an object
created by someone else in between (409 on create) is taken as created.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from kgpu.actions.workspace_placement import place_workspace, restore_placement
from kgpu.framework.group_scheduler import NO_SUITABLE_GROUP, GroupScheduler, NoGroup
from kgpu.framework.groups import NodeGroupKey
from kgpu.kube.anchors.kaito import KaitoOutcome, is_kaito, kaito_status, owned_by_kaito
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, NotFound
from kgpu.kube.api.resource_types import NODES, WORKSPACES, Resource
from kgpu.kube.objects.conditions import condition, merge_conditions
from kgpu.kube.objects.node_pod import ConversionError
from kgpu.kube.workspaces.placement_check import (
    group_scheduler,
    grouping_from_k8s,
    read_workspace,
)
from kgpu.kube.workspaces.workload import (
    NODE_GROUP_ANNOTATION,
    WORKSPACE_LABEL,
    MultiNode,
    WorkloadOptions,
    owner_reference,
    ready_replicas,
    render_workload,
)

Obj = dict[str, Any]

SERVICES: Final = Resource("", "v1", "services", "Service", namespaced=True)
DEPLOYMENTS: Final = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
STATEFULSETS: Final = Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True)
LEADERWORKERSETS: Final = Resource(
    "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", namespaced=True
)
WORKLOAD: Final = {r.kind: r for r in (SERVICES, DEPLOYMENTS, STATEFULSETS, LEADERWORKERSETS)}
SCALED: Final = ("Deployment", "LeaderWorkerSet", "StatefulSet")

NODE_GROUP_SELECTED: Final = "NodeGroupSelected"
RESOURCES_READY: Final = "ResourcesReady"
INFERENCE_READY: Final = "InferenceReady"
FAILED: Final = "Failed"
INVALID_WORKSPACE: Final = "InvalidWorkspace"

REQUEUE_NO_GROUP_S: Final = 30.0  # nodes join and change labels on this scale
REQUEUE_NOT_READY_S: Final = 10.0  # model servers take minutes; no need to poll faster


@dataclass(slots=True)
class Reconcile:
    """What one pass decided: objects to create, replica counts to set, objects to delete,
    the Workspace's new status, and when to look again (None: on the next change only)."""

    create: list[Obj] = field(default_factory=list)
    scale: list[tuple[str, str, int]] = field(default_factory=list)  # kind, name, replicas
    delete: list[tuple[str, str]] = field(default_factory=list)  # kind, name
    status: Obj = field(default_factory=dict)
    requeue_after: float | None = None


def _stored_group(
    workspace: Mapping[str, Any], existing: Sequence[Mapping[str, Any]]
) -> NodeGroupKey | None:
    """The group chosen at creation: in the status, else on the workload (status can be
    lost, for one when a Workspace is restored from a backup)."""
    status = workspace.get("status") or {}
    candidates = [status.get("nodeGroup")]
    candidates += [
        (o.get("metadata", {}).get("annotations") or {}).get(NODE_GROUP_ANNOTATION)
        for o in existing
    ]
    for text in candidates:
        if isinstance(text, str) and text:
            try:
                return NodeGroupKey.decode(text)
            except ValueError:
                continue  # hand-edited: choose again rather than fail
    return None


def reconcile(
    workspace: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    existing: Sequence[Mapping[str, Any]],
    now: str,
    scheduler: GroupScheduler,
    options: WorkloadOptions | None = None,
) -> Reconcile:
    """One pass over one Workspace; ``existing`` are its workload objects as they are now."""
    old = (workspace.get("status") or {}).get("conditions") or []
    generation = int((workspace.get("metadata") or {}).get("generation") or 0)

    def status(conditions: list[Obj], **extra: Any) -> Obj:
        return {**extra, "conditions": merge_conditions(old, conditions)}

    kaito = is_kaito(workspace)
    try:
        ws = read_workspace(workspace)
    except ConversionError as exc:
        if kaito:
            return Reconcile(status=kaito_status(old, KaitoOutcome(generation, now, str(exc))))
        failed = [
            condition(FAILED, True, INVALID_WORKSPACE, str(exc), generation, now),
            condition(NODE_GROUP_SELECTED, False, INVALID_WORKSPACE, str(exc), generation, now),
        ]
        return Reconcile(status=status(failed))
    key = _stored_group(workspace, existing)
    if key is not None:
        placement = restore_placement(ws, key)
        chosen = f"node group {key}, chosen at creation; {placement.nodes_needed} node(s) for {ws.replicas} replica(s)"
        workers = list((workspace.get("status") or {}).get("workerNodes") or [])
    else:
        decided = place_workspace(scheduler, ws, grouping_from_k8s(nodes))
        if isinstance(decided, NoGroup):
            denied = [
                condition(
                    NODE_GROUP_SELECTED, False, NO_SUITABLE_GROUP, decided.message, generation, now
                ),
                condition(FAILED, True, NO_SUITABLE_GROUP, decided.message, generation, now),
                condition(
                    RESOURCES_READY,
                    False,
                    NO_SUITABLE_GROUP,
                    "no workload without a node group",
                    generation,
                    now,
                ),
                condition(
                    INFERENCE_READY,
                    False,
                    NO_SUITABLE_GROUP,
                    "no workload without a node group",
                    generation,
                    now,
                ),
            ]
            if kaito:
                outcome = KaitoOutcome(generation, now, decided.message)
                denied_status = kaito_status(old, outcome)
            else:
                denied_status = status(denied)
            return Reconcile(status=denied_status, requeue_after=REQUEUE_NO_GROUP_S)
        placement = decided
        chosen = decided.summary
        workers = list(decided.nodes[: decided.nodes_needed])
    out = _diff(render_workload(placement, owner_reference(workspace), options), existing)
    ready = ready_replicas(
        [o for o in existing if o.get("kind") in SCALED], placement.nodes_per_replica
    )
    ready = min(ready, ws.replicas)
    serving = ready == ws.replicas
    applied = "created" if out.create else "up to date"
    if placement.provision:
        # NAP: the workload's pending pods are what a provisioner acts on.
        resources = condition(
            RESOURCES_READY,
            False,
            "NodesToProvision",
            f"inference workload {applied}; {placement.provision} node(s) of "
            f"{placement.instance_type} to be provisioned",
            generation,
            now,
        )
    else:
        resources = condition(
            RESOURCES_READY,
            True,
            "WorkloadApplied",
            f"inference workload {applied}",
            generation,
            now,
        )
    conditions = [
        condition(NODE_GROUP_SELECTED, True, NODE_GROUP_SELECTED, chosen, generation, now),
        resources,
        condition(
            INFERENCE_READY,
            serving,
            "InferenceReady" if serving else "ReplicasNotReady",
            f"{ready}/{ws.replicas} replica(s) ready",
            generation,
            now,
        ),
        condition(FAILED, False, "Running", "", generation, now),
    ]
    if kaito:
        # KAITO's status has no place for the group: it is kept on the workload alone.
        outcome = KaitoOutcome(
            generation,
            now,
            resources_ok=resources["status"] == "True",
            resources_reason=resources["reason"],
            resources_message=f"{chosen}; {resources['message']}",
            ready=ready,
            replicas=ws.replicas,
            nodes_per_replica=placement.nodes_per_replica,
            worker_nodes=tuple(workers),
            selector=f"{WORKSPACE_LABEL}={ws.name}",
        )
        out.status = kaito_status(old, outcome)
    else:
        out.status = status(conditions, nodeGroup=placement.key.encode(), workerNodes=workers)
    out.requeue_after = None if serving else REQUEUE_NOT_READY_S
    return out


def _diff(desired: list[Obj], existing: Sequence[Mapping[str, Any]]) -> Reconcile:
    have = {(o.get("kind"), o["metadata"]["name"]): o for o in existing}
    want = {(o["kind"], o["metadata"]["name"]): o for o in desired}
    out = Reconcile()
    for (kind, name), obj in want.items():
        current = have.get((kind, name))
        if current is None:
            out.create.append(obj)
        elif (
            kind in SCALED
            and (current.get("spec") or {}).get("replicas") != obj["spec"]["replicas"]
        ):
            out.scale.append((kind, name, obj["spec"]["replicas"]))
    # Replicas scaled away: their StatefulSets go; nothing else is ever deleted here.
    for kind, name in have:
        if kind == "StatefulSet" and (kind, name) not in want:
            out.delete.append((kind, name))
    return out


# ---------------------------------------------------------------------------- the shell


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WorkspaceController:
    """Carries out :func:`reconcile` against the API server, one Workspace at a time.

    ``multi_node`` None: a LeaderWorkerSet when its CRD is installed, else StatefulSets.
    ``nodes`` None: Nodes are listed from the API server when a Workspace is placed; ``kgpu
    run`` passes its Node cache instead. ``resource``: kgpu's Workspaces, or KAITO's
    (:data:`~kgpu.kube.api.resource_types.KAITO_WORKSPACES`), of which those KAITO's own
    controller has taken (its finalizer) are left to it.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        profile: str = "byo",
        options: WorkloadOptions | None = None,
        multi_node: MultiNode | None = None,
        clock: Callable[[], float] = time.time,
        nodes: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
        resource: Resource = WORKSPACES,
    ) -> None:
        self.client = client
        self.resource = resource
        self.nodes = nodes
        self.scheduler = group_scheduler(profile)
        self.options = options or WorkloadOptions()
        self.multi_node = multi_node
        self.clock = clock

    def _options(self) -> WorkloadOptions:
        if self.multi_node is None:
            try:
                self.client.list(LEADERWORKERSETS)
                self.multi_node = MultiNode.LEADER_WORKER_SET
            except NotFound:
                self.multi_node = MultiNode.STATEFUL_SET
        return WorkloadOptions(
            self.options.image, self.options.port, self.multi_node, self.options.scheduler_name
        )

    def _workload(self, namespace: str, name: str) -> list[Obj]:
        found: list[Obj] = []
        for resource in WORKLOAD.values():
            try:
                items = self.client.list(
                    resource, namespace=namespace, label_selector=f"{WORKSPACE_LABEL}={name}"
                ).items
            except NotFound:
                continue  # the LeaderWorkerSet CRD is not installed
            # Filtered here too: the selector is a request, not every server honours it.
            found.extend(
                i
                for i in items
                if (i.get("metadata", {}).get("labels") or {}).get(WORKSPACE_LABEL) == name
            )
        return found

    def reconcile(self, namespace: str, name: str) -> float | None:
        """One pass; the seconds after which to look again, or None."""
        try:
            workspace = self.client.get(self.resource, name, namespace)
        except NotFound:
            return None  # deleted: its workload goes with it (owner references)
        if owned_by_kaito(workspace):
            return None  # KAITO's controller acts on it; two would fight over the status
        existing = self._workload(namespace, name)
        nodes: Sequence[Mapping[str, Any]] = []
        if _stored_group(workspace, existing) is None:
            nodes = self.nodes() if self.nodes is not None else self.client.list(NODES).items
        out = reconcile(
            workspace, nodes, existing, _iso(self.clock()), self.scheduler, self._options()
        )
        for obj in out.create:
            # Created since we listed (409): the next pass compares it.
            with contextlib.suppress(Conflict):
                self.client.create(WORKLOAD[obj["kind"]], obj, namespace)
        for kind, obj_name, replicas in out.scale:
            self.client.patch(WORKLOAD[kind], obj_name, {"spec": {"replicas": replicas}}, namespace)
        for kind, obj_name in out.delete:
            with contextlib.suppress(NotFound):
                self.client.delete(WORKLOAD[kind], obj_name, namespace)
        self.client.patch(
            self.resource, name, {"status": out.status}, namespace, subresource="status"
        )
        return out.requeue_after

    def reconcile_all(self) -> dict[str, float | None]:
        """Every Workspace once; "namespace/name" to its requeue."""
        out = {}
        for item in self.client.list(self.resource).items:
            meta = item.get("metadata", {})
            ns, name = meta.get("namespace") or "default", meta["name"]
            out[f"{ns}/{name}"] = self.reconcile(ns, name)
        return out
