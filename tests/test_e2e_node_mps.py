"""End to end on a real node whose GPUs are shared through MPS: for the test, the node's
device plugin is swapped for one that advertises two GPUs four replicas each as NVIDIA's
does under MPS (``nvidia.com/gpu.shared``, ids ``<uuid>::<k>``, ``Allocate`` names the GPU
by UUID: tests/mps_device_plugin.py), and the node is labelled as GPU Feature Discovery
labels such a node (``nvidia.com/gpu.replicas``, ``nvidia.com/gpu.count``).

For every MPS pod kgpu binds: the kubelet picks its replica, and kgpu's books follow the
kubelet (the agent publishes which replica each pod holds; a pod whose replica is on another
GPU than its annotation names gets its annotation corrected), so its container sees exactly
the GPU its annotation names, and no GPU holds more pods than it has replicas. A pod that
would not fit waits with kgpu's reason instead of being bound and refused by the kubelet;
the same after kgpu is killed and started again. After the test the node's own plugin and
labels are put back. See tests/test_e2e_node.py for the node and its fixtures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.resource_types import NODES
from tests.inputs import E2eNode
from tests.kube_objects import allocation_of, wait_until
from tests.test_e2e_kube import _stop, client, kubeconfig  # noqa: F401
from tests.test_e2e_node import (  # noqa: F401
    GPU,
    GPUS,
    NodeWorkspace,
    _device,
    _holders,
    kgpu_agent,
    kgpu_run,
    real_node,
    workspace,
)
from tests.test_e2e_node_mig import plugin_runtime, waits
from tests.test_e2e_node_shares import SHARES, pod, running, serving
from tests.test_e2e_webhook import api, crds  # noqa: F401

pytestmark = pytest.mark.e2e

MPS = "nvidia.com/gpu.shared"
MPS_GPUS, REPLICAS = 2, 4
MPS_LABELS = {
    "nvidia.com/gpu.count": str(MPS_GPUS),
    "nvidia.com/gpu.replicas": str(REPLICAS),
    "nvidia.com/gpu.sharing-strategy": "mps",
}
PLUGIN = Path(__file__).with_name("mps_device_plugin.py")


def _allocatable(api_client: KubeClient, node: str, resource: str) -> str:
    return str(api_client.get(NODES, node)["status"].get("allocatable", {}).get(resource, ""))


def _start_node_plugin(python: Path, gen: Path, root: Path) -> None:
    """kube-node's own plugin, started as start.sh starts it (its pid where stop.sh finds
    it), so the rest of the suite finds the node as .ci/run made it."""
    command = [str(python), str(Path(os.environ["KGPU_E2E_NODE_TOOLS"]) / "fake_device_plugin.py")]
    command += ["--gen", str(gen), "--registry-dir", str(root / "kubelet" / "plugins_registry")]
    command += ["--count", str(GPUS), "--resource", GPU]
    # Detached as start.sh detaches it (nohup, in the background of a shell that exits):
    # it outlives this test, and stop.sh stops it.
    log = root / "log" / "fake-device-plugin.log"
    shell = 'nohup "$@" >> "$0" 2>&1 & echo $!'
    started = subprocess.run(
        ["sh", "-c", shell, str(log), *command], capture_output=True, text=True, check=True
    )
    (root / "run" / "fake-device-plugin.pid").write_text(started.stdout)


@pytest.fixture
def mps_node(client: KubeClient, real_node: E2eNode) -> Iterator[None]:  # noqa: F811
    """The node's whole GPUs gone, its two MPS GPUs advertised and labelled; put back after."""
    python, gen = plugin_runtime(real_node)
    root = real_node.pod_resources_socket.parents[2]  # KNODE_DIR
    registry = root / "kubelet" / "plugins_registry"
    pid_file = root / "run" / "fake-device-plugin.pid"
    labels = client.get(NODES, real_node.name)["metadata"]["labels"]
    before = {key: labels.get(key) for key in MPS_LABELS}
    with contextlib.suppress(ProcessLookupError, ValueError, OSError):
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    with contextlib.suppress(OSError):
        (registry / f"{GPU.replace('/', '_')}.sock").unlink()
    command = [str(python), str(PLUGIN), "--gen", str(gen), "--registry-dir", str(registry)]
    command += ["--gpus", str(MPS_GPUS), "--replicas", str(REPLICAS)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client.patch(NODES, real_node.name, {"metadata": {"labels": MPS_LABELS}})
        wait_until(lambda: _allocatable(client, real_node.name, GPU) == "0", timeout=60)
        want = str(MPS_GPUS * REPLICAS)
        wait_until(lambda: _allocatable(client, real_node.name, MPS) == want, timeout=60)
        yield
    finally:
        _stop(process, signal.SIGTERM)
        with contextlib.suppress(OSError):
            (registry / f"{MPS.replace('/', '_')}.sock").unlink()
        client.patch(NODES, real_node.name, {"metadata": {"labels": before}})
        _start_node_plugin(python, gen, root)
        wait_until(lambda: _allocatable(client, real_node.name, GPU) == str(GPUS), timeout=60)


def mps_pod(ws: NodeWorkspace, name: str) -> dict[str, Any]:
    return pod(ws, name, limits={MPS: "1"})


def _uuids(ws: NodeWorkspace) -> dict[int, str]:
    """The GPUs the agent publishes, by minor: each MPS GPU once, not once per replica."""
    from kgpu.kube.objects.device_cr import devices_from_k8s

    def published() -> bool:
        device = _device(ws)
        return bool(device) and len(devices_from_k8s(device).gpus) == MPS_GPUS

    wait_until(published, timeout=60, every=0.5)
    return {g.minor: g.uuid for g in devices_from_k8s(_device(ws)).gpus}


def check(ws: NodeWorkspace, uuids: dict[int, str], names: set[str]) -> None:
    """Every pod's annotation names one GPU, the one its container sees and whose replica
    the kubelet gave it (kgpu corrects annotations until they agree); no GPU holds more
    pods than it has replicas; no replica is given twice."""
    seen = {name: ws.visible(name) for name in names}

    def agree() -> bool:
        pods = ws.pods()
        held = _holders(ws, MPS)
        return all(
            [uuids[m] for m in allocation_of(pods[n])[1]] == seen[n]
            and [r.split("::")[0] for r in held.get(n, [])] == seen[n]
            for n in names
        )

    try:
        wait_until(agree, timeout=60, every=1.0)
    except AssertionError:
        told = {n: (allocation_of(p)[1], seen.get(n)) for n, p in ws.pods().items()}
        raise AssertionError(
            f"annotated minors vs seen: {told}; held {_holders(ws, MPS)}"
        ) from None
    pods = ws.pods()
    for name in names:
        assert allocation_of(pods[name])[2] == 1000 // REPLICAS, name
    per_gpu = [gpu for name in names for gpu in seen[name]]
    assert all(per_gpu.count(gpu) <= REPLICAS for gpu in uuids.values()), seen
    replicas = [r for n, held in _holders(ws, MPS).items() if n in names for r in held]
    assert len(replicas) == len(set(replicas)) == len(names), replicas


# What kgpu says of an MPS pod no GPU has a free replica for.
NO_REPLICA = "no single GPU with enough free share"


def test_mps_pods_see_the_gpu_of_their_replica_and_no_gpu_holds_more_than_its_replicas(
    mps_node: None,  # first: it goes last, after the workspace's pods are gone
    workspace: NodeWorkspace,  # noqa: F811
    tmp_path: Path,
) -> None:
    ws = workspace
    with kgpu_agent(ws, tmp_path), kgpu_run(ws, tmp_path, *SHARES) as kgpu:
        uuids = _uuids(ws)
        assert sorted(uuids.values()) == [f"GPU-mps-{g}" for g in range(MPS_GPUS)]
        serving(ws)  # device-plugin pods lose the NVIDIA_VISIBLE_DEVICES they set
        names = {f"mps-{i}" for i in range(MPS_GPUS * REPLICAS)}  # every replica
        ws.add(*(mps_pod(ws, name) for name in sorted(names)))
        running(ws, kgpu.log, names)
        check(ws, uuids, names)
        ws.add(mps_pod(ws, "late-a"))
        waits(ws, "late-a", NO_REPLICA)

        # kgpu killed outright and started again: its books count the replicas held.
        kgpu.kill_and_restart()
        serving(ws)
        ws.add(mps_pod(ws, "late-b"))
        waits(ws, "late-b", NO_REPLICA)
        assert "nodeName" not in ws.pods()["late-a"]["spec"]

        # Two replicas freed: the two waiting pods get them, none given twice.
        for name in ("mps-0", "mps-1"):
            ws.delete(name)
            names.discard(name)
        names |= {"late-a", "late-b"}
        running(ws, kgpu.log, names)
        check(ws, uuids, names)
