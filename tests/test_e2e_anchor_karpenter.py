"""End to end: a Karpenter NodePool created on a real kube-apiserver (with Karpenter's CRDs,
tests/anchor_crds/karpenter.py) is planned with by ``kgpu run --autoscale`` without a restart.

The NodePool is seed 003's, named for the test and labelling its nodes with the test's node
label, so that this test's pod, kept to its nodes as every e2e pod here is, can only be
helped by it. It is created once the scheduler runs; a trigger pod then asks Karpenter for a
node of it, and a malformed NodePool beside it is refused alone.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.kube.anchors.karpenter import NODEPOOLS
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import PODS
from kgpu.kube.scaling.trigger_pods import POOL_LABEL
from tests.anchor_crds import install
from tests.anchor_crds.karpenter import CRDS
from tests.kube_objects import wait_until
from tests.seed_karpenter import NODEPOOL
from tests.test_e2e_kube import TEST_LABEL, Cluster, _stop, client, cluster, kubeconfig  # noqa: F401

pytestmark = pytest.mark.e2e


def test_a_nodepool_created_live_is_planned_with_without_a_restart(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    tmp_path: Path,
) -> None:
    install(client, CRDS)
    tag = cluster.scheduler
    pool: dict[str, Any] = yaml.safe_load(NODEPOOL)
    pool["metadata"]["name"] = f"{tag}-gpu-a100-pool"
    pool["spec"]["template"]["metadata"]["labels"][TEST_LABEL] = tag
    broken: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": f"{tag}-broken"},
        "spec": {"template": {"spec": {"requirements": []}}},
    }
    waiting = cluster.pod("waiting", gpus=1)
    waiting["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    log = tmp_path / "kgpu-run.log"
    process = cluster.run(log, "--autoscale", "--trigger-namespace", cluster.namespace)

    def triggers() -> list[dict[str, Any]]:
        return [
            p
            for p in client.list(PODS, namespace=cluster.namespace).items
            if p["metadata"].get("labels", {}).get(POOL_LABEL) == pool["metadata"]["name"]
        ]

    try:
        # The scheduler runs, its caches listed, before the NodePool exists.
        wait_until(lambda: "started; metrics on port" in log.read_text(), timeout=60)
        client.create(NODEPOOLS, broken)
        client.create(NODEPOOLS, pool)
        cluster.add_pods([waiting])
        try:
            wait_until(lambda: bool(triggers()), timeout=60)
        except AssertionError:
            raise AssertionError(log.read_text()[-3000:]) from None
        [trigger] = triggers()
        assert trigger["spec"]["nodeSelector"]["karpenter.sh/nodepool"] == pool["metadata"]["name"]
        wait_until(lambda: bool(cluster.events("TriggeredScaleUp")), timeout=30)
        # the malformed NodePool is refused alone, with why
        assert (
            f"NodePool {tag}-broken: spec.template.spec.requirements has no "
            "node.kubernetes.io/instance-type In [...]"
        ) in log.read_text()
    finally:
        _stop(process)
        for name in (pool["metadata"]["name"], broken["metadata"]["name"]):
            with contextlib.suppress(KubeError):
                client.delete(NODEPOOLS, name)
