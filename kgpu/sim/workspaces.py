"""Replay inference Workspaces against a cluster snapshot (``kgpu simulate workspaces``).

Nodes come from Kubernetes Node manifests (a directory, as ``kubectl apply -f DIR`` reads
it, or one file), read through :func:`kgpu.sim.manifests.read_documents` and
:mod:`kgpu.kube.objects.node_pod`, the parsing the live scheduler uses. Pods in the same manifests
that are bound to a node (``spec.nodeName``) hold its GPUs, so a snapshot taken with
``kubectl get nodes,pods -A -o yaml`` replays as the cluster stands.

Workspaces are placed one after another, in file order, each through the decision the
admission webhook and the Workspace controller make (:func:`place`). A placed workspace
then holds every GPU of the nodes its replicas take (the first ones by name of its group),
so a later workspace sees them in use, as it would in the cluster. Under node
auto-provisioning the nodes still to be provisioned are reported, not invented.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from kgpu.actions.workspace_placement import WorkspacePlacement, group_nodes, place_workspace
from kgpu.framework.group_scheduler import NoGroup
from kgpu.framework.groups import GroupNode
from kgpu.kube.objects.node_pod import ConversionError, pod_from_k8s, pod_node_name
from kgpu.kube.workspaces.placement_check import (
    group_node_from_k8s,
    group_scheduler,
    read_workspace,
)
from kgpu.model.node import NodeName
from kgpu.sim.manifests import Document, ManifestError, read_documents
from kgpu.sim.yaml_documents import load_documents


class WorkspaceOutcome(StrEnum):
    PLACED = "Placed"  # on existing nodes of one group
    PROVISION = "Provision"  # NAP: nodes of the instance type still to be provisioned
    DENIED = "Denied"


@dataclass(frozen=True, slots=True)
class WorkspaceResult:
    workspace: str  # namespace/name
    source: str
    outcome: WorkspaceOutcome
    group: str = ""  # the node group, as {product, GPUs, MiB per GPU}
    nodes: tuple[str, ...] = ()  # existing nodes its replicas take
    nodes_per_replica: int = 0
    provision: int = 0
    message: str = ""
    reasons: tuple[str, ...] = ()  # a denial's reason per group, and its notes

    def to_json(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "source": self.source,
            "outcome": str(self.outcome),
            "group": self.group or None,
            "nodes": list(self.nodes),
            "nodes_per_replica": self.nodes_per_replica,
            "provision": self.provision,
            "message": self.message,
            "reasons": list(self.reasons),
        }


@dataclass(slots=True)
class WorkspaceRun:
    profile: str
    groups: list[tuple[str, int]]  # each group of the snapshot and its node count
    results: list[WorkspaceResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "groups": [{"group": g, "nodes": n} for g, n in self.groups],
            "workspaces": [r.to_json() for r in self.results],
            "notes": self.notes,
        }


def read_path(path: Path) -> list[Document]:
    """The documents of a directory's ``*.yaml``/``*.yml`` files, or of one file."""
    if path.is_dir():
        return read_documents(path)
    try:
        loaded = load_documents(path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ManifestError(f"{path}: {exc}") from exc
    out: list[Document] = []
    for i, obj in enumerate(loaded, start=1):
        if obj is not None:
            out.extend(_expand(f"{path.name}#{i}", obj))
    if not out:
        raise ManifestError(f"{path}: no manifests")
    return out


def _expand(source: str, obj: Any) -> Iterator[Document]:
    """A document, or each item of a ``List`` (``kubectl get -o yaml`` writes those)."""
    if not isinstance(obj, Mapping):
        yield Document(source, {"kind": None, "value": obj})
        return
    kind = obj.get("kind")
    items = obj.get("items")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
        for j, item in enumerate(items):
            if isinstance(item, Mapping) and item.get("kind") is None:
                item = {**item, "kind": kind.removesuffix("List")}
            yield from _expand(f"{source} items[{j}]", item)
        return
    yield Document(source, obj)


def _cluster(documents: list[Document], notes: list[str]) -> dict[NodeName, GroupNode]:
    nodes: dict[NodeName, GroupNode] = {}
    held: dict[str, int] = {}
    for doc in documents:
        try:
            if doc.kind == "Node":
                node = group_node_from_k8s(doc.obj)
                if node.name in nodes:
                    notes.append(f"{doc.source}: Node {node.name} skipped: defined twice")
                else:
                    nodes[node.name] = node
            elif doc.kind == "Pod" and pod_node_name(doc.obj):
                # A share of a GPU still keeps a workspace's whole-GPU pod off that GPU.
                held_here = pod_from_k8s(doc.obj).gpu.count
                name = pod_node_name(doc.obj)
                held[name] = held.get(name, 0) + held_here
        except ConversionError as exc:
            notes.append(f"{doc.source}: skipped: {exc}")
    for name, count in held.items():
        if NodeName(name) in nodes:
            node = nodes[NodeName(name)]
            nodes[node.name] = replace(node, gpu_in_use=node.gpu_in_use + count)
    return nodes


def simulate_workspaces(
    nodes_path: Path, workspaces_path: Path, profile: str = "byo"
) -> WorkspaceRun:
    notes: list[str] = []
    nodes = _cluster(read_path(nodes_path), notes)
    scheduler = group_scheduler(profile)
    grouping = group_nodes(nodes.values())
    run = WorkspaceRun(profile, [(str(g.key), len(g.nodes)) for g in grouping.groups], notes=notes)
    for doc in read_path(workspaces_path):
        if doc.kind != "Workspace":
            if doc.kind not in ("Node", "Pod"):
                notes.append(f"{doc.source}: {doc.kind or 'a document without kind'} skipped")
            continue
        ref = doc.obj.get("metadata", {}) if isinstance(doc.obj.get("metadata"), Mapping) else {}
        key = f"{ref.get('namespace') or 'default'}/{ref.get('name', '(no name)')}"
        try:
            workspace = read_workspace(doc.obj)
        except ConversionError as exc:
            run.results.append(
                WorkspaceResult(key, doc.source, WorkspaceOutcome.DENIED, message=str(exc))
            )
            continue
        placement = place_workspace(scheduler, workspace, group_nodes(nodes.values()))
        if isinstance(placement, NoGroup):
            lines = (*(str(r) for r in placement.reports), *placement.notes)
            denied = WorkspaceResult(
                key, doc.source, WorkspaceOutcome.DENIED, message=placement.message, reasons=lines
            )
            run.results.append(denied)
            continue
        run.results.append(_take(nodes, placement, key, doc.source))
    return run


def _take(
    nodes: dict[NodeName, GroupNode], placement: WorkspacePlacement, key: str, source: str
) -> WorkspaceResult:
    """Hold every GPU of the nodes the placement's replicas take."""
    taken = placement.nodes[: placement.nodes_needed]
    for name in taken:
        node = nodes[name]
        nodes[name] = replace(node, gpu_in_use=node.gpu_allocatable)
    return WorkspaceResult(
        key,
        source,
        WorkspaceOutcome.PROVISION if placement.provision else WorkspaceOutcome.PLACED,
        str(placement.key),
        tuple(taken),
        placement.nodes_per_replica,
        placement.provision,
        placement.summary,
    )
