"""End to end: ``kgpu run`` ranks a PodGroup by the PriorityClass it names, in a real
kube-apiserver, and warns on the PodGroup that names one that does not exist.

The test's PriorityClass has a unique name and is deleted after; everything else lives in the
test's namespace (see test_e2e_kube). The CRDs are installed as test_e2e_queues does.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import PODGROUPS, PRIORITY_CLASSES
from tests.kube_objects import node_obj, wait_until
from tests.test_e2e_kube import Cluster, _stop, client, cluster, kubeconfig  # noqa: F401
from tests.test_e2e_queues import crds  # noqa: F401

pytestmark = pytest.mark.e2e


def _podgroup(name: str, priority_class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 1, "priorityClassName": priority_class_name},
    }


def test_kgpu_run_places_the_podgroup_whose_priority_class_ranks_higher_first(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    crds: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    tag = cluster.scheduler
    high, missing = f"{tag}-high", f"{tag}-missing"
    cluster.add_nodes([node_obj(f"{tag}-n0", gpus=1)])
    client.create(
        PRIORITY_CLASSES,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": high},
            "value": 1000,
        },
    )
    try:
        # "a-steady" names a class that does not exist: it keeps its pod's priority (0, as
        # "b-urgent"'s pod), would go first at equal priority (created first, named first),
        # and gets a Warning. "b-urgent"'s class ranks it above.
        client.create(PODGROUPS, _podgroup("a-steady", missing), cluster.namespace)
        client.create(PODGROUPS, _podgroup("b-urgent", high), cluster.namespace)
        pods = [
            cluster.pod("steady", gpus=1, annotations={"scheduling.k8s.io/group-name": "a-steady"}),
            cluster.pod("urgent", gpus=1, annotations={"scheduling.k8s.io/group-name": "b-urgent"}),
        ]
        cluster.add_pods(pods)
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            try:
                wait_until(lambda: cluster.bound() == {"urgent": f"{tag}-n0"}, timeout=60)
                wait_until(lambda: bool(cluster.events("InvalidPriorityClassName")), timeout=30)
            except AssertionError:
                raise AssertionError(f"{cluster.bound()}\n{log.read_text()[-3000:]}") from None
            [warning] = cluster.events("InvalidPriorityClassName")
            assert (warning["type"], warning["involvedObject"]["kind"]) == ("Warning", "PodGroup")
            assert warning["involvedObject"]["name"] == "a-steady"
            assert warning["message"] == (
                f"PodGroup {cluster.namespace}/a-steady: spec.priorityClassName is "
                f'"{missing}", expected the name of an existing PriorityClass; the job takes '
                "its pods' highest priority until it is fixed"
            )
            assert cluster.events("Preempted") == []  # placed first, not by eviction
            assert "steady" in cluster.pods() and "steady" not in cluster.bound()
        finally:
            _stop(process)
        assert process.returncode == 0, log.read_text()
    finally:
        with contextlib.suppress(KubeError):
            client.delete(PRIORITY_CLASSES, high)
