"""Workspaces, label selectors, presets and the SKU table."""

from __future__ import annotations

import pytest

from kgpu.model.presets import PRESETS, find_preset
from kgpu.model.skus import SKUS, plan_nodes
from kgpu.model.workspace import (
    INSTANCE_TYPE_LABEL,
    LabelSelector,
    Operator,
    Requirement,
    WorkspaceKey,
    WorkspaceSpec,
    nodes_per_replica,
)

LABELS = {"apps": "llm", "zone": "a", "tier": "gpu"}


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        pytest.param(Requirement("zone", Operator.IN, ("a", "b")), True, id="in"),
        pytest.param(Requirement("zone", Operator.IN, ("b",)), False, id="in-miss"),
        pytest.param(Requirement("zone", Operator.NOT_IN, ("b",)), True, id="not-in"),
        pytest.param(Requirement("zone", Operator.NOT_IN, ("a",)), False, id="not-in-miss"),
        pytest.param(Requirement("rack", Operator.NOT_IN, ("a",)), True, id="not-in-absent"),
        pytest.param(Requirement("tier", Operator.EXISTS), True, id="exists"),
        pytest.param(Requirement("rack", Operator.EXISTS), False, id="exists-miss"),
        pytest.param(Requirement("rack", Operator.DOES_NOT_EXIST), True, id="does-not-exist"),
        pytest.param(Requirement("tier", Operator.DOES_NOT_EXIST), False, id="dne-miss"),
    ],
)
def test_requirement_matches_as_kubernetes_does(requirement: Requirement, matches: bool) -> None:
    assert requirement.matches(LABELS) is matches


def test_requirement_values_must_fit_the_operator() -> None:
    with pytest.raises(ValueError):
        Requirement("zone", Operator.IN)
    with pytest.raises(ValueError):
        Requirement("zone", Operator.EXISTS, ("a",))


def test_selector_ands_labels_and_expressions() -> None:
    selector = LabelSelector((("apps", "llm"),), (Requirement("zone", Operator.IN, ("a",)),))
    assert selector.matches(LABELS)
    assert not selector.matches({**LABELS, "zone": "b"})
    assert not selector.matches({"zone": "a"})
    assert LabelSelector().matches({})
    assert str(selector) == "apps=llm,zone in (a)"
    assert str(LabelSelector()) == "(every node)"


def test_workspace_adds_the_instance_type_under_nap() -> None:
    ws = WorkspaceSpec(
        WorkspaceKey("team/llm"),
        LabelSelector((("apps", "llm"),)),
        2,
        8192,
        instance_type="Standard_NC24ads_A100_v4",
    )
    assert ws.name == "llm" and ws.namespace == "team"
    assert ws.total_gpu_memory_mib == 16384
    assert ws.node_selector.match_labels == (
        ("apps", "llm"),
        (INSTANCE_TYPE_LABEL, "Standard_NC24ads_A100_v4"),
    )
    byo = WorkspaceSpec(WorkspaceKey("team/llm"), LabelSelector(), 1, 1)
    assert byo.node_selector == LabelSelector()


@pytest.mark.parametrize(("replicas", "memory"), [(0, 8192), (1, 0)])
def test_workspace_rejects_impossible_values(replicas: int, memory: int) -> None:
    with pytest.raises(ValueError):
        WorkspaceSpec(WorkspaceKey("a/b"), LabelSelector(), replicas, memory)


@pytest.mark.parametrize(
    ("need", "node", "spans"),
    [(8192, 163840, 1), (163840, 163840, 1), (163841, 163840, 2), (102400, 24576, 5)],
)
def test_nodes_per_replica_is_the_ceiling(need: int, node: int, spans: int) -> None:
    assert nodes_per_replica(need, node) == spans


def test_nodes_per_replica_refuses_a_node_without_gpu_memory() -> None:
    with pytest.raises(ValueError):
        nodes_per_replica(8192, 0)


def test_presets_hold_the_design_example_and_more_real_models() -> None:
    phi = PRESETS["phi-4-mini-instruct"]
    assert phi.gpu_memory_mib == 8192  # "8GB for phi-4-mini-instruct"
    assert phi.model_id == "microsoft/Phi-4-mini-instruct"
    assert len(PRESETS) >= 6
    assert PRESETS["mistral-7b-instruct"].gpu_memory_mib == 14777  # 14.43Gi, rounded up
    assert PRESETS["falcon-40b-instruct"].gpu_memory_mib == 90 * 1024
    for preset in PRESETS.values():
        assert preset.source.startswith("kaito-project/kaito ")
        assert "/" in preset.model_id
    assert find_preset("Phi-4-Mini-Instruct") is phi
    assert find_preset("no-such-model") is None


def test_sku_table_and_the_nap_node_count() -> None:
    a100 = SKUS["Standard_NC24ads_A100_v4"]
    assert (a100.gpu_count, a100.gpu_memory_mib, a100.node_gpu_memory_mib) == (1, 81920, 81920)
    assert SKUS["Standard_NC96ads_A100_v4"].node_gpu_memory_mib == 4 * 81920
    assert SKUS["p4d.24xlarge"].node_gpu_memory_mib == 8 * 40960
    for name in ("Standard_NV36ads_A10_v5", "p5.48xlarge", "g5.12xlarge"):
        assert name in SKUS
    # The design's NAP example: 8 GB × 2 replicas on an 80 GB instance takes 2 nodes.
    plan = plan_nodes(a100, 2, 8192)
    assert (plan.nodes_per_replica, plan.nodes) == (1, 2)
    # 100 GiB per replica on an A10 (24 GiB) spans 5 nodes; 2 replicas need 10.
    assert plan_nodes(SKUS["Standard_NV36ads_A10_v5"], 2, 102400).nodes == 10
