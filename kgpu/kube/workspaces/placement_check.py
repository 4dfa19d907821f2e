"""Workspaces and Nodes (plain dicts) into the group scheduler's terms, and the admission
decision on a Workspace.

:func:`validate_workspace` is the fast-fail check of the KAITO design, as a pure function
for the admission webhook to call: a Workspace is allowed when some node group fits it (or,
under node auto-provisioning, when its instance type can be provisioned), and denied with
KAITO's message and every group's reason otherwise, so that nothing is created for a
workspace that could never run. A malformed Workspace is denied with the field, the value
and what is expected, as :class:`kgpu.kube.objects.node_pod.ConversionError` words it.

The Workspace's shape is the CRD's (:func:`kgpu.kube.install.crds.workspace_schema`): ``resource``
and ``inference`` at the top level. ``inference.gpuMemoryPerReplica`` given beside a preset
overrides the preset's figure (a longer context needs more memory than the preset's).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from kgpu.actions.workspace_placement import (
    Grouping,
    Placement,
    group_node,
    group_nodes,
    place_workspace,
)
from kgpu.framework.group_scheduler import GroupScheduler, NoGroup
from kgpu.framework.groups import GroupNode, GroupProfile
from kgpu.kube.anchors.kaito import is_kaito, workspace_from_kaito
from kgpu.kube.objects.fields import Fields
from kgpu.kube.objects.label_selector import label_selector_from_k8s
from kgpu.kube.objects.node_pod import GPU_RESOURCE, ConversionError, node_from_k8s, object_ref
from kgpu.model.node import NodeName
from kgpu.model.presets import PRESETS, find_preset
from kgpu.model.quantity import EXPECTED, QuantityError, non_negative, whole_number
from kgpu.model.units import MIB
from kgpu.model.workspace import WorkspaceKey, WorkspaceSpec
from kgpu.plugins.registry import build_group_scheduler

DEFAULT_GROUP_PROFILE: Final = "byo"

Obj = Mapping[str, Any]


class GroupProfileError(ValueError):
    """A node-group profile name or file that cannot be used."""


def load_group_profile(name_or_path: str = DEFAULT_GROUP_PROFILE) -> GroupProfile:
    """A built-in node-group profile (``kgpu/profiles/workspaces.yaml``) or a YAML file's one."""
    text = resources.files("kgpu.profiles").joinpath("workspaces.yaml").read_text()
    builtin = yaml.safe_load(text)
    if name_or_path in builtin:
        source, data = "built-in workspaces.yaml", {name_or_path: builtin[name_or_path]}
    elif Path(name_or_path).is_file():
        source, data = name_or_path, yaml.safe_load(Path(name_or_path).read_text())
    else:
        raise GroupProfileError(
            f"unknown node-group profile {name_or_path!r}: expected one of "
            f"{', '.join(builtin)} or the path of a YAML file"
        )
    if not isinstance(data, dict) or len(data) != 1:
        raise GroupProfileError(f"{source}: expected exactly one profile")
    name, body = next(iter(data.items()))
    try:
        return GroupProfile.model_validate({"name": name, **body})
    except (TypeError, ValidationError) as exc:
        raise GroupProfileError(f"{source}: profile {name!r}: {exc}") from exc


def group_scheduler(profile: str = DEFAULT_GROUP_PROFILE) -> GroupScheduler:
    return build_group_scheduler(load_group_profile(profile))


# ---------------------------------------------------------------------------- workspaces


