"""End to end: ``kgpu run`` against a real kube-apiserver with Volcano's objects.

Volcano's CRDs are the structural ones written for the tests (tests/anchor_crds/volcano.py),
created if missing and left installed (other runs may use them). The capacity-card seed's
Queue and Job are applied as the seed writes them; no Volcano controller runs here, so the
test does what Volcano's job controller would with the Job it read back (its PodGroup and
pods, by kgpu/kube/anchors/volcano_job.py), with the pods' schedulerName kgpu's, as a team
switching sets it, and in its order: the PodGroup first, the pods only once kgpu has
written the PodGroup ``Inqueue``. The Queue's name is the seed's (``team-a``): cluster-scoped, deleted
after; the rest lives in the test's namespace.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.anchors.volcano import VOLCANO_PODGROUPS, VOLCANO_QUEUES
from kgpu.kube.anchors.volcano_job import expand_job
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import NAMESPACES, Resource
from kgpu.kube.explain.explanation import explain_live
from tests import volcano_seed as seed
from tests.anchor_crds import install
from tests.anchor_crds.volcano import volcano_crds
from tests.kube_objects import node_obj, wait_until
from tests.test_e2e_kube import TEST_LABEL, Cluster, _stop, client, cluster, kubeconfig  # noqa: F401

pytestmark = pytest.mark.e2e

JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job", namespaced=True)


@pytest.fixture(scope="module")
def volcano(client: KubeClient) -> None:  # noqa: F811
    install(client, volcano_crds())
    # kgpu reads Volcano's PodGroups in every namespace, and an Inqueue one holds its
    # minimum in its queue (the seed's team-a, which every run uses). No namespace
    # controller runs beside this API server, so the PodGroups of earlier runs' namespaces
    # stay, Terminating, for good: they are deleted here, as that controller would.
    ending = {
        n["metadata"]["name"]
        for n in client.list(NAMESPACES).items
        if n.get("status", {}).get("phase") == "Terminating"
    }
    for group in client.list(VOLCANO_PODGROUPS).items:
        m = group["metadata"]
        if m["namespace"] in ending:
            with contextlib.suppress(KubeError):
                client.delete(VOLCANO_PODGROUPS, m["name"], m["namespace"])


def _as_volcanos_controller(cluster: Cluster, jobs: list[dict[str, Any]]) -> list[str]:  # noqa: F811
    """What Volcano's job controller does with ``jobs`` (as the API server returned them):
    each Job's PodGroup first; the pods only once the scheduler has written the PodGroup
    ``Inqueue`` (Volcano's syncJob waits for a phase set and not Pending). The PodGroups'
    names."""
    made = [expand_job(job, scheduler_name=cluster.scheduler) for job in jobs]
    names = []
    for group, _ in made:
        cluster.client.create(VOLCANO_PODGROUPS, group, cluster.namespace)
        names.append(str(group["metadata"]["name"]))
    wait_until(lambda: all(_phase(cluster, n) == "Inqueue" for n in names), timeout=60)
    for _, pods in made:
        for pod in pods:
            pod["spec"]["schedulerName"] = cluster.scheduler  # what a switching team sets
            pod["spec"]["nodeSelector"] = {TEST_LABEL: cluster.scheduler}
            for i, container in enumerate(pod["spec"]["containers"]):
                # The seed leaves these out of its examples; a pod needs them.
                container.setdefault("image", "busybox")
                container.setdefault("name", f"c{i}")
        cluster.add_pods(pods)
    return names


def _phase(cluster: Cluster, name: str) -> str:  # noqa: F811
    found = cluster.client.get(VOLCANO_PODGROUPS, name, cluster.namespace)
    return str(found.get("status", {}).get("phase") or "")


def test_the_seeds_card_quota_of_five_holds_at_five_and_a_missing_podgroup_is_said(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    volcano: None,
    tmp_path: Path,
) -> None:
    tag = cluster.scheduler
    cluster.add_nodes([node_obj(f"{tag}-a{i}", gpus=4, product=seed.A100) for i in range(2)])
    client.create(VOLCANO_QUEUES, seed.load(seed.EXAMPLE_1_QUEUE))
    try:
        job = client.create(JOBS, seed.load(seed.with_replicas(seed.EXAMPLE_1_JOB, 6)),
                            cluster.namespace)  # fmt: skip
        orphan = cluster.pod("orphan", gpus=1,
                             annotations={"scheduling.k8s.io/group-name": "ghost"})  # fmt: skip
        cluster.add_pods([orphan])
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            try:
                [group] = _as_volcanos_controller(cluster, [job])
            except AssertionError:
                raise AssertionError(log.read_text()[-3000:]) from None
            assert group == f"training-{job['metadata']['uid']}"
            try:
                wait_until(lambda: len(cluster.bound()) == 5, timeout=60)
            except AssertionError:
                raise AssertionError(f"{cluster.bound()}\n{log.read_text()[-3000:]}") from None
            quota = seed.A100 + " requested 1, allocated 5, quota 5"
            wait_until(lambda: bool(cluster.events("InsufficientScalarQuota")), timeout=30)
            [refused] = cluster.events("InsufficientScalarQuota")
            assert refused["message"] == f"queue team-a: {quota}"
            waiting = refused["involvedObject"]["name"]
            assert waiting.startswith("training-default0-") and waiting not in cluster.bound()
            assert set(cluster.bound().values()) <= {f"{tag}-a0", f"{tag}-a1"}
            # The Volcano PodGroup's phase, as Volcano's scheduler reports it.
            wait_until(lambda: _phase(cluster, group) == "Running", timeout=30)
            # A pod naming a PodGroup that does not exist: an event, and explain agrees.
            missing = f"PodGroup {cluster.namespace}/ghost does not exist"

            def said() -> list[str]:
                return [
                    e["message"]
                    for e in cluster.events("FailedScheduling")
                    if e["involvedObject"]["name"] == "orphan"
                ]

            wait_until(lambda: missing in said(), timeout=30)
            answer = explain_live("orphan", cluster.namespace, cluster.kubeconfig, tag)
            assert answer.summary == f"Pod {cluster.namespace}/orphan is pending: {missing}"
            answer = explain_live(waiting, cluster.namespace, cluster.kubeconfig, tag)
            assert answer.summary == (
                f"Pod {cluster.namespace}/{waiting} is pending: queue team-a: {quota}"
            )
        finally:
            _stop(process)
        assert process.returncode == 0, log.read_text()
    finally:
        with contextlib.suppress(KubeError):
            client.delete(VOLCANO_QUEUES, "team-a")


def test_the_seeds_multi_card_and_mps_examples(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    volcano: None,
    tmp_path: Path,
) -> None:
    """Example 2: A100|H100 with A100 quota to spare: all four on A100 (one card type per
    job). Example 3: 16 pods of one MPS replica each on a node of 4 A100 × 8 replicas."""
    tag = cluster.scheduler
    mps = node_obj(f"{tag}-mps", gpus=4, product=seed.A100, labels=seed.EXAMPLE_3_NODE_LABELS)
    mps["status"]["allocatable"].update(seed.EXAMPLE_3_ALLOCATABLE)
    mps["status"]["allocatable"].pop("nvidia.com/gpu")
    mps["status"]["capacity"] = mps["status"]["allocatable"]
    cluster.add_nodes(
        [
            node_obj(f"{tag}-a100", gpus=4, product=seed.A100),
            node_obj(f"{tag}-h100", gpus=4, product=seed.H100),
            mps,
        ]
    )
    queues = [seed.load(seed.EXAMPLE_1_QUEUE), seed.load(seed.EXAMPLE_3_QUEUE)]
    for queue in queues:
        client.create(VOLCANO_QUEUES, queue)
    try:
        jobs = [
            client.create(JOBS, seed.load(text), cluster.namespace)
            for text in (seed.EXAMPLE_2_JOB, seed.EXAMPLE_3_JOB)
        ]
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            try:
                _as_volcanos_controller(cluster, jobs)
                wait_until(lambda: len(cluster.bound()) == 20, timeout=90)
            except AssertionError:
                raise AssertionError(f"{cluster.bound()}\n{log.read_text()[-3000:]}") from None
            bound = cluster.bound()
            flexible = {n for p, n in bound.items() if p.startswith("flexible-training-")}
            inference = {n for p, n in bound.items() if p.startswith("inference-")}
            assert flexible == {f"{tag}-a100"}
            assert inference == {f"{tag}-mps"}
        finally:
            _stop(process)
        assert process.returncode == 0, log.read_text()
    finally:
        for queue in queues:
            with contextlib.suppress(KubeError):
                client.delete(VOLCANO_QUEUES, queue["metadata"]["name"])
