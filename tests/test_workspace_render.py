"""The workload of a placed workspace, and its status conditions."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.actions.workspace_placement import restore_placement
from kgpu.framework.groups import NodeGroupKey
from kgpu.kube.objects.conditions import condition, merge_conditions
from kgpu.kube.workspaces.workload import (
    DEFAULT_IMAGE,
    NODE_GROUP_ANNOTATION,
    MultiNode,
    WorkloadOptions,
    owner_reference,
    ready_replicas,
    render_workload,
)
from kgpu.model.workspace import LabelSelector, Operator, Requirement
from tests.workspace_fixtures import GIB, k8s_workspace, workspace

A100_4 = NodeGroupKey("A100", 4, 40960)
SELECTOR = LabelSelector((("apps", "llm"),), (Requirement("zone", Operator.IN, ("a",)),))


def kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def pod_spec(obj: dict[str, Any], template: str = "template") -> dict[str, Any]:
    spec = obj["spec"]
    if obj["kind"] == "LeaderWorkerSet":
        spec = spec["leaderWorkerTemplate"]
    return dict(spec[template]["spec"])


def test_a_replica_on_one_node_is_a_deployment() -> None:
    placement = restore_placement(workspace(2, 8 * GIB, SELECTOR), A100_4)
    owner = owner_reference(k8s_workspace())
    service, deployment = render_workload(placement, owner)
    assert kinds([service, deployment]) == [("Service", "ws"), ("Deployment", "ws")]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["annotations"] == {NODE_GROUP_ANNOTATION: "A100:4:40960"}
    assert deployment["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "Workspace",
            "name": "ws",
            "uid": "uid-ws",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = pod_spec(deployment)
    # The workspace's selector plus the group's product; expressions as node affinity.
    assert spec["nodeSelector"] == {"apps": "llm", "nvidia.com/gpu.product": "A100"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        ]
    }
    [container] = spec["containers"]
    assert container["image"] == DEFAULT_IMAGE
    assert container["resources"] == {
        "requests": {"nvidia.com/gpu": "4"},
        "limits": {"nvidia.com/gpu": "4"},
    }
    assert container["args"] == [
        "--model",
        "microsoft/Phi-4-mini-instruct",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "4",
    ]
    assert "schedulerName" not in spec
    assert service["spec"]["selector"] == {"kgpu.io/workspace": "ws"}


def test_a_spanning_replica_is_a_stateful_set_per_replica() -> None:
    placement = restore_placement(workspace(2, 200 * GIB), A100_4)  # 2 nodes per replica
    objects = render_workload(placement, options=WorkloadOptions(scheduler_name="kgpu-scheduler"))
    assert kinds(objects) == [
        ("Service", "ws"),
        ("Service", "ws-headless"),
        ("StatefulSet", "ws-0"),
        ("StatefulSet", "ws-1"),
    ]
    assert objects[0]["spec"]["selector"] == {
        "kgpu.io/workspace": "ws",
        "apps.kubernetes.io/pod-index": "0",  # leaders serve
    }
    assert objects[1]["spec"]["clusterIP"] == "None"
    sts = objects[3]
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["serviceName"] == "ws-headless"
    assert sts["spec"]["selector"]["matchLabels"] == {
        "kgpu.io/workspace": "ws",
        "kgpu.io/replica": "1",
    }
    spec = pod_spec(sts)
    assert spec["schedulerName"] == "kgpu-scheduler"
    [container] = spec["containers"]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "4"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LEADER_ADDRESS"] == "ws-1-0.ws-headless.default.svc.cluster.local"
    script = container["command"][2]
    assert "--pipeline-parallel-size 2" in script and "--tensor-parallel-size 4" in script
    assert script.startswith('if [ "$POD_INDEX" = 0 ]; then ray start --head')


def test_a_spanning_replica_as_a_leader_worker_set() -> None:
    placement = restore_placement(workspace(3, 200 * GIB), A100_4)
    objects = render_workload(
        placement, options=WorkloadOptions(multi_node=MultiNode.LEADER_WORKER_SET)
    )
    assert kinds(objects) == [("Service", "ws"), ("LeaderWorkerSet", "ws")]
    lws = objects[1]
    assert lws["spec"]["replicas"] == 3
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader = pod_spec(lws, "leaderTemplate")["containers"][0]
    worker = pod_spec(lws, "workerTemplate")["containers"][0]
    assert leader["command"][2].startswith("ray start --head")
    assert worker["command"][2] == "ray start --block --address=$(LWS_LEADER_ADDRESS):6379"
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    assert objects[0]["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_nap_selects_the_instance_type() -> None:
    placement = restore_placement(
        workspace(instance_type="Standard_NC24ads_A100_v4"),
        NodeGroupKey("NVIDIA-A100-80GB-PCIe", 1, 81920),
    )
    deployment = render_workload(placement)[1]
    assert pod_spec(deployment)["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"
    }


def test_ready_replicas_count_spanning_replicas_whole() -> None:
    assert ready_replicas([{"kind": "Deployment", "status": {"readyReplicas": 2}}], 1) == 2
    sets: list[dict[str, Any]] = [
        {"kind": "StatefulSet", "status": {"readyReplicas": 2}},
        {"kind": "StatefulSet", "status": {"readyReplicas": 1}},
        {"kind": "StatefulSet"},
        {"kind": "Service"},
    ]
    assert ready_replicas(sets, 2) == 1


def test_conditions_keep_their_transition_time_while_unchanged() -> None:
    old = [condition("InferenceReady", False, "Pending", "0/2 ready", 1, "t0")]
    same = merge_conditions(
        old, [condition("InferenceReady", False, "Pending", "1/2 ready", 2, "t1")]
    )
    assert same == [
        {
            "type": "InferenceReady",
            "status": "False",
            "reason": "Pending",
            "message": "1/2 ready",
            "observedGeneration": 2,
            "lastTransitionTime": "t0",
        }
    ]
    flipped = merge_conditions(same, [condition("InferenceReady", True, "Ready", "2/2", 2, "t2")])
    assert flipped[0]["lastTransitionTime"] == "t2"
    more = merge_conditions(flipped, [condition("Failed", False, "Running", "", 2, "t3")])
    assert [c["type"] for c in more] == ["Failed", "InferenceReady"]


@pytest.mark.parametrize("replicas", [1, 4])
def test_rendering_is_deterministic(replicas: int) -> None:
    placement = restore_placement(workspace(replicas, 200 * GIB), A100_4)
    assert render_workload(placement) == render_workload(placement)