def workspace_from_k8s(obj: Obj) -> WorkspaceSpec:
    """A Workspace: its selector, instance type, replicas and per-replica GPU memory."""
    ref = object_ref("Workspace", obj)
    fields = Fields(ref)
    name, namespace = fields.named(obj)
    resource = fields.mapping(obj, "resource", "resource")
    inference = fields.mapping(obj, "inference", "inference")
    replicas = inference.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ConversionError(ref, "inference.replicas", replicas, "a whole number of at least 1")
    preset_name = fields.string(
        fields.mapping(inference, "preset", "inference.preset"), "name", "inference.preset.name"
    )
    preset = find_preset(preset_name) if preset_name else None
    memory = _memory(ref, inference.get("gpuMemoryPerReplica"))
    if memory is None:
        known = ", ".join(sorted(PRESETS))
        if preset_name and preset is None:
            raise ConversionError(
                ref,
                "inference.preset.name",
                preset_name,
                f"a known preset ({known}) or inference.gpuMemoryPerReplica such as 16Gi",
            )
        if preset is None:
            raise ConversionError(
                ref,
                "inference",
                dict(inference),
                f"preset.name (one of {known}) or gpuMemoryPerReplica such as 16Gi",
            )
        memory = preset.gpu_memory_mib
    return WorkspaceSpec(
        key=WorkspaceKey(f"{namespace}/{name}"),
        selector=label_selector_from_k8s(ref, resource, "labelSelector", "resource.labelSelector"),
        replicas=replicas,
        gpu_memory_mib=memory,
        preset=preset.name if preset else preset_name,
        # KAITO also takes a Hugging Face id ("Qwen/Qwen3-0.6B") as the preset name.
        model_id=preset.model_id if preset else (preset_name if "/" in preset_name else ""),
        instance_type=fields.string(resource, "instanceType", "resource.instanceType"),
    )


def read_workspace(obj: Obj) -> WorkspaceSpec:
    """kgpu's Workspace or KAITO's (``kaito.sh``, :mod:`kgpu.kube.anchors.kaito`), by its
    ``apiVersion``: the webhook, the controller and the simulator read both alike."""
    return workspace_from_kaito(obj) if is_kaito(obj) else workspace_from_k8s(obj)


def _memory(ref: str, value: object) -> int | None:
    """``gpuMemoryPerReplica`` in MiB, rounded up (a requirement is never undercut)."""
    if value is None:
        return None
    field = "inference.gpuMemoryPerReplica"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConversionError(ref, field, value, EXPECTED)
    try:
        mib = math.ceil(non_negative(value) / MIB)
    except QuantityError as exc:
        raise ConversionError(ref, field, value, exc.expected) from None
    if mib < 1:
        raise ConversionError(ref, field, value, "at least 1Mi, such as 16Gi")
    return mib


# ---------------------------------------------------------------------------- nodes


def group_node_from_k8s(obj: Obj, gpu_in_use: int = 0) -> GroupNode:
    """A Node with the ``nvidia.com/gpu`` its device plugin advertises (0 when none)."""
    info = node_from_k8s(obj)
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    where = "allocatable" if status.get("allocatable") is not None else "capacity"
    offered = status.get(where)
    value = offered.get(GPU_RESOURCE) if isinstance(offered, Mapping) else None
    allocatable = 0
    if value is not None:
        # node_from_k8s has already checked it is a whole number.
        allocatable = whole_number(value)
    return group_node(info, allocatable, gpu_in_use)


def grouping_from_k8s(nodes: Iterable[Obj]) -> Grouping:
    """Nodes into groups; a Node that cannot be read is in no group, with the reason."""
    readable: list[GroupNode] = []
    unreadable: list[tuple[NodeName, str]] = []
    for obj in nodes:
        try:
            readable.append(group_node_from_k8s(obj))
        except ConversionError as exc:
            unreadable.append((NodeName(exc.obj.removeprefix("Node ")), str(exc)))
    grouping = group_nodes(readable)
    return Grouping(grouping.groups, tuple(sorted((*grouping.ungrouped, *unreadable))))


def place(obj: Obj, nodes: Iterable[Obj], scheduler: GroupScheduler | None = None) -> Placement:
    """Where the Workspace ``obj`` goes on ``nodes``; ConversionError if it is malformed."""
    workspace = read_workspace(obj)
    return place_workspace(scheduler or group_scheduler(), workspace, grouping_from_k8s(nodes))


def validate_workspace(obj: Obj, nodes: list[dict[str, Any]]) -> tuple[bool, str]:
    """The webhook's answer on a Workspace: (allowed, message).

    Denied: a malformed Workspace (the field and what is expected), or no node group that
    fits (KAITO's denial and each group's reason). Allowed: the group it would get, or under
    node auto-provisioning how many nodes of its instance type it needs.
    """
    try:
        placement = place(obj, nodes)
    except ConversionError as exc:
        return False, str(exc)
    if isinstance(placement, NoGroup):
        return False, placement.message
    return True, placement.summary
