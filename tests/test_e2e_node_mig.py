"""End to end on a real node with MIG instances: a fifth GPU of the test node split into seven
``1g.10gb`` instances, which a second device plugin advertises as NVIDIA's does under the
"mixed" strategy (``nvidia.com/mig-1g.10gb``, ids ``MIG-…``), beside the four whole GPUs.

For every MIG pod kgpu binds: its container sees exactly the instances the kubelet gave it
(``NVIDIA_VISIBLE_DEVICES``, whatever the pod sets), as many as it asked, none seen by another
pod; kgpu's books count what the kubelet hands out, so a pod that would not fit waits with
kgpu's reason instead of being bound and refused by the kubelet; the same after kgpu is
killed and started again. See tests/test_e2e_node.py for the node and its fixtures.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.resource_types import NODES
from tests.inputs import E2eNode, require_input
from tests.kube_objects import SCHEDULER, wait_until
from tests.test_e2e_kube import _stop, client, kubeconfig  # noqa: F401
from tests.test_e2e_node import (  # noqa: F401
    NodeWorkspace,
    _holders,
    _published_gpus,
    kgpu_agent,
    kgpu_run,
    real_node,
    workspace,
)
from tests.test_e2e_node_shares import SHARES, pod, running, serving
from tests.test_e2e_webhook import api, crds  # noqa: F401

pytestmark = pytest.mark.e2e

PROFILE = "1g.10gb"
MIG = f"nvidia.com/mig-{PROFILE}"
INSTANCES = 7  # an A100 80GB splits into seven 1g.10gb instances
ID_PREFIX = "MIG-fake-gpu-4-"


def plugin_runtime(node: E2eNode) -> tuple[Path, Path]:
    """kube-node's Python (with grpcio) and the device-plugin API stubs its build made."""
    cache = Path(os.environ.get("KNODE_CACHE", "/var/cache/kube-node"))
    python, gen = cache / "venv" / "bin" / "python", cache / "gen"
    if not python.exists() or not gen.is_dir():
        require_input(
            f"kube-node's device plugin runtime ({python}, {gen})",
            f"build it: bash {node.tools}/build.sh",
        )
    return python, gen


@pytest.fixture
def mig_plugin(client: KubeClient, real_node: E2eNode) -> Iterator[None]:  # noqa: F811
    """kube-node's fake device plugin, a second one, advertising the MIG instances; stopped
    after the test (the kubelet then lists them as unhealthy: none allocatable)."""
    python, gen = plugin_runtime(real_node)
    registry = real_node.pod_resources_socket.parents[1] / "plugins_registry"
    command = [str(python), str(real_node.tools / "fake_device_plugin.py"), "--gen", str(gen)]
    command += ["--registry-dir", str(registry), "--resource", MIG]
    command += ["--count", str(INSTANCES), "--id-prefix", ID_PREFIX]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def allocatable() -> str:
        return str(client.get(NODES, real_node.name)["status"]["allocatable"].get(MIG, ""))

    try:
        wait_until(lambda: allocatable() == str(INSTANCES), timeout=60, every=0.5)
        yield
    finally:
        _stop(process, signal.SIGTERM)
        with contextlib.suppress(OSError):
            (registry / f"{MIG.replace('/', '_')}.sock").unlink()


def mig_pod(ws: NodeWorkspace, name: str, instances: int) -> dict[str, Any]:
    return pod(ws, name, limits={MIG: str(instances)})


def recorded(p: dict[str, Any]) -> dict[str, int]:
    """The MIG instances by profile that the pod's kgpu.io/device-allocation records."""
    note = json.loads(p["metadata"]["annotations"]["kgpu.io/device-allocation"])
    return {m["profile"]: m["count"] for m in note.get("mig", [])}


def check(ws: NodeWorkspace, asked: dict[str, int]) -> None:
    """Each pod sees the instances the kubelet gave it, as many as kgpu recorded, none
    twice; the agent reports the same holdings."""
    pods = ws.pods()
    seen = {name: sorted(ws.visible(name)) for name in asked}
    for name, count in asked.items():
        assert recorded(pods[name]) == {PROFILE: count}, name
        assert len(seen[name]) == count, (name, seen[name])
        assert all(i.startswith(ID_PREFIX) for i in seen[name]), (name, seen[name])
    every = [i for ids in seen.values() for i in ids]
    assert len(every) == len(set(every)), seen
    wait_until(lambda: _holders(ws, MIG) == seen, timeout=30, every=0.5)


def waits(ws: NodeWorkspace, name: str, why: str) -> None:
    """The pod stays unbound, never refused by the kubelet, and kgpu's FailedScheduling
    event says ``why``."""

    def said() -> list[str]:
        events = ws.events("FailedScheduling")
        return [
            e["message"]
            for e in events
            if e["involvedObject"]["name"] == name and e["source"]["component"] == SCHEDULER
        ]

    wait_until(lambda: bool(said()), timeout=60, every=0.5)
    assert why in said()[0], said()
    assert "nodeName" not in ws.pods()[name]["spec"]
    assert not ws.events("UnexpectedAdmissionError"), "the kubelet refused a pod"


def test_mig_pods_see_exactly_the_instances_they_were_given_and_none_twice(
    mig_plugin: None,  # first: it goes last, after the workspace's pods are gone
    workspace: NodeWorkspace,  # noqa: F811
    tmp_path: Path,
) -> None:
    ws = workspace
    with kgpu_agent(ws, tmp_path) as agent_log, kgpu_run(ws, tmp_path, *SHARES) as kgpu:
        _published_gpus(ws, agent_log)  # the four whole GPUs; the MIG GPU is not one
        serving(ws)  # device-plugin pods lose the NVIDIA_VISIBLE_DEVICES they set
        asked = {"mig-a": 1, "mig-b": 2, "mig-c": 1, "mig-d": 3}  # all seven
        ws.add(*(mig_pod(ws, name, n) for name, n in asked.items()))
        ws.add(pod(ws, "whole", limits={"nvidia.com/gpu": "1"}))
        running(ws, kgpu.log, {*asked, "whole"})
        check(ws, asked)
        assert len(ws.visible("whole")) == 1 and not ws.visible("whole")[0].startswith("MIG")
        ws.add(mig_pod(ws, "mig-e", 1))
        waits(ws, "mig-e", "insufficient MIG instances")

        # kgpu killed outright and started again: its books count the seven instances held.
        kgpu.kill_and_restart()
        serving(ws)
        ws.add(mig_pod(ws, "mig-f", 1))
        waits(ws, "mig-f", "insufficient MIG instances")
        assert "nodeName" not in ws.pods()["mig-e"]["spec"]

        # Three instances freed: the two waiting pods get theirs, none given twice.
        ws.delete("mig-d")
        del asked["mig-d"]
        asked |= {"mig-e": 1, "mig-f": 1}
        running(ws, kgpu.log, set(asked))
        check(ws, asked)
