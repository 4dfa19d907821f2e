"""End to end: a Koordinator cluster's objects, as the seed writes them, scheduled by
``kgpu run`` against a real kube-apiserver, and by ``kgpu simulate manifests`` alike.

Nodes advertise only Koordinator's resources (their status patched as koordlet would,
through the status subresource); one has the seed's ``scheduling.koordinator.sh`` Device,
applied through a structural CRD written for the tests (tests/anchor_crds/koordinator.py:
created if missing and left installed, as test_e2e_queues leaves kgpu's). The pods carry
the seed's five requests, created one at a time, each bound before the next is made, so
that each is placed as ``kgpu simulate manifests`` places them, one after another.
"""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.kube.anchors.koordinator import (
    DEVICE_ALLOCATED_ANNOTATION,
    KOORDINATOR_DEVICES,
    device_allocated,
)
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import NODES
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION
from kgpu.sim.manifests import simulate_manifests
from tests import koordinator_seed as seed
from tests.anchor_crds import install
from tests.anchor_crds.koordinator import device_crd
from tests.kube_objects import wait_until
from tests.test_e2e_kube import TEST_LABEL, Cluster, _stop, client, cluster, kubeconfig  # noqa: F401

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def koordinator_crd(client: KubeClient) -> None:  # noqa: F811
    install(client, [device_crd()])


def test_the_seeds_requests_and_device_live_and_simulated(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    koordinator_crd: None,
    tmp_path: Path,
) -> None:
    tag = cluster.scheduler
    node_a, node_1 = f"{tag}-node-a", f"{tag}-node-1"
    nodes = [seed.node_a(node_a), seed.node_1(node_1)]
    for node in nodes:
        node["metadata"]["labels"][TEST_LABEL] = tag
    device = seed.device(node_1)
    pods = [seed.pod(kind, kind, cluster.namespace, tag) for kind in seed.REQUESTS]
    for pod in pods:
        pod["spec"]["nodeSelector"] = {TEST_LABEL: tag}
    # What `kgpu simulate manifests` makes of the very same objects.
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "cluster.yaml").write_text(yaml.safe_dump_all([*nodes, device, *pods]))
    simulated = {
        r.pod.split("/")[1]: (r.node, r.gpus, r.gpu_milli, r.device_allocated)
        for r in simulate_manifests(folder).results
    }
    # The seed's "32GB" is no quantity: the API server refuses it as koordlet's status.
    status = {"status": {"allocatable": seed.seed_status("32GB")["allocatable"]}}
    cluster.add_nodes(copy.deepcopy(nodes))
    with pytest.raises(KubeError, match="quantities must match the regular expression"):
        client.patch(NODES, node_a, status, subresource="status")
    client.create(KOORDINATOR_DEVICES, device)
    log = tmp_path / "kgpu-run.log"
    process = cluster.run(log)
    try:
        for pod in pods:
            name: str = pod["metadata"]["name"]
            cluster.add_pods([pod])

            def bound(name: str = name) -> bool:
                return name in cluster.bound()

            try:
                wait_until(bound, timeout=60)
            except AssertionError:
                raise AssertionError(
                    f"{name}: {cluster.bound()}\n{log.read_text()[-3000:]}"
                ) from None
        live = cluster.pods()
    finally:
        _stop(process)
        with contextlib.suppress(KubeError):
            client.delete(KOORDINATOR_DEVICES, node_1)
    placed: dict[str, Any] = {}
    for name, obj in live.items():
        notes = obj["metadata"].get("annotations", {})
        record = json.loads(notes[ALLOCATION_ANNOTATION])
        gpus = tuple(e["minor"] for e in record.get("gpu", []))
        milli = record["gpu"][0]["resources"]["kgpu.io/gpu-milli"] if gpus else 0
        placed[name] = (
            obj["spec"]["nodeName"],
            gpus,
            milli,
            notes.get(DEVICE_ALLOCATED_ANNOTATION, ""),
        )
        # Koordinator's record says what kgpu's says.
        if name != "compatible":
            assert placed[name][3] == device_allocated(notes[ALLOCATION_ANNOTATION])
    nodes_of = {node_a: "node-a", node_1: "node-1"}
    check_seed_behaviour({n: (nodes_of[p[0]], *p[1:]) for n, p in placed.items()})
    check_seed_behaviour({n: (p[0].removeprefix(f"{tag}-"), *p[1:]) for n, p in simulated.items()})
    # The Device's id is the GPU's UUID in kgpu's own record.
    on_node_1 = [
        json.loads(p["metadata"]["annotations"][ALLOCATION_ANNOTATION])
        for p in live.values()
        if p["spec"]["nodeName"] == node_1
    ]
    uuids = {e["minor"]: e.get("uuid") for r in on_node_1 for e in r.get("gpu", [])}
    assert uuids and uuids.items() <= {0: UUID0, 1: UUID1}.items()
    assert process.returncode == 0, log.read_text()


UUID0 = "GPU-98583a5c-c155-9cf6-f955-03c189d3dbfb"
UUID1 = "GPU-7f6410b9-bdf7-f9a5-de09-aa5ec31a7124"
K = "koordinator.sh/"
# What Koordinator's record says of each seed request, by the node it landed on (node-a's
# GPUs have 8Gi, node-1's 15472384Ki, 15109Mi): (gpu-core, gpu-memory, gpu-memory-ratio).
SHARES = {
    ("half", "node-a"): ("50", "4Gi", "50"),
    ("half", "node-1"): ("50", "7554Mi", "50"),
    ("core-ratio", "node-a"): ("50", "4915Mi", "59"),  # 60% held as 4915Mi of 8192Mi
    ("core-ratio", "node-1"): ("50", "9065Mi", "59"),
    ("core-memory", "node-a"): ("60", "4Gi", "50"),
    ("core-memory", "node-1"): ("60", "4Gi", "27"),
}


def check_seed_behaviour(placed: dict[str, tuple[str, tuple[int, ...], int, str]]) -> None:
    """Each of the seed's requests placed as the seed says, whichever node and GPUs the
    policy chose: ``placed`` maps pods to (node, GPU minors, milli per GPU, the
    device-allocated annotation)."""
    assert set(placed) == set(seed.REQUESTS)
    node, gpus, milli, record = placed["compatible"]
    assert (len(gpus), milli, record) == (2, 1000, "")  # two whole GPUs; NVIDIA's names
    assert placed["rdma"] == (
        "node-a",
        (),
        0,
        '{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"100"}}]}',
    )
    for name, milli in (("half", 500), ("core-ratio", 500), ("core-memory", 600)):
        node, gpus, held, record = placed[name]
        core, memory, ratio = SHARES[name, node]
        assert (len(gpus), held) == (1, milli), name
        assert json.loads(record) == {
            "gpu": [
                {
                    "minor": gpus[0],
                    "resources": {
                        K + "gpu-core": core,
                        K + "gpu-memory": memory,
                        K + "gpu-memory-ratio": ratio,
                    },
                }
            ]
        }, name
