"""The Workspace controller: the pure pass, then the controller against the API double over
HTTP (the rendered objects, conditions, requeue, and scaling without re-placing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.framework.group_scheduler import DENIAL
from kgpu.kube.api.client import KubeClient
from kgpu.kube.workspaces.controller import (
    REQUEUE_NO_GROUP_S,
    REQUEUE_NOT_READY_S,
    WorkspaceController,
    reconcile,
)
from kgpu.kube.workspaces.placement_check import group_scheduler
from kgpu.kube.workspaces.workload import MultiNode
from tests.kube_double import LWS, KubeDouble
from tests.workspace_fixtures import k8s_gpu_node, k8s_workspace

Obj = dict[str, Any]
NOW = "2025-09-03T00:00:00Z"


def design_nodes() -> list[Obj]:
    return [
        k8s_gpu_node("a100-4-a", "A100", 4, 40960, apps="llm"),
        k8s_gpu_node("a100-4-b", "A100", 4, 40960, apps="llm"),
        k8s_gpu_node("a100-8-a", "A100", 8, 81920, apps="llm"),
        k8s_gpu_node("a10-a", "A10", 1, 24576, apps="llm"),
    ]


def conditions(status: Obj) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


# ---------------------------------------------------------------------------- the pure pass


def test_a_pass_places_renders_and_sets_conditions() -> None:
    out = reconcile(k8s_workspace(), design_nodes(), [], NOW, group_scheduler())
    assert [(o["kind"], o["metadata"]["name"]) for o in out.create] == [
        ("Service", "ws"),
        ("Deployment", "ws"),
    ]
    assert out.status["nodeGroup"] == "A100:4:40960"
    assert out.status["workerNodes"] == ["a100-4-a", "a100-4-b"]
    assert conditions(out.status) == {
        "Failed": ("False", "Running"),
        "InferenceReady": ("False", "ReplicasNotReady"),
        "NodeGroupSelected": ("True", "NodeGroupSelected"),
        "ResourcesReady": ("True", "WorkloadApplied"),
    }
    assert out.requeue_after == REQUEUE_NOT_READY_S


def test_a_pass_with_no_group_creates_nothing_and_requeues() -> None:
    out = reconcile(k8s_workspace(replicas=3), design_nodes(), [], NOW, group_scheduler())
    assert (out.create, out.scale, out.delete) == ([], [], [])
    assert out.requeue_after == REQUEUE_NO_GROUP_S
    failed = next(c for c in out.status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "NoSuitableNodeGroup")
    assert failed["message"].startswith(DENIAL)


def test_a_malformed_workspace_fails_without_requeue() -> None:
    out = reconcile(k8s_workspace(preset="gpt-9"), design_nodes(), [], NOW, group_scheduler())
    assert out.requeue_after is None and out.create == []
    assert conditions(out.status)["Failed"] == ("True", "InvalidWorkspace")


def test_nap_waits_for_nodes_to_be_provisioned() -> None:
    ws = k8s_workspace(instance_type="Standard_NC24ads_A100_v4")
    out = reconcile(ws, [], [], NOW, group_scheduler())
    assert conditions(out.status)["ResourcesReady"] == ("False", "NodesToProvision")
    deployment = out.create[1]
    selector = deployment["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["node.kubernetes.io/instance-type"] == "Standard_NC24ads_A100_v4"


# ---------------------------------------------------------------------------- over HTTP


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble(crds=True) as d:
        for node in design_nodes():
            d.put(node)
        yield d


@pytest.fixture
def client(double: KubeDouble, tmp_path: Path) -> Iterator[KubeClient]:
    c = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
    yield c
    c.close()


def test_the_controller_creates_the_workload_and_scales_without_replacing(
    double: KubeDouble, client: KubeClient
) -> None:
    double.put(k8s_workspace(match_labels={"apps": "llm"}))
    controller = WorkspaceController(client, clock=lambda: 0.0)
    assert controller.reconcile("default", "ws") == REQUEUE_NOT_READY_S
    deployment = double.get("deployments", "ws", "default")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"apps": "llm", "nvidia.com/gpu.product": "A100"}
    assert pod["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}
    assert deployment["metadata"]["ownerReferences"][0]["kind"] == "Workspace"
    assert double.get("services", "ws", "default") is not None
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None and ws["status"]["nodeGroup"] == "A100:4:40960"
    assert conditions(ws["status"])["InferenceReady"] == ("False", "ReplicasNotReady")

    # The pods come up: inference is ready, nothing more to do until something changes.
    deployment["status"] = {"readyReplicas": 2}
    double.put(deployment)
    assert controller.reconcile("default", "ws") is None
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None
    assert conditions(ws["status"])["InferenceReady"] == ("True", "InferenceReady")

    # Three replicas would fit no group now, yet the workload is only scaled on its group.
    ws["inference"]["replicas"] = 3
    double.put(ws)
    assert controller.reconcile("default", "ws") == REQUEUE_NOT_READY_S
    deployment = double.get("deployments", "ws", "default")
    assert deployment is not None and deployment["spec"]["replicas"] == 3
    assert (
        deployment["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "A100"
    )
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None and ws["status"]["nodeGroup"] == "A100:4:40960"
    selected = next(c for c in ws["status"]["conditions"] if c["type"] == "NodeGroupSelected")
    assert selected["message"].startswith("node group {A100, 4, 40960}, chosen at creation")
    node_lists = [r for r in double.requests if r.method == "GET" and r.path == "/api/v1/nodes"]
    assert len(node_lists) == 1  # the group was chosen once; scaling never re-places


def test_nothing_fits_then_a_node_joins(double: KubeDouble, client: KubeClient) -> None:
    double.put(k8s_workspace(replicas=3))
    controller = WorkspaceController(client)
    assert controller.reconcile("default", "ws") == REQUEUE_NO_GROUP_S
    assert double.objects("deployments") == []
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None
    assert conditions(ws["status"])["NodeGroupSelected"] == ("False", "NoSuitableNodeGroup")
    double.put(k8s_gpu_node("a100-4-c", "A100", 4, 40960))
    assert controller.reconcile("default", "ws") == REQUEUE_NOT_READY_S
    deployment = double.get("deployments", "ws", "default")
    assert deployment is not None and deployment["spec"]["replicas"] == 3
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None
    assert conditions(ws["status"])["Failed"] == ("False", "Running")


def test_spanning_replicas_get_stateful_sets_and_scale_down_deletes_one(
    double: KubeDouble, client: KubeClient
) -> None:
    double.put(k8s_workspace(replicas=2, preset=None, memory="200Gi"))
    for name in ("a100-4-c", "a100-4-d"):
        double.put(k8s_gpu_node(name, "A100", 4, 40960))
    controller = WorkspaceController(client)  # no LeaderWorkerSet CRD: StatefulSets
    controller.reconcile("default", "ws")
    assert sorted(o["metadata"]["name"] for o in double.objects("statefulsets")) == ["ws-0", "ws-1"]
    assert double.get("services", "ws-headless", "default") is not None
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None
    ws["inference"]["replicas"] = 1
    double.put(ws)
    controller.reconcile("default", "ws")
    assert [o["metadata"]["name"] for o in double.objects("statefulsets")] == ["ws-0"]


def test_a_leader_worker_set_when_its_crd_is_installed(tmp_path: Path) -> None:
    with KubeDouble(crds=True) as d:
        d.installed.add(LWS)
        for node in design_nodes():
            d.put(node)
        d.put(k8s_workspace(replicas=1, preset=None, memory="200Gi"))
        client = KubeClient.from_kubeconfig(d.kubeconfig(tmp_path))
        controller = WorkspaceController(client)
        controller.reconcile("default", "ws")
        assert controller.multi_node is MultiNode.LEADER_WORKER_SET
        [lws] = d.objects("leaderworkersets")
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
        assert d.objects("statefulsets") == []
        client.close()


def test_a_lost_status_keeps_the_group_of_the_workload(
    double: KubeDouble, client: KubeClient
) -> None:
    double.put(k8s_workspace())
    controller = WorkspaceController(client)
    controller.reconcile("default", "ws")
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None
    ws.pop("status")  # restored from a backup without status, say
    ws["inference"]["replicas"] = 3
    double.put(ws)
    controller.reconcile("default", "ws")
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None and ws["status"]["nodeGroup"] == "A100:4:40960"


def test_reconcile_all_and_a_deleted_workspace(double: KubeDouble, client: KubeClient) -> None:
    double.put(k8s_workspace("a", replicas=1))
    double.put(k8s_workspace("b", replicas=5))
    controller = WorkspaceController(client)
    assert controller.reconcile_all() == {
        "default/a": REQUEUE_NOT_READY_S,
        "default/b": REQUEUE_NO_GROUP_S,
    }
    assert controller.reconcile("default", "gone") is None
