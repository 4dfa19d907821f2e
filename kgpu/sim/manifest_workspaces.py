"""KAITO's Workspaces (``kaito.sh``, through :mod:`kgpu.kube.anchors.kaito`) among ``kgpu
simulate manifests``' documents, as the live controller treats them. (kgpu's own Workspaces
are still skipped there, as before, so that existing inputs decide the same; ``kgpu
simulate workspaces`` places them.)

Each is placed on the manifests' Nodes by the same check the webhook runs
(:func:`kgpu.kube.workspaces.placement_check.place`); a Workspace that no node group fits
is denied with the same message, word for word, as a note; one that fits becomes the pods
of the workload the controller would create (:func:`render_workload`: a Deployment's
``replicas`` pods, or a StatefulSet's per spanning replica), which are then scheduled like
every other pod of the manifests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kgpu.framework.group_scheduler import GroupScheduler, NoGroup
from kgpu.kube.objects.node_pod import ConversionError, object_ref
from kgpu.kube.workspaces.placement_check import group_scheduler, place
from kgpu.kube.workspaces.workload import render_workload

Obj = dict[str, Any]
WORKSPACE_GROUPS = ("kaito.sh/",)


def is_workspace(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Workspace" and str(obj.get("apiVersion", "")).startswith(
        WORKSPACE_GROUPS
    )


def workspace_pods(
    obj: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    notes: list[str],
    source: str,
    scheduler: GroupScheduler | None = None,
) -> list[Obj]:
    """The pods of the Workspace's workload, or none with a note saying why."""
    ref = object_ref("Workspace", obj)
    try:
        placement = place(obj, nodes, scheduler or group_scheduler())
    except ConversionError as exc:
        notes.append(f"{source}: {ref} denied: {exc}")
        return []
    if isinstance(placement, NoGroup):
        notes.append(f"{source}: {ref} denied: {placement.message}")
        return []
    notes.append(f"{source}: {ref}: {placement.summary}")
    return list(_pods(render_workload(placement)))


def _pods(workload: list[Obj]) -> Iterator[Obj]:
    for obj in workload:
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue  # Services: nothing to place
        meta, spec = obj["metadata"], obj["spec"]
        template = spec["template"]
        for i in range(int(spec["replicas"])):
            yield {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **template["metadata"],
                    "name": f"{meta['name']}-{i}",
                    "namespace": meta["namespace"],
                },
                "spec": template["spec"],
            }
