"""End to end on a GPU node: ``kgpu agent`` reads this machine's GPUs through NVML into its
Device in a real kube-apiserver, and ``kgpu run`` writes a placed pod's allocation with the
GPU's real UUID.

Needs both the NVIDIA driver and a kube-apiserver (``KGPU_E2E_KUBECONFIG``); CI has the
server but no GPU, so there it says it is skipped (the one skip CI allows). The node is an
API object named after this test, with as many GPUs as NVML counts here.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent.inventory import discover
from kgpu.agent.nvml import NvmlProbe
from kgpu.agent.probe import ProbeError
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import DEVICES
from tests.kube_objects import node_obj, wait_until
from tests.test_e2e_kube import Cluster, _stop, client, cluster, kubeconfig  # noqa: F401
from tests.test_e2e_webhook import api, crds  # noqa: F401

# The kube-apiserver must be there under CI=true; the GPU is the one thing CI may lack.
pytestmark = [pytest.mark.e2e, pytest.mark.nvidia]


def test_the_agent_reports_this_machines_gpus_and_kgpu_run_places_on_them(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    crds: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    try:
        probe = NvmlProbe()
    except ProbeError as exc:
        pytest.skip(f"no NVIDIA driver on this machine ({exc}); run this on a GPU node")
    with probe:
        inventory = discover(probe)
    product = inventory.gpus[0].product.replace(" ", "-")
    node = f"{cluster.scheduler}-gpu"
    cluster.add_nodes(
        [
            node_obj(
                node,
                gpus=len(inventory.gpus),
                product=product,
                memory_mib=inventory.gpus[0].memory_mib,
            )
        ]
    )
    try:
        command = [sys.executable, "-P", "-m", "kgpu.cli", "agent", "--once", "--node", node]
        command += ["--kubeconfig", cluster.kubeconfig, "--no-kubelet-checkpoint"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        device: dict[str, Any] = client.get(DEVICES, node)
        assert [d["uuid"] for d in device["spec"]["devices"] if d["type"] == "gpu"] == [
            g.uuid for g in inventory.gpus
        ]
        assert device["metadata"]["ownerReferences"][0]["name"] == node
        (condition,) = device["status"]["conditions"]
        assert condition["status"] == "True", condition

        cluster.add_pods([cluster.pod("on-a-real-gpu", gpus=1)])
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            wait_until(lambda: "on-a-real-gpu" in cluster.bound(), timeout=60)
        finally:
            _stop(process)
        pod = cluster.pods()["on-a-real-gpu"]
        allocation = json.loads(pod["metadata"]["annotations"]["kgpu.io/device-allocation"])
        [gpu] = allocation["gpu"]
        placed = next(g for g in inventory.gpus if g.minor == gpu["minor"])
        assert gpu["uuid"] == placed.uuid
        assert pod["metadata"]["annotations"]["kgpu.io/visible-devices"] == str(placed.minor)
    finally:
        with contextlib.suppress(KubeError):
            client.delete(DEVICES, node)
