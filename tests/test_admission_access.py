"""Who may do what through the webhook: each node's agent writes its own node's Device only
(issue: the agent's account could update every node's Device), and a Workspace's denial
shows the cluster's node groups only to those who may list Nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.admission.device_writer import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    DeviceWriters,
    pod_reader,
)
from kgpu.kube.admission.review import WorkspaceNodes, review
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.resource_types import PODS
from tests.kube_double import KubeDouble
from tests.test_webhook import DENIAL
from tests.test_webhook import review as review_of
from tests.workspace_fixtures import k8s_gpu_node, k8s_workspace

Obj = dict[str, Any]
AGENT = "system:serviceaccount:kgpu-system:kgpu-scheduler-agent"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeDouble, DeviceWriters]]:
    with KubeDouble() as double:
        for node in ("gpu-a", "gpu-b"):
            double.put(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"agent-{node}", "namespace": "kgpu-system"},
                    "spec": {"nodeName": node, "containers": [{"name": "agent"}]},
                }
            )
        client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
        pods = pod_reader(lambda ns, name: client.get(PODS, name, ns))
        try:
            yield double, DeviceWriters("kgpu-system", "kgpu-scheduler-agent", pods)
        finally:
            client.close()


def device_write(device: str, user: Obj, operation: str = "UPDATE") -> Obj:
    obj = {"apiVersion": "kgpu.io/v1alpha1", "kind": "Device", "metadata": {"name": device}}
    body = review_of(obj, operation, old=obj if operation != "CREATE" else None)
    body["request"]["userInfo"] = user
    return body


def agent_of(double: KubeDouble, node: str, uid: str = "") -> Obj:
    pod = double.get("pods", f"agent-{node}", "kgpu-system")
    assert pod is not None
    return {
        "username": AGENT,
        "groups": ["system:serviceaccounts", "system:authenticated"],
        "extra": {
            POD_NAME_EXTRA: [f"agent-{node}"],
            POD_UID_EXTRA: [uid or pod["metadata"]["uid"]],
        },
    }


def verdict(body: Obj, writers: DeviceWriters) -> tuple[bool, int, str]:
    response = review(body, "kgpu-scheduler", devices=writers)["response"]
    status = response.get("status", {})
    return response["allowed"], status.get("code", 200), status.get("message", "")


def test_an_agent_writes_its_own_nodes_device(cluster: tuple[KubeDouble, DeviceWriters]) -> None:
    double, writers = cluster
    for operation in ("CREATE", "UPDATE", "DELETE"):
        assert verdict(device_write("gpu-a", agent_of(double, "gpu-a"), operation), writers)[0]


def test_an_agent_may_not_write_another_nodes_device(
    cluster: tuple[KubeDouble, DeviceWriters],
) -> None:
    double, writers = cluster
    assert verdict(device_write("gpu-b", agent_of(double, "gpu-a")), writers) == (
        False,
        422,
        f"Device gpu-b: UPDATE by {AGENT}: pod kgpu-system/agent-gpu-a runs on node gpu-a, "
        "and an agent may write only the Device of its own node",
    )


def test_a_token_bound_to_no_pod_or_a_gone_pod_writes_nothing(
    cluster: tuple[KubeDouble, DeviceWriters],
) -> None:
    double, writers = cluster
    legacy = {"username": AGENT, "groups": ["system:serviceaccounts"]}
    allowed, code, message = verdict(device_write("gpu-a", legacy), writers)
    assert (allowed, code) == (False, 422)
    assert message == (
        f"Device gpu-a: UPDATE by {AGENT}: its token is bound to no pod ({POD_NAME_EXTRA} "
        "missing), so it says for no node; the agent must run with the install's projected token"
    )
    # a pod of the same name, but not the one the token was made for
    allowed, _, message = verdict(device_write("gpu-a", agent_of(double, "gpu-a", "old")), writers)
    assert not allowed
    assert message.endswith("pod kgpu-system/agent-gpu-a (uid old) no longer runs")
    double.remove("pods", "agent-gpu-a", "kgpu-system")
    user = {**legacy, "extra": {POD_NAME_EXTRA: ["agent-gpu-a"], POD_UID_EXTRA: ["x"]}}
    assert not verdict(device_write("gpu-a", user), writers)[0]


def test_other_writers_are_not_this_checks_business(
    cluster: tuple[KubeDouble, DeviceWriters],
) -> None:
    _, writers = cluster
    admin = {"username": "admin", "groups": ["system:masters"]}
    assert verdict(device_write("gpu-a", admin), writers) == (True, 200, "")


def test_an_unreadable_agent_pod_denies_for_now(
    cluster: tuple[KubeDouble, DeviceWriters],
) -> None:
    double, writers = cluster
    user = agent_of(double, "gpu-a")
    double.fail("GET", "/pods/agent-gpu-a", 500, times=None)
    allowed, code, message = verdict(device_write("gpu-a", user), writers)
    assert (allowed, code) == (False, 503)
    assert message.startswith("cannot read pod kgpu-system/agent-gpu-a: ")
    assert message.endswith("; try again")


# ---------------------------------------------------------------------------- Workspaces


class Nodes:
    def nodes(self) -> list[Obj]:
        return [
            k8s_gpu_node("a100-4-a", "A100", 4, 40960),
            k8s_gpu_node("a10-a", "A10", 1, 24576),
        ]


def test_node_groups_in_a_denial_only_for_those_who_may_list_nodes() -> None:
    def may_list_nodes(user: Any) -> bool:
        return "system:masters" in user.get("groups", ())

    nodes = WorkspaceNodes(Nodes(), may_list_nodes=may_list_nodes)
    body = review_of(k8s_workspace(replicas=3))
    admin = review(body, "kgpu-scheduler", nodes)["response"]["status"]["message"]
    assert admin.startswith(f"{DENIAL} {{A10, 1, 24576}} (1 node): NodeGroupSizeFilter")
    body["request"]["userInfo"] = {"username": "alice", "groups": ["team-a"]}
    tenant = review(body, "kgpu-scheduler", nodes)["response"]
    assert tenant["allowed"] is False
    assert tenant["status"]["message"] == (
        f"{DENIAL} Workspace default/ws: no node group of the cluster fits it; the groups "
        "and why each does not fit are shown only to users who may list nodes"
    )
    assert "A100" not in tenant["status"]["message"]
