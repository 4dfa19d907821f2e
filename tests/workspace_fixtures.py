"""Builders for node-group tests: GFD-labelled nodes (model and Kubernetes forms), the KAITO
design's example cluster, and workspaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgpu.framework.groups import GroupNode
from kgpu.model.node import NodeName
from kgpu.model.workspace import LabelSelector, WorkspaceKey, WorkspaceSpec

GIB = 1024  # MiB


def gfd_labels(product: str, count: int, memory: int) -> dict[str, str]:
    return {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(memory),
    }


def gfd_node(
    name: str,
    product: str,
    count: int,
    memory: int,
    *,
    allocatable: int | None = None,
    in_use: int = 0,
    cordoned: bool = False,
    labels: Mapping[str, str] | None = None,
) -> GroupNode:
    return GroupNode(
        NodeName(name),
        {**gfd_labels(product, count, memory), **(labels or {})},
        count if allocatable is None else allocatable,
        in_use,
        cordoned,
    )


def design_nodes(**labels: str) -> list[GroupNode]:
    """The KAITO design's example: {A100, 4, 40960}×2, {A100, 8, 81920}×1, {A10, 1, 24576}×1."""
    return [
        gfd_node("a100-4-a", "A100", 4, 40960, labels=labels),
        gfd_node("a100-4-b", "A100", 4, 40960, labels=labels),
        gfd_node("a100-8-a", "A100", 8, 81920, labels=labels),
        gfd_node("a10-a", "A10", 1, 24576, labels=labels),
    ]


def workspace(
    replicas: int = 2,
    gpu_memory_mib: int = 8 * GIB,
    selector: LabelSelector | None = None,
    instance_type: str = "",
) -> WorkspaceSpec:
    return WorkspaceSpec(
        WorkspaceKey("default/ws"),
        selector or LabelSelector(),
        replicas,
        gpu_memory_mib,
        preset="phi-4-mini-instruct",
        model_id="microsoft/Phi-4-mini-instruct",
        instance_type=instance_type,
    )


def k8s_gpu_node(name: str, product: str, count: int, memory: int, **labels: str) -> dict[str, Any]:
    """A Node as the API server returns it, with GFD labels and the device plugin's GPUs."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**gfd_labels(product, count, memory), **labels}},
        "spec": {},
        "status": {
            "allocatable": {
                "cpu": "64",
                "memory": "256Gi",
                "pods": "110",
                "nvidia.com/gpu": str(count),
            }
        },
    }


def k8s_workspace(
    name: str = "ws",
    *,
    replicas: int = 2,
    preset: str | None = "phi-4-mini-instruct",
    memory: str | None = None,
    match_labels: dict[str, str] | None = None,
    instance_type: str | None = None,
) -> dict[str, Any]:
    resource: dict[str, Any] = {"labelSelector": {"matchLabels": match_labels or {}}}
    if instance_type:
        resource["instanceType"] = instance_type
    inference: dict[str, Any] = {"replicas": replicas}
    if preset:
        inference["preset"] = {"name": preset}
    if memory:
        inference["gpuMemoryPerReplica"] = memory
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1},
        "resource": resource,
        "inference": inference,
    }
