"""`kgpu explain` says what holds a pod back in the loop's own words: a PodGroup that does not
exist or cannot be read, a gang, a queue (kgpu's or Volcano's); never "fits now" while the
loop keeps the pod waiting."""

from __future__ import annotations

from typing import Any

from kgpu.kube.explain.explanation import explain_from_objects
from kgpu.kube.explain.session_verdict import GroupObjects
from tests.kube_objects import SCHEDULER, node_obj, pod_obj

GROUP = "scheduling.k8s.io/group-name"


def _member(name: str, group: str) -> dict[str, Any]:
    return pod_obj(name, "ml", gpus=1, annotations={GROUP: group})


def _podgroup(name: str, min_member: int, queue: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if queue:
        spec["queue"] = queue
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "uid": name}, "spec": spec}  # fmt: skip


def _explain(pod: dict[str, Any], pods: list[dict[str, Any]], groups: GroupObjects) -> str:
    nodes = [node_obj("a100-0", gpus=8)]
    return explain_from_objects(pod, nodes, pods, SCHEDULER, groups=groups).summary


def test_a_missing_volcano_podgroup_is_said_not_fits_now() -> None:
    pod = _member("w0", "training")
    assert _explain(pod, [pod], GroupObjects()) == (
        "Pod ml/w0 is pending: PodGroup ml/training does not exist"
    )


def test_an_unreadable_podgroup_is_said_with_its_error() -> None:
    pod = _member("w0", "training")
    groups = GroupObjects(podgroups=[_podgroup("training", 0)])
    assert _explain(pod, [pod], groups) == (
        "Pod ml/w0 is pending: PodGroup ml/training (scheduling.volcano.sh): spec.minMember is "
        "0, expected a whole number, at least 1; its pods are not scheduled until it is fixed"
    )


def test_a_gang_short_of_pods_is_said() -> None:
    pods = [_member(f"w{i}", "training") for i in range(2)]
    groups = GroupObjects(podgroups=[_podgroup("training", 3)])
    assert _explain(pods[0], pods, groups) == (
        "Pod ml/w0 is pending: job ml/training has 2 pods, fewer than its minMember 3"
    )


def test_a_whole_gang_fits_now() -> None:
    pods = [_member(f"w{i}", "training") for i in range(3)]
    groups = GroupObjects(podgroups=[_podgroup("training", 3)])
    assert "fits now" in _explain(pods[0], pods, groups)


def test_a_volcano_queue_at_its_card_quota_is_said() -> None:
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
             "metadata": {"name": "team-a", "uid": "q"},
             "spec": {"capability": {"nvidia.com/gpu": 1}}}  # fmt: skip
    pods = [_member(f"w{i}", "training") for i in range(2)]
    pods[1]["spec"]["nodeName"] = "a100-0"
    groups = GroupObjects(queues=[queue], podgroups=[_podgroup("training", 1, "team-a")])
    assert _explain(pods[0], pods, groups) == (
        "Pod ml/w0 is pending: queue team-a: gpu requested 1, allocated 1, quota 1"
    )
