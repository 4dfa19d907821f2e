"""`kgpu run` against the API double as Volcano's job controller sees it: a Volcano Job's
PodGroup, created before its pods, is written Inqueue by kgpu; one past its queue's quota
stays Pending with a Warning; the pods created once Inqueue are placed."""

from __future__ import annotations

from typing import Any

from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.test_kube_queues import Start, double, start  # noqa: F401

V1BETA1 = "scheduling.volcano.sh/v1beta1"


def _group(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": V1BETA1,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": gpus, "queue": "team-a", "minResources": {"nvidia.com/gpu": gpus}},
    }


def _phase(api: KubeDouble, name: str) -> str:
    obj = api.get("podgroups", name, "default", group="scheduling.volcano.sh") or {}
    return str((obj.get("status") or {}).get("phase") or "")


def test_kgpu_run_writes_a_podless_volcano_podgroup_inqueue(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    double.put(node_obj("n1", gpus=8))
    double.put({"apiVersion": V1BETA1, "kind": "Queue", "metadata": {"name": "team-a"},
                "spec": {"capability": {"nvidia.com/gpu": 5}}})  # fmt: skip
    double.put(_group("first", 4))
    double.put(_group("second", 2))
    start()
    wait_until(lambda: _phase(double, "first") == "Inqueue", timeout=30.0)
    refused = ("second", "Warning", "InsufficientScalarQuota",
               "queue team-a: gpu requested 2, allocated 4, quota 5")  # fmt: skip
    wait_until(lambda: refused in _group_events(double), timeout=30.0)
    # The event and the status are separate writes: either may land first.
    wait_until(lambda: _phase(double, "second") == "Pending", timeout=30.0)
    assert double.bound() == {}
    # Only now, as Volcano's job controller does, the first Job's pods are created.
    for i in range(4):
        pod = pod_obj(f"first-w{i}", gpus=1)
        pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "first"}
        double.put(pod)
    wait_until(lambda: len(double.bound()) == 4, timeout=30.0)
    wait_until(lambda: _phase(double, "first") == "Running", timeout=30.0)
    assert _phase(double, "second") == "Pending"


def _group_events(api: KubeDouble) -> list[tuple[str, str, str, str]]:
    return [
        (e["involvedObject"]["name"], e["type"], e["reason"], e["message"])
        for e in api.objects("events")
        if e["involvedObject"]["kind"] == "PodGroup"
    ]
