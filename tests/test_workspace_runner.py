"""``kgpu run`` runs the Workspace controller: RunningScheduler against the API double over
HTTP creates the workload of a new Workspace, writes its conditions, scales it when its
replicas change without placing it again, retries after API errors, runs on the leader
only, and a cluster without the Workspace CRD is scheduled all the same."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from kgpu.kube.workspaces.runner import WorkspaceRunOptions, fingerprint
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.schedulers import fast_options, schedulers
from tests.workspace_fixtures import k8s_gpu_node, k8s_workspace

Obj = dict[str, Any]
Start = Callable[..., RunningScheduler]


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble(crds=True) as d:
        for node in [
            k8s_gpu_node("a100-4-a", "A100", 4, 40960, apps="llm"),
            k8s_gpu_node("a100-4-b", "A100", 4, 40960, apps="llm"),
            k8s_gpu_node("a100-8-a", "A100", 8, 81920, apps="llm"),
            k8s_gpu_node("a10-a", "A10", 1, 24576, apps="llm"),
        ]:
            d.put(node)
        yield d


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., RunningScheduler]]:
    defaults: dict[str, Any] = {
        "loop": LoopConfig(idle_wait=0.05, backoff_initial=0.2, backoff_max=1.0),
        "workspaces": WorkspaceRunOptions(idle_wait=0.05, backoff_initial=0.05, backoff_max=0.2),
    }
    with schedulers() as run:
        yield lambda double, identity="s1", **o: run(
            fast_options(double, tmp_path, identity, **{**defaults, **o})
        )


def conditions(obj: Obj | None) -> dict[str, tuple[str, str]]:
    status = (obj or {}).get("status") or {}
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def replicas(double: KubeDouble) -> int | None:
    deployment = double.get("deployments", "ws", "default")
    return None if deployment is None else int(deployment["spec"]["replicas"])


def test_run_places_a_new_workspace_and_scales_it_without_placing_again(
    double: KubeDouble, start: Start
) -> None:
    start(double)
    double.put(k8s_workspace(match_labels={"apps": "llm"}))
    wait_until(lambda: "NodeGroupSelected" in conditions(double.get("workspaces", "ws", "default")))
    deployment = double.get("deployments", "ws", "default")
    assert deployment is not None and deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"apps": "llm", "nvidia.com/gpu.product": "A100"}
    assert pod["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}
    ws = double.get("workspaces", "ws", "default")
    assert ws is not None and ws["status"]["nodeGroup"] == "A100:4:40960"
    assert conditions(ws) == {
        "NodeGroupSelected": ("True", "NodeGroupSelected"),
        "ResourcesReady": ("True", "WorkloadApplied"),
        "InferenceReady": ("False", "ReplicasNotReady"),
        "Failed": ("False", "Running"),
    }

    # Three replicas would fit no group now; the change is seen at once and only scales.
    ws["inference"]["replicas"] = 3
    double.put(ws)
    wait_until(lambda: replicas(double) == 3)
    deployment = double.get("deployments", "ws", "default")
    assert deployment is not None
    assert (
        deployment["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "A100"
    )

    def selected() -> str:
        found = double.get("workspaces", "ws", "default") or {}
        for c in (found.get("status") or {}).get("conditions") or []:
            if c["type"] == "NodeGroupSelected":
                return str(c["message"])
        return ""

    wait_until(lambda: "3 replica(s)" in selected())
    assert selected().startswith("node group {A100, 4, 40960}, chosen at creation")
    assert [o["metadata"]["name"] for o in double.objects("deployments")] == ["ws"]


def test_a_workspace_no_group_fits_is_reported_and_api_errors_are_retried(
    double: KubeDouble, start: Start
) -> None:
    double.fail("POST", r"/deployments$", 500, times=2)
    scheduler = start(double)
    double.put(k8s_workspace("big", replicas=5))
    double.put(k8s_workspace("ws"))
    wait_until(lambda: replicas(double) == 2)
    posts = [
        r.status for r in double.requests if r.method == "POST" and r.path.endswith("/deployments")
    ]
    assert posts == [500, 500, 201]
    assert scheduler.workspaces is not None and scheduler.workspaces.errors == 2
    wait_until(lambda: "Failed" in conditions(double.get("workspaces", "big", "default")))
    assert conditions(double.get("workspaces", "big", "default"))["Failed"] == (
        "True",
        "NoSuitableNodeGroup",
    )
    assert double.get("deployments", "big", "default") is None


def test_only_the_leader_reconciles(double: KubeDouble, start: Start) -> None:
    leader = start(double, "s1", leader_elect=True)
    assert leader.elector is not None
    wait_until(leader.elector.is_leader)
    start(double, "s2", leader_elect=True)
    double.put(k8s_workspace())
    wait_until(lambda: replicas(double) == 2)
    writers = {
        r.agent
        for r in double.requests
        if r.method in ("POST", "PATCH")
        and ("/apis/apps/" in r.path or r.path.endswith("/workspaces/ws/status"))
    }
    assert writers == {"kgpu-scheduler/s1"}


def test_a_cluster_without_the_workspace_crd_is_scheduled_all_the_same(start: Start) -> None:
    with KubeDouble() as double:
        double.put(node_obj("n1", gpus=2))
        double.put(pod_obj("p", gpus=1))
        scheduler = start(double)
        wait_until(lambda: bool((double.get("pods", "p", "default") or {})["spec"].get("nodeName")))
        assert scheduler.workspaces is not None and scheduler.workspaces.informer.absent
        scheduler.stop()


def test_no_workspaces_turns_the_controller_off(double: KubeDouble, start: Start) -> None:
    scheduler = start(double, workspaces=None)
    assert scheduler.workspaces is None
    double.put(k8s_workspace())
    double.put(node_obj("n1", gpus=2))
    double.put(pod_obj("p", gpus=1))
    wait_until(lambda: bool((double.get("pods", "p", "default") or {})["spec"].get("nodeName")))
    assert double.objects("deployments") == []


def test_what_a_pass_depends_on_excludes_metadata_and_status() -> None:
    ws = k8s_workspace()
    patched = {**ws, "metadata": {**ws["metadata"], "resourceVersion": "9"}, "status": {"a": 1}}
    assert fingerprint(patched) == fingerprint({**ws, "status": {"b": 2}})
    assert fingerprint(ws) != fingerprint(patched)  # a status lost is written again
    grown = {**ws, "inference": {**ws["inference"], "replicas": 3}}
    assert fingerprint(grown) != fingerprint(ws)


def test_kaito_workspaces_are_reconciled_with_the_flag_and_kaitos_own_are_left_alone(
    double: KubeDouble, start: Start
) -> None:
    from kgpu.kube.anchors.kaito import KAITO_FINALIZER
    from tests.anchor_crds.kaito import seed_workspace
    from tests.kube_double import KAITO

    double.installed.add(KAITO)
    ours = seed_workspace("ws")
    ours["resource"]["labelSelector"]["matchLabels"] = {"apps": "llm"}
    held = seed_workspace("kaitos")
    held["metadata"]["finalizers"] = [KAITO_FINALIZER]
    double.put(ours)
    double.put(held)
    options = WorkspaceRunOptions(idle_wait=0.05, backoff_initial=0.05, kaito=True)
    start(double, workspaces=options)
    wait_until(
        lambda: "ResourceReady" in conditions(double.get("workspaces", "ws", "default", "kaito.sh"))
    )
    assert replicas(double) == 2
    assert conditions(double.get("workspaces", "ws", "default", "kaito.sh")) == {
        "ResourceReady": ("True", "workspaceResourceStatusSuccess"),
        "InferenceReady": ("False", "ReplicasNotReady"),
        "WorkspaceSucceeded": ("False", "workspacePending"),
    }
    # KAITO's own: no workload, no status.
    assert double.get("deployments", "kaitos", "default") is None
    assert "status" not in (double.get("workspaces", "kaitos", "default", "kaito.sh") or {})


def test_without_the_flag_kaito_workspaces_are_not_touched(
    double: KubeDouble, start: Start
) -> None:
    from tests.anchor_crds.kaito import seed_workspace
    from tests.kube_double import KAITO

    double.installed.add(KAITO)
    obj = seed_workspace("ws")
    obj["resource"]["labelSelector"]["matchLabels"] = {"apps": "llm"}
    double.put(obj)
    double.put(k8s_workspace("kg", match_labels={"apps": "llm"}))
    start(double)
    # kgpu's own Workspace has had its pass; KAITO's none.
    wait_until(lambda: double.get("deployments", "kg", "default") is not None)
    assert double.get("deployments", "ws", "default") is None
    assert "status" not in (double.get("workspaces", "ws", "default", "kaito.sh") or {})
