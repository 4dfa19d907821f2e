"""End to end: seed 001's KAI examples, and KAI's own Queues, in a real kube-apiserver with
KAI's CRDs (tests/anchor_crds/kai.py), scheduled by ``kgpu run`` under KAI's scheduler name.

The pods are the seed's, as written, but for the node selector every e2e pod here carries
(several tests share the API server; their nodes are kept apart by it) and, for the second
of the two pods the seed names alike, its own namespace. KAI's Queues ``default`` and
``test`` are cluster-scoped, made for the test and deleted after.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import KAI_QUEUES, PODS
from tests.anchor_crds import install
from tests.anchor_crds.kai import CRDS
from tests.kube_objects import node_obj, wait_until
from tests.seed_kai import GPU_MEMORY, GPU_SHARING, QUEUES
from tests.test_e2e_kube import (  # noqa: F401
    NAMESPACES,
    TEST_LABEL,
    Cluster,
    _stop,
    client,
    cluster,
    kubeconfig,
)

pytestmark = pytest.mark.e2e


def _seed_pod(text: str, namespace: str, tag: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(text)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["nodeSelector"] = {TEST_LABEL: tag}
    return obj


def test_kais_examples_run_as_the_seed_says_under_kai_queues(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    install(client, CRDS)
    tag = cluster.scheduler
    other = f"{cluster.namespace}-b"
    client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    queues = list(yaml.safe_load_all(QUEUES))
    for queue in queues:
        client.create(KAI_QUEUES, queue)
    process = None
    try:
        cluster.add_nodes([node_obj(f"{tag}-n0", gpus=1)])
        memory = _seed_pod(GPU_MEMORY, cluster.namespace, tag)
        sharing = _seed_pod(GPU_SHARING, other, tag)
        client.create(PODS, memory, cluster.namespace)
        client.create(PODS, sharing, other)
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log, "--scheduler-name", "kai-scheduler")

        def pod(namespace: str, name: str = "gpu-sharing") -> dict[str, Any]:
            return client.get(PODS, name, namespace)

        def both_bound() -> bool:
            return all(pod(ns)["spec"].get("nodeName") for ns in (cluster.namespace, other))

        try:
            wait_until(both_bound, timeout=60)
        except AssertionError:
            raise AssertionError(log.read_text()[-3000:]) from None
        for namespace in (cluster.namespace, other):
            found = pod(namespace)
            assert found["spec"]["nodeName"] == f"{tag}-n0"
            # charged to KAI's Queue "test", the one the seed's label names
            assert found["metadata"]["annotations"]["kgpu.io/admitted-queue"] == "test"
        # The queue edited live: "test" may hold half a GPU; it holds 0.525 already, so a
        # third pod of half a GPU waits, with the queue's numbers.
        limited = {**queues[1]}
        limited["spec"]["resources"]["gpu"] = {"quota": 0, "limit": 0.5}
        current = client.get(KAI_QUEUES, "test")
        limited["metadata"] = {
            "name": "test",
            "resourceVersion": current["metadata"]["resourceVersion"],
        }
        client.request("PUT", KAI_QUEUES.path(name="test"), body=limited)
        third = _seed_pod(GPU_SHARING, cluster.namespace, tag)
        third["metadata"]["name"] = "third"
        client.create(PODS, third, cluster.namespace)
        wait_until(lambda: bool(cluster.events("FailedScheduling")), timeout=30)
        [failed] = cluster.events("FailedScheduling")
        assert failed["involvedObject"]["name"] == "third"
        assert failed["message"] == "queue test: gpu requested 0.5, allocated 0.525, quota 0.5"
        assert not pod(cluster.namespace, "third")["spec"].get("nodeName")
    finally:
        if process is not None:
            _stop(process)
        client.request("DELETE", PODS.path(other), query=[("gracePeriodSeconds", "0")], timeout=60)
        for name in ("test", "default"):
            with contextlib.suppress(KubeError):
                client.delete(KAI_QUEUES, name)
        with contextlib.suppress(KubeError):
            client.delete(NAMESPACES, other)
