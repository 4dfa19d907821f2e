"""End to end: ``kgpu run`` with a Queue and a gang PodGroup in a real kube-apiserver.

The CRDs of ``kgpu manifests --crds-only`` are created if missing (and left installed: other
tests and users of the same API server may rely on them). The test's Queue has a unique name
and is deleted after; everything else lives in the test's namespace (see test_e2e_kube).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import PODGROUPS, QUEUES, Resource
from kgpu.kube.install.crds import custom_resource_definitions
from tests.anchor_crds import install
from tests.kube_objects import node_obj, wait_until
from tests.test_e2e_kube import Cluster, _stop, client, cluster, kubeconfig  # noqa: F401

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def crds(client: KubeClient) -> None:  # noqa: F811
    install(client, custom_resource_definitions())


def _status(client: KubeClient, resource: Resource, name: str, ns: str | None = None) -> Any:  # noqa: F811
    try:
        return client.get(resource, name, ns).get("status") or {}
    except KubeError:
        return {}


def test_kgpu_run_places_a_gang_and_holds_a_queue_to_its_limit(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    crds: None,
    tmp_path: Path,
) -> None:
    tag = cluster.scheduler
    queue = f"{tag}-q"
    cluster.add_nodes([node_obj(f"{tag}-n{i}", gpus=2) for i in range(2)])
    client.create(
        QUEUES,
        {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"deserved": {"gpu": 2}, "limit": {"gpu": 3}},
        },
    )
    try:
        client.create(
            PODGROUPS,
            {
                "apiVersion": "kgpu.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "train"},
                "spec": {"minMember": 3, "queue": queue},
            },
            cluster.namespace,
        )
        group = {"scheduling.k8s.io/group-name": "train"}
        members = [cluster.pod(f"w{i}", gpus=1, annotations=group) for i in range(3)]
        over = cluster.pod("over", gpus=1)
        over["metadata"]["labels"] = {"kgpu.io/queue": queue}
        cluster.add_pods(members)
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            try:
                wait_until(lambda: set(cluster.bound()) == {"w0", "w1", "w2"}, timeout=60)
            except AssertionError:
                raise AssertionError(f"{cluster.bound()}\n{log.read_text()[-3000:]}") from None
            cluster.add_pods([over])

            def group_status() -> Any:
                return _status(client, PODGROUPS, "train", cluster.namespace)

            wait_until(lambda: group_status().get("phase") == "Running", timeout=30)
            found = group_status()
            assert found["scheduled"] == 3
            scheduled = next(c for c in found["conditions"] if c["type"] == "Scheduled")
            assert (scheduled["status"], scheduled["message"]) == ("True", "3 of 3 pods scheduled")
            wait_until(lambda: bool(cluster.events("FailedScheduling")), timeout=30)
            [failed] = cluster.events("FailedScheduling")
            assert failed["involvedObject"]["name"] == "over"
            assert failed["message"] == f"queue {queue}: gpu requested 1, allocated 3, quota 3"
            assert "over" not in cluster.bound()
            wait_until(
                lambda: _status(client, QUEUES, queue).get("allocated", {}).get("gpu") == "3",
                timeout=30,
            )
            status = _status(client, QUEUES, queue)
            assert status["deserved"]["gpu"] == "2"
            valid = next(c for c in status["conditions"] if c["type"] == "Valid")
            assert valid["status"] == "True"
        finally:
            _stop(process)
        assert process.returncode == 0, log.read_text()
    finally:
        with contextlib.suppress(KubeError):
            client.delete(QUEUES, queue)
