"""The KAITO design's example, as an acceptance test.

Node groups {A100, 4, 40960}×2, {A100, 8, 81920}×1 and {A10, 1, 24576}×1; a preset of 8 GB
per replica with 2 replicas (16 GB in all). Every filter's verdict on every group is
asserted, then the cycle's choice, then the variants: 3 replicas, 100 GB per replica, a
replica spanning nodes, and a selector that leaves nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from kgpu.actions.workspace_placement import group_nodes
from kgpu.framework.group_scheduler import DENIAL, GroupChoice, GroupScheduler, NoGroup
from kgpu.framework.groups import (
    INSUFFICIENT_GROUP_MEMORY,
    LABEL_SELECTOR_MISMATCH,
    TOO_FEW_NODES,
    GroupCycle,
    NodeGroupKey,
)
from kgpu.kube.workspaces.placement_check import group_scheduler, validate_workspace
from kgpu.model.workspace import LabelSelector, WorkspaceSpec
from kgpu.plugins.group.capacity_filter import CapacityFilter
from kgpu.plugins.group.label_filter import LabelFilter
from kgpu.plugins.group.node_group_size_filter import NodeGroupSizeFilter
from kgpu.plugins.group.node_resource_filter import NodeResourceFilter
from kgpu.plugins.group.resource_utilization_scorer import ResourceUtilizationScorer
from tests.workspace_fixtures import (
    GIB,
    design_nodes,
    gfd_node,
    k8s_gpu_node,
    k8s_workspace,
    workspace,
)

A10 = NodeGroupKey("A10", 1, 24576)
A100_4 = NodeGroupKey("A100", 4, 40960)
A100_8 = NodeGroupKey("A100", 8, 81920)
ORDER = (A10, A100_4, A100_8)  # groups sort by key: "A10" < "A100"


@pytest.fixture(scope="module")
def scheduler() -> GroupScheduler:
    return group_scheduler()  # the built-in "byo" profile of kgpu/profiles/workspaces.yaml


def cycle(ws: WorkspaceSpec) -> GroupCycle:
    grouping = group_nodes(design_nodes())
    assert tuple(g.key for g in grouping.groups) == ORDER
    return GroupCycle(grouping.groups, ws)


ALL_GROUPS = np.arange(3, dtype=np.int64)


def test_every_filter_passes_every_node_of_the_example() -> None:
    ws = workspace()
    c = cycle(ws)
    nodes = np.arange(len(c.nodes), dtype=np.int64)
    for plugin in (NodeResourceFilter(), LabelFilter()):
        verdicts = plugin.filter_nodes(c, ws, nodes)
        assert verdicts.ok.all(), plugin.name
        assert verdicts.rejected == []


def test_capacity_filter_verdicts_on_each_group() -> None:
    # 16 GB needed; {A10} alone holds 24 GB, so memory rejects no group of the example.
    ws = workspace()
    verdicts = CapacityFilter().filter_groups(cycle(ws), ws, ALL_GROUPS)
    assert verdicts.ok.tolist() == [True, True, True]


def test_node_group_size_filter_verdicts_on_each_group() -> None:
    ws = workspace()
    verdicts = NodeGroupSizeFilter().filter_groups(cycle(ws), ws, ALL_GROUPS)
    # One replica per node: only {A100, 4} has the two nodes two replicas need.
    assert verdicts.ok.tolist() == [False, True, False]
    [(reason, mask)] = verdicts.rejected
    assert reason == TOO_FEW_NODES and mask.tolist() == [True, False, True]
    assert verdicts.details == {
        0: "2 replicas x 1 node each = 2 nodes needed, 1 eligible",
        2: "2 replicas x 1 node each = 2 nodes needed, 1 eligible",
    }


def test_resource_utilization_scores_on_each_group() -> None:
    ws = workspace()
    scores = ResourceUtilizationScorer().score_groups(cycle(ws), ws, ALL_GROUPS)
    # 8 GiB of 24 GiB, of 4 x 40 GiB, of 8 x 80 GiB: least waste scores highest.
    assert scores.tolist() == pytest.approx([100 / 3, 5.0, 1.25])


def test_the_design_example_chooses_the_a100_4_group(scheduler: GroupScheduler) -> None:
    outcome = scheduler.schedule(group_nodes(design_nodes()).groups, workspace())
    assert isinstance(outcome, GroupChoice)
    assert outcome.key == A100_4
    assert outcome.nodes == ("a100-4-a", "a100-4-b")
    assert (outcome.nodes_per_replica, outcome.nodes_needed) == (1, 2)
    assert outcome.score == pytest.approx(5.0)
    verdicts = {r.key: (r.plugin, r.reason) for r in outcome.reports}
    assert verdicts == {
        A10: ("NodeGroupSizeFilter", TOO_FEW_NODES),
        A100_4: ("", None),
        A100_8: ("NodeGroupSizeFilter", TOO_FEW_NODES),
    }


def test_one_replica_goes_to_the_group_that_wastes_least(scheduler: GroupScheduler) -> None:
    outcome = scheduler.schedule(group_nodes(design_nodes()).groups, workspace(replicas=1))
    assert isinstance(outcome, GroupChoice)
    assert outcome.key == A10
    assert [r.passed for r in outcome.reports] == [True, True, True]


def size_line(key: NodeGroupKey, nodes: int, replicas: int) -> str:
    s = "" if nodes == 1 else "s"
    return (
        f"{key} ({nodes} node{s}): NodeGroupSizeFilter: node group had too few nodes for the "
        f"replicas ({replicas} replicas x 1 node each = {replicas} nodes needed, {nodes} eligible)"
    )


def test_three_replicas_fit_no_group_and_are_denied(scheduler: GroupScheduler) -> None:
    outcome = scheduler.schedule(group_nodes(design_nodes()).groups, workspace(replicas=3))
    assert isinstance(outcome, NoGroup)
    assert outcome.message == (
        "No suitable node group found: insufficient capacity or no matching configurations "
        "after filtering. "
        + "; ".join([size_line(A10, 1, 3), size_line(A100_4, 2, 3), size_line(A100_8, 1, 3)])
        + "."
    )
    assert outcome.status.reason_code == "NoSuitableNodeGroup"


def test_100_gb_per_replica(scheduler: GroupScheduler) -> None:
    outcome = scheduler.schedule(group_nodes(design_nodes()).groups, workspace(2, 100 * GIB))
    assert isinstance(outcome, GroupChoice)
    assert outcome.key == A100_4 and outcome.nodes_per_replica == 1
    reports = {r.key: r for r in outcome.reports}
    assert reports[A10].reason == INSUFFICIENT_GROUP_MEMORY
    assert reports[A10].detail == (
        "2 replicas x 102400 MiB = 204800 MiB needed, 1 eligible nodes x 24576 MiB = 24576 MiB"
    )
    assert reports[A100_8].reason == TOO_FEW_NODES  # memory enough, but one node
    assert reports[A100_4].passed


def test_100_gb_per_replica_spans_five_a10_nodes(scheduler: GroupScheduler) -> None:
    nodes = [gfd_node(f"a10-{i}", "A10", 1, 24576) for i in range(10)]
    outcome = scheduler.schedule(group_nodes(nodes).groups, workspace(2, 100 * GIB))
    assert isinstance(outcome, GroupChoice)
    # ceil(102400 / 24576) = 5 nodes per replica; 2 replicas take all 10.
    assert (outcome.nodes_per_replica, outcome.nodes_needed) == (5, 10)
    short = scheduler.schedule(group_nodes(nodes[:9]).groups, workspace(2, 100 * GIB))
    assert isinstance(short, NoGroup)
    assert short.reports[0].detail == "2 replicas x 5 nodes each = 10 nodes needed, 9 eligible"


def test_a_replica_larger_than_any_node_spans_the_a100_4_nodes(scheduler: GroupScheduler) -> None:
    # 200 GB: one {A100, 8} node holds it (wasting 440 GB), two {A100, 4} nodes waste 120 GB.
    outcome = scheduler.schedule(group_nodes(design_nodes()).groups, workspace(1, 200 * GIB))
    assert isinstance(outcome, GroupChoice)
    assert (outcome.key, outcome.nodes_per_replica) == (A100_4, 2)


def test_a_selector_that_leaves_nothing(scheduler: GroupScheduler) -> None:
    ws = workspace(selector=LabelSelector((("apps", "llm"),)))
    outcome = scheduler.schedule(group_nodes(design_nodes()).groups, ws)
    assert isinstance(outcome, NoGroup)
    phrase = "node(s) didn't match the workspace's label selector"
    lines = [
        f"{A10} (1 node): LabelFilter: {phrase}",
        f"{A100_4} (2 nodes): LabelFilter: {phrase}",
        f"{A100_8} (1 node): LabelFilter: {phrase}",
    ]
    assert outcome.message == f"{DENIAL} " + "; ".join(lines) + "."
    assert all(r.reason == LABEL_SELECTOR_MISMATCH and r.eligible == 0 for r in outcome.reports)
    # The same selector matching the nodes gives the example's answer.
    labelled = scheduler.schedule(group_nodes(design_nodes(apps="llm")).groups, ws)
    assert isinstance(labelled, GroupChoice) and labelled.key == A100_4


def k8s_design_nodes() -> list[dict[str, object]]:
    return [
        k8s_gpu_node("a100-4-a", "A100", 4, 40960, apps="llm"),
        k8s_gpu_node("a100-4-b", "A100", 4, 40960, apps="llm"),
        k8s_gpu_node("a100-8-a", "A100", 8, 81920, apps="llm"),
        k8s_gpu_node("a10-a", "A10", 1, 24576, apps="llm"),
    ]


def test_admission_allows_the_example_and_says_where() -> None:
    allowed, message = validate_workspace(
        k8s_workspace(match_labels={"apps": "llm"}), k8s_design_nodes()
    )
    assert allowed
    assert message == (
        "node group {A100, 4, 40960}: 2 replica(s) x 1 node each = 2 node(s), 2 eligible"
    )


def test_admission_denies_three_replicas_with_the_design_message() -> None:
    allowed, message = validate_workspace(k8s_workspace(replicas=3), k8s_design_nodes())
    assert not allowed
    assert message.startswith(DENIAL + " {A10, 1, 24576} (1 node): NodeGroupSizeFilter:")
