"""Grouping by GFD labels, each node-group plugin's verdicts, the cycle's combination rules,
the registry and the NAP path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kgpu.actions.workspace_placement import (
    WorkspacePlacement,
    group_key,
    group_node,
    group_nodes,
    restore_placement,
)
from kgpu.actions.workspace_placement import place_workspace as place
from kgpu.framework import reasons
from kgpu.framework.group_scheduler import GroupChoice, GroupScheduler, NoGroup
from kgpu.framework.groups import (
    GPUS_IN_USE,
    GPUS_NOT_ALLOCATABLE,
    INSTANCE_TYPE_MISMATCH,
    LABEL_SELECTOR_MISMATCH,
    NO_GPU_RESOURCE,
    GroupCycle,
    GroupNode,
    GroupProfile,
    NodeGroupKey,
)
from kgpu.framework.profile import WeightedPlugin
from kgpu.framework.status import Reason
from kgpu.kube.workspaces.placement_check import group_scheduler
from kgpu.model.node import NodeName
from kgpu.model.workspace import INSTANCE_TYPE_LABEL, LabelSelector, Operator, Requirement
from kgpu.plugins import names
from kgpu.plugins.group.label_filter import LabelFilter
from kgpu.plugins.group.node_resource_filter import NodeResourceFilter
from kgpu.plugins.registry import UnknownPluginError, build_group_scheduler, build_scheduler
from tests.builders import make_node
from tests.workspace_fixtures import GIB, design_nodes, gfd_labels, gfd_node, workspace

NC24 = "Standard_NC24ads_A100_v4"


@pytest.fixture(scope="module")
def scheduler() -> GroupScheduler:
    return group_scheduler()


# ---------------------------------------------------------------------------- grouping


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param(gfd_labels("A100", 8, 81920), NodeGroupKey("A100", 8, 81920), id="gfd"),
        pytest.param(
            {},
            "no nvidia.com/gpu.product, nvidia.com/gpu.count, nvidia.com/gpu.memory label",
            id="none",
        ),
        pytest.param(
            {k: v for k, v in gfd_labels("A100", 8, 81920).items() if "memory" not in k},
            "no nvidia.com/gpu.memory label",
            id="no-memory",
        ),
        pytest.param(
            gfd_labels("A100", 8, 81920) | {"nvidia.com/gpu.memory": "80GB"},
            "label nvidia.com/gpu.memory is '80GB', expected a positive whole number",
            id="hand-edited",
        ),
        pytest.param(
            gfd_labels("A100", 0, 81920),
            "label nvidia.com/gpu.count is '0', expected a positive whole number",
            id="zero",
        ),
    ],
)
def test_group_key_from_gfd_labels(labels: dict[str, str], expected: object) -> None:
    assert group_key(labels) == expected


def test_groups_are_sorted_and_unlabelled_nodes_are_noted() -> None:
    nodes = [*reversed(design_nodes()), GroupNode(NodeName("cpu-1"), {}, 0)]
    grouping = group_nodes(nodes)
    assert [str(g.key) for g in grouping.groups] == [
        "{A10, 1, 24576}",
        "{A100, 4, 40960}",
        "{A100, 8, 81920}",
    ]
    assert [n.name for n in grouping.groups[1].nodes] == ["a100-4-a", "a100-4-b"]
    assert grouping.ungrouped == (
        (
            NodeName("cpu-1"),
            "no nvidia.com/gpu.product, nvidia.com/gpu.count, nvidia.com/gpu.memory label",
        ),
    )
    assert grouping.notes()[0].startswith("1 node(s) in no group: cpu-1 (no nvidia.com/gpu.product")


def test_group_node_from_a_model_node() -> None:
    info = make_node("n").gpus(8, "A100", 81920).cordoned().build()
    node = group_node(info, gpu_in_use=2)
    assert (node.gpu_allocatable, node.gpu_in_use, node.unschedulable) == (8, 2, True)
    assert group_node(info, gpu_allocatable=0).gpu_allocatable == 0


def test_key_round_trips_through_its_encoding() -> None:
    key = NodeGroupKey("NVIDIA-A100-SXM4-40GB", 8, 40960)
    assert key.encode() == "NVIDIA-A100-SXM4-40GB:8:40960"
    assert NodeGroupKey.decode(key.encode()) == key
    for bad in ("A100", "A100:x:1", ":8:1"):
        with pytest.raises(ValueError):
            NodeGroupKey.decode(bad)


# ---------------------------------------------------------------------------- node filters


def node_verdicts(plugin: Any, nodes: list[GroupNode], **ws: Any) -> list[str]:
    """Each node's first reason ("" when it passes), in the cycle's flat node order."""
    grouping = group_nodes(nodes)
    spec = workspace(**ws)
    cycle = GroupCycle(grouping.groups, spec)
    verdicts = plugin.filter_nodes(cycle, spec, np.arange(len(cycle.nodes), dtype=np.int64))
    out = [""] * len(cycle.nodes)
    for reason, mask in verdicts.rejected:
        for i in np.flatnonzero(mask).tolist():
            out[i] = reason.code
    assert [not r for r in out] == verdicts.ok.tolist()
    return [f"{cycle.nodes[i].name}:{r}" for i, r in enumerate(out)]


def test_node_resource_filter_reasons_in_order() -> None:
    nodes = [
        gfd_node("ok", "A100", 4, 40960),
        gfd_node("no-plugin", "A100", 4, 40960, allocatable=0, cordoned=True),
        gfd_node("one-failed", "A100", 4, 40960, allocatable=3),
        gfd_node("cordoned", "A100", 4, 40960, cordoned=True),
        gfd_node("busy", "A100", 4, 40960, in_use=1),
    ]
    assert node_verdicts(NodeResourceFilter(), nodes) == [
        "busy:" + GPUS_IN_USE.code,
        "cordoned:" + reasons.NODE_UNSCHEDULABLE.code,
        "no-plugin:" + NO_GPU_RESOURCE.code,  # the first reason wins
        "ok:",
        "one-failed:" + GPUS_NOT_ALLOCATABLE.code,
    ]


def test_label_filter_selector_and_instance_type() -> None:
    nodes = [
        gfd_node("a", "A100", 1, 81920, labels={"apps": "llm", INSTANCE_TYPE_LABEL: NC24}),
        gfd_node("b", "A100", 1, 81920, labels={"apps": "llm"}),
        gfd_node("c", "A100", 1, 81920, labels={"apps": "web", INSTANCE_TYPE_LABEL: NC24}),
        gfd_node("d", "A100", 1, 81920, labels={"apps": "llm", "zone": "x"}),
    ]
    selector = LabelSelector((("apps", "llm"),), (Requirement("zone", Operator.NOT_IN, ("x",)),))
    assert node_verdicts(LabelFilter(), nodes, selector=selector) == [
        "a:",
        "b:",
        "c:" + LABEL_SELECTOR_MISMATCH.code,
        "d:" + LABEL_SELECTOR_MISMATCH.code,
    ]
    assert node_verdicts(LabelFilter(), nodes, selector=selector, instance_type=NC24) == [
        "a:",
        "b:" + INSTANCE_TYPE_MISMATCH.code,
        "c:" + LABEL_SELECTOR_MISMATCH.code,
        "d:" + LABEL_SELECTOR_MISMATCH.code,
    ]


# ---------------------------------------------------------------------------- the cycle


def test_nodes_dropped_by_node_filters_are_not_counted(scheduler: GroupScheduler) -> None:
    nodes = [gfd_node("a", "A100", 4, 40960), gfd_node("b", "A100", 4, 40960, cordoned=True)]
    outcome = scheduler.schedule(group_nodes(nodes).groups, workspace())
    assert isinstance(outcome, NoGroup)
    [report] = outcome.reports
    assert (report.nodes, report.eligible, report.plugin) == (2, 1, names.NODE_GROUP_SIZE_FILTER)
    assert report.dropped == ((reasons.NODE_UNSCHEDULABLE, 1),)
    assert report.detail == (
        "2 replicas x 1 node each = 2 nodes needed, 1 eligible; "
        "not counted: 1 node(s) were unschedulable"
    )


def test_a_group_emptied_by_several_reasons_names_the_commonest(scheduler: GroupScheduler) -> None:
    nodes = [
        gfd_node("a", "A10", 1, 24576, allocatable=0),
        gfd_node("b", "A10", 1, 24576, cordoned=True),
        gfd_node("c", "A10", 1, 24576, cordoned=True),
    ]
    outcome = scheduler.schedule(group_nodes(nodes).groups, workspace(replicas=1))
    assert isinstance(outcome, NoGroup)
    [report] = outcome.reports
    assert report.reason == reasons.NODE_UNSCHEDULABLE
    assert report.detail == (
        "no eligible node: 1 node(s) had no nvidia.com/gpu capacity, 2 node(s) were unschedulable"
    )


def test_ties_go_to_the_group_with_more_nodes_then_the_lower_key(scheduler: GroupScheduler) -> None:
    # {A100, 8, 40960} and {H100, 4, 81920} both offer 320 GiB per node: equal scores.
    few = [gfd_node("h1", "H100", 4, 81920)] + [
        gfd_node(f"a{i}", "A100", 8, 40960) for i in range(2)
    ]
    outcome = scheduler.schedule(group_nodes(few).groups, workspace(replicas=1))
    assert isinstance(outcome, GroupChoice) and outcome.key.product == "A100"
    more = [gfd_node(f"h{i}", "H100", 4, 81920) for i in range(3)] + few[1:]
    outcome = scheduler.schedule(group_nodes(more).groups, workspace(replicas=1))
    assert isinstance(outcome, GroupChoice) and outcome.key.product == "H100"
    equal = [gfd_node("h1", "H100", 4, 81920), gfd_node("a1", "A100", 8, 40960)]
    for order in (equal, equal[::-1]):
        outcome = scheduler.schedule(group_nodes(order).groups, workspace(replicas=1))
        assert isinstance(outcome, GroupChoice) and outcome.key.product == "A100"


def test_no_nodes_at_all_is_a_denial(scheduler: GroupScheduler) -> None:
    outcome = scheduler.schedule((), workspace())
    assert isinstance(outcome, NoGroup)
    assert outcome.message.endswith("after filtering. there are no node groups to choose from.")


# ---------------------------------------------------------------------------- registry


def test_group_plugins_live_in_the_one_registry() -> None:
    profile = GroupProfile(
        name="t", filters=(names.GPU_FIT,), scores=(WeightedPlugin(name=names.BEST_FIT),)
    )
    with pytest.raises(TypeError, match="GpuFit' cannot serve as a node-group filter"):
        build_group_scheduler(profile)
    profile = GroupProfile(name="t", scores=(WeightedPlugin(name=names.BEST_FIT),))
    with pytest.raises(TypeError, match="BestFit' cannot serve as a node-group score"):
        build_group_scheduler(profile)
    with pytest.raises(UnknownPluginError):
        build_group_scheduler(GroupProfile(name="t", filters=("Nope",)))
    # ... and the reverse: a group filter in a pod profile is refused too.
    from kgpu.framework.profile import Profile

    pod = Profile.model_validate(
        {"name": "p", "filters": [names.CAPACITY_FILTER], "gpuChoice": names.GPU_TIGHTEST}
    )
    with pytest.raises(TypeError, match="CapacityFilter' cannot serve as FilterPlugin"):
        build_scheduler(pod)


def test_a_weighted_profile_scales_scores() -> None:
    profile = GroupProfile(
        name="t",
        filters=(names.NODE_RESOURCE_FILTER,),
        scores=(WeightedPlugin(name=names.RESOURCE_UTILIZATION_SCORER, weight=2),),
    )
    outcome = build_group_scheduler(profile).schedule(
        group_nodes(design_nodes()).groups, workspace(replicas=1)
    )
    assert isinstance(outcome, GroupChoice)
    assert outcome.score == pytest.approx(200 / 3)


# ---------------------------------------------------------------------------- placement and NAP


def test_byo_placement_selects_the_product(scheduler: GroupScheduler) -> None:
    placement = place(scheduler, workspace(), group_nodes(design_nodes()))
    assert isinstance(placement, WorkspacePlacement)
    assert placement.node_selector == (("nvidia.com/gpu.product", "A100"),)
    assert placement.nodes == ("a100-4-a", "a100-4-b")
    assert (placement.provision, placement.instance_type) == (0, "")


def test_nap_without_nodes_reports_how_many_to_provision(scheduler: GroupScheduler) -> None:
    placement = place(scheduler, workspace(instance_type=NC24), group_nodes(design_nodes()))
    assert isinstance(placement, WorkspacePlacement)
    # The design's NAP example: 8 GB x 2 on an 80 GB instance is 2 nodes, one per replica.
    assert (placement.nodes_per_replica, placement.nodes_needed, placement.provision) == (1, 2, 2)
    assert placement.node_selector == ((INSTANCE_TYPE_LABEL, NC24),)
    assert placement.key == NodeGroupKey("NVIDIA-A100-80GB-PCIe", 1, 81920)
    assert placement.summary == (
        "node group {NVIDIA-A100-80GB-PCIe, 1, 81920}: 2 replica(s) x 1 node each = 2 node(s) "
        "of Standard_NC24ads_A100_v4, 0 existing, 2 to provision"
    )


def test_nap_counts_existing_nodes_of_the_type(scheduler: GroupScheduler) -> None:
    typed = {INSTANCE_TYPE_LABEL: NC24}
    one = [gfd_node("nc-1", "NVIDIA-A100-80GB-PCIe", 1, 81920, labels=typed)]
    placement = place(scheduler, workspace(instance_type=NC24), group_nodes(one + design_nodes()))
    assert isinstance(placement, WorkspacePlacement)
    assert (placement.provision, placement.nodes) == (1, ())
    two = [*one, gfd_node("nc-2", "NVIDIA-A100-80GB-PCIe", 1, 81920, labels=typed)]
    placement = place(scheduler, workspace(instance_type=NC24), group_nodes(two))
    assert isinstance(placement, WorkspacePlacement)
    assert (placement.provision, placement.nodes) == (0, ("nc-1", "nc-2"))
    assert placement.node_selector == ((INSTANCE_TYPE_LABEL, NC24),)


def test_a_stored_group_is_restored_without_scheduling() -> None:
    key = NodeGroupKey("A100", 4, 40960)
    placement = restore_placement(workspace(replicas=5, gpu_memory_mib=200 * GIB), key)
    assert (placement.key, placement.nodes_per_replica, placement.nodes_needed) == (key, 2, 10)
    assert placement.node_selector == (("nvidia.com/gpu.product", "A100"),)
    nap = restore_placement(workspace(instance_type=NC24), key)
    assert nap.node_selector == ((INSTANCE_TYPE_LABEL, NC24),)


def test_nap_spanning_nodes_of_a_small_instance(scheduler: GroupScheduler) -> None:
    ws = workspace(replicas=2, gpu_memory_mib=100 * GIB, instance_type="Standard_NV36ads_A10_v5")
    placement = place(scheduler, ws, group_nodes([]))
    assert isinstance(placement, WorkspacePlacement)
    assert (placement.nodes_per_replica, placement.provision) == (5, 10)


def test_nap_with_an_unknown_instance_type_uses_existing_nodes_only(
    scheduler: GroupScheduler,
) -> None:
    ws = workspace(instance_type="Custom_GPU_v1")
    outcome = place(scheduler, ws, group_nodes(design_nodes()))
    assert isinstance(outcome, NoGroup)
    assert "instanceType Custom_GPU_v1 is not in kgpu's SKU table" in outcome.message
    typed = [
        gfd_node(f"c{i}", "L40S", 1, 46068, labels={INSTANCE_TYPE_LABEL: "Custom_GPU_v1"})
        for i in range(2)
    ]
    placement = place(scheduler, ws, group_nodes(typed))
    assert isinstance(placement, WorkspacePlacement) and placement.key.product == "L40S"


def test_reasons_are_reasons() -> None:
    for reason in (NO_GPU_RESOURCE, GPUS_IN_USE, LABEL_SELECTOR_MISMATCH):
        assert isinstance(reason, Reason) and reason.phrase.startswith("node(s) ")
