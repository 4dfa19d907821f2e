"""Workspace and Node objects into the group scheduler's terms, node-group profiles, and the
admission decision (``validate_workspace``) on good and malformed Workspaces."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kgpu.framework.group_scheduler import DENIAL
from kgpu.kube.objects.node_pod import ConversionError
from kgpu.kube.workspaces.placement_check import (
    GroupProfileError,
    group_node_from_k8s,
    grouping_from_k8s,
    load_group_profile,
    validate_workspace,
    workspace_from_k8s,
)
from kgpu.model.workspace import LabelSelector, Operator, Requirement
from kgpu.plugins import names
from tests.workspace_fixtures import k8s_gpu_node, k8s_workspace

Obj = dict[str, Any]


def test_a_preset_workspace() -> None:
    ws = workspace_from_k8s(k8s_workspace(match_labels={"apps": "llm"}))
    assert (ws.key, ws.replicas, ws.gpu_memory_mib) == ("default/ws", 2, 8192)
    assert (ws.preset, ws.model_id, ws.instance_type) == (
        "phi-4-mini-instruct",
        "microsoft/Phi-4-mini-instruct",
        "",
    )
    assert ws.selector == LabelSelector((("apps", "llm"),))


def test_direct_memory_overrides_the_preset_and_needs_none() -> None:
    ws = workspace_from_k8s(k8s_workspace(memory="100Gi"))
    assert (ws.gpu_memory_mib, ws.preset) == (102400, "phi-4-mini-instruct")
    ws = workspace_from_k8s(k8s_workspace(preset=None, memory="16G"))
    assert (ws.gpu_memory_mib, ws.preset, ws.model_id) == (15259, "", "")  # rounded up


def test_match_expressions_and_instance_type() -> None:
    obj = k8s_workspace(instance_type="Standard_NC24ads_A100_v4")
    obj["resource"]["labelSelector"]["matchExpressions"] = [
        {"key": "zone", "operator": "In", "values": ["a", "b"]},
        {"key": "spot", "operator": "DoesNotExist"},
    ]
    ws = workspace_from_k8s(obj)
    assert ws.selector.match_expressions == (
        Requirement("zone", Operator.IN, ("a", "b")),
        Requirement("spot", Operator.DOES_NOT_EXIST),
    )
    assert ws.instance_type == "Standard_NC24ads_A100_v4"


def _set(path: str, value: object) -> Callable[[Obj], None]:
    def edit(obj: Obj) -> None:
        *parents, last = path.split(".")
        for key in parents:
            obj = obj.setdefault(key, {})
        obj[last] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(
            _set("inference.replicas", 0),
            "Workspace default/ws: inference.replicas is 0, expected a whole number of at least 1",
            id="replicas",
        ),
        pytest.param(
            _set("inference.preset.name", "gpt-9"),
            'Workspace default/ws: inference.preset.name is "gpt-9", expected a known preset (',
            id="unknown-preset",
        ),
        pytest.param(
            _set("inference.gpuMemoryPerReplica", "lots"),
            'Workspace default/ws: inference.gpuMemoryPerReplica is "lots", expected a quantity',
            id="memory",
        ),
        pytest.param(
            _set("resource.labelSelector.matchLabels", {"apps": 1}),
            "Workspace default/ws: resource.labelSelector.matchLabels[apps] is 1, expected a string",
            id="label-value",
        ),
        pytest.param(
            _set("resource.labelSelector.matchExpressions", [{"key": "z", "operator": "Near"}]),
            'resource.labelSelector.matchExpressions[0].operator is "Near", expected one of In, NotIn, Exists, DoesNotExist',
            id="operator",
        ),
        pytest.param(
            _set("resource.labelSelector.matchExpressions", [{"key": "z", "operator": "In"}]),
            "resource.labelSelector.matchExpressions[0].values is [], expected at least one value",
            id="in-without-values",
        ),
        pytest.param(
            _set("resource.instanceType", 5),
            "Workspace default/ws: resource.instanceType is 5, expected a string",
            id="instance-type",
        ),
        pytest.param(
            _set("metadata.name", ""),
            'metadata.name is "", expected a non-empty string',
            id="name",
        ),
    ],
)
def test_malformed_workspaces_name_the_field(edit: Callable[[Obj], None], message: str) -> None:
    obj = k8s_workspace()
    edit(obj)
    with pytest.raises(ConversionError) as caught:
        workspace_from_k8s(obj)
    assert message in str(caught.value)
    allowed, why = validate_workspace(obj, [])
    assert not allowed and why == str(caught.value)


def test_no_preset_and_no_memory_says_both_ways() -> None:
    with pytest.raises(ConversionError) as caught:
        workspace_from_k8s(k8s_workspace(preset=None))
    text = str(caught.value)
    assert text.startswith(
        'Workspace default/ws: inference is {"replicas": 2}, expected preset.name'
    )
    assert text.endswith(" or gpuMemoryPerReplica such as 16Gi")


def test_node_gpu_comes_from_the_device_plugin_not_the_label() -> None:
    node = k8s_gpu_node("n", "A100", 8, 81920)
    assert group_node_from_k8s(node).gpu_allocatable == 8
    del node["status"]["allocatable"]["nvidia.com/gpu"]
    assert group_node_from_k8s(node).gpu_allocatable == 0


def test_unreadable_nodes_are_in_no_group() -> None:
    bad = k8s_gpu_node("bad", "A100", 8, 81920)
    bad["status"]["allocatable"]["cpu"] = "lots"
    grouping = grouping_from_k8s([bad, k8s_gpu_node("good", "A100", 8, 81920)])
    assert [n.name for n in grouping.groups[0].nodes] == ["good"]
    [(name, why)] = grouping.ungrouped
    assert name == "bad" and 'status.allocatable[cpu] is "lots"' in why


def test_denial_lists_nodes_in_no_group() -> None:
    cpu = k8s_gpu_node("cpu-1", "A100", 8, 81920)
    cpu["metadata"]["labels"] = {}
    allowed, message = validate_workspace(k8s_workspace(), [cpu])
    assert not allowed
    assert message == (
        f"{DENIAL} 1 node(s) in no group: cpu-1 (no nvidia.com/gpu.product, "
        "nvidia.com/gpu.count, nvidia.com/gpu.memory label)."
    )


def test_nap_admission_reports_nodes_to_provision() -> None:
    allowed, message = validate_workspace(
        k8s_workspace(instance_type="Standard_NC96ads_A100_v4", memory="400Gi", replicas=1), []
    )
    assert allowed
    assert message.endswith(
        "1 replica(s) x 2 nodes each = 2 node(s) of Standard_NC96ads_A100_v4, "
        "0 existing, 2 to provision"
    )


def test_builtin_profile_and_profile_files(tmp_path: Path) -> None:
    profile = load_group_profile()
    assert profile.filters == (
        names.LABEL_FILTER,
        names.NODE_RESOURCE_FILTER,
        names.CAPACITY_FILTER,
        names.NODE_GROUP_SIZE_FILTER,
    )
    assert [s.name for s in profile.scores] == [names.RESOURCE_UTILIZATION_SCORER]
    path = tmp_path / "mine.yaml"
    path.write_text("mine:\n  filters: [CapacityFilter]\n")
    assert load_group_profile(str(path)).filters == (names.CAPACITY_FILTER,)
    path.write_text("mine:\n  filters: [CapacityFilter]\n  gpuChoice: X\n")
    with pytest.raises(GroupProfileError, match="profile 'mine'"):
        load_group_profile(str(path))
    with pytest.raises(GroupProfileError, match="unknown node-group profile 'nope'"):
        load_group_profile("nope")
