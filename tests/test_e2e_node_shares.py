"""End to end on a real node with shares: ``kgpu run`` (serving its own mutating webhook) and
``kgpu agent`` as a user starts them, a kubelet v1.20.2 whose device plugin behaves like
NVIDIA's, and pods in every request dialect whose containers print their environment.

For every pod: the GPUs its container sees (``NVIDIA_VISIBLE_DEVICES``) are exactly the ids
of the GPUs its ``kgpu.io/device-allocation`` names; no GPU a whole-GPU pod sees is seen by
any other pod; the shares of one GPU see the same GPU and take at most all of it (compute
and memory); a pod without GPUs sees none. The same after kgpu is killed and started again
and after the kubelet restarts. See tests/test_e2e_node.py for the node and its fixtures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.resource_types import EVENTS, NODES, PODS
from tests.kube_objects import SCHEDULER, allocation_of, wait_until
from tests.test_e2e_kube import client, kubeconfig  # noqa: F401
from tests.test_e2e_node import (  # noqa: F401
    BUSYBOX,
    GFD_MEMORY_MIB,
    PRINT_ENV_AND_WAIT,
    NodeWorkspace,
    _published_gpus,
    kgpu_agent,
    kgpu_run,
    real_node,
    restart_kubelet,
    workspace,
)
from tests.test_e2e_webhook import api, crds  # noqa: F401

pytestmark = pytest.mark.e2e

RESERVATION_NS = "kgpu-system"
# Reservation pods run kube-node's busybox (there is no registry to pull pause from).
SHARES = (
    "--reservation-image",
    BUSYBOX,
    "--reservation-command",
    "sleep 2147483647",
    "--reservation-pull-policy",
    "Never",
    "--reservation-idle-seconds",
    "5",
)
# What koordlet advertises on a Koordinator node, so the kubelet admits pods that ask
# Koordinator's resources (4 GPUs of 80 GiB).
KOORDINATOR_CAPACITY = {
    f"{prefix}/{name}": value
    for prefix in ("kubernetes.io", "koordinator.sh")
    for name, value in (
        ("gpu", "400"),
        ("gpu-core", "400"),
        ("gpu-memory-ratio", "400"),
        ("gpu-memory", "320Gi"),
    )
}


def pod(
    ws: NodeWorkspace,
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod of kgpu's whose one container prints its environment and waits; the image's
    own NVIDIA_VISIBLE_DEVICES ("all", as CUDA images set it) is set in the pod too."""
    container = {
        "name": "main",
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", PRINT_ENV_AND_WAIT],
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": dict(limits or {}),
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ws.namespace, "annotations": annotations or {}},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeSelector": {"kubernetes.io/hostname": ws.node.name},
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
        },
    }


@pytest.fixture
def koordinator_node(client: KubeClient, real_node: Any) -> Iterator[None]:  # noqa: F811
    """The node advertises Koordinator's GPU resources, as koordlet makes it do."""
    status = {"capacity": KOORDINATOR_CAPACITY, "allocatable": KOORDINATOR_CAPACITY}
    client.patch(NODES, real_node.name, {"status": status}, subresource="status")
    yield
    gone = dict.fromkeys(KOORDINATOR_CAPACITY)
    with contextlib.suppress(Exception):
        patch = {"status": {"capacity": gone, "allocatable": gone}}
        client.patch(NODES, real_node.name, patch, subresource="status")


def reservations(ws: NodeWorkspace) -> list[dict[str, Any]]:
    return ws.client.list(PODS, namespace=RESERVATION_NS).items


def running(ws: NodeWorkspace, log: Path, names: set[str], timeout: float = 120) -> None:
    try:
        wait_until(lambda: names <= ws.running(), timeout=timeout, every=0.5)
    except AssertionError:
        phases = {n: (p.get("status", {}).get("phase"), _waiting(p)) for n, p in ws.pods().items()}
        said = [
            f"{e['involvedObject']['name']}: {e['reason']}: {e['message']}"
            for e in ws.client.list(EVENTS, namespace=ws.namespace).items
            if e.get("type") == "Warning"
        ]
        raise AssertionError(
            f"phases: {phases}\nwarnings: {said[-10:]}\n{log.read_text()[-4000:]}"
        ) from None


def _waiting(pod: dict[str, Any]) -> str:
    for status in pod.get("status", {}).get("containerStatuses", []):
        reason = status.get("state", {}).get("waiting", {}).get("reason")
        if reason:
            return str(reason)
    return ""


def check(
    ws: NodeWorkspace, ids_by_minor: dict[int, str], names: set[str], runs: int = 1
) -> dict[str, list[str]]:
    """What the container of each pod of ``names`` sees, once it has printed it ``runs``
    times, checked (see the module's docstring)."""
    pods = {n: p for n, p in ws.pods().items() if n in names}
    assert set(pods) == names
    seen = {name: ws.visible(name, runs) for name in pods}
    by_gpu: dict[str, list[tuple[str, int, int]]] = {}
    whole: set[str] = set()
    for name, p in pods.items():
        node, minors, milli = allocation_of(p)
        if not minors:
            assert seen[name] == ["void"], (name, seen[name])
            continue
        assert node == ws.node.name
        assert sorted(seen[name]) == sorted(ids_by_minor[m] for m in minors), (name, seen)
        mib = [int(g["resources"]["kubernetes.io/gpu-memory"].removesuffix("Mi"))
               for g in _gpus(p)]  # fmt: skip
        for gpu, memory in zip(seen[name], mib, strict=True):
            by_gpu.setdefault(gpu, []).append((name, milli, memory))
        if milli == 1000:
            whole.update(seen[name])
    for gpu, users in by_gpu.items():
        if gpu in whole:
            assert len(users) == 1, (gpu, users)
        assert sum(u[1] for u in users) <= 1000, (gpu, users)
        assert sum(u[2] for u in users) <= GFD_MEMORY_MIB, (gpu, users)
    return seen


def drain(ws: NodeWorkspace) -> None:
    """Delete the test's pods and wait until the kubelet has stopped them and kgpu, still
    running, has deleted the reservations they left idle, so that the next test finds the
    node's GPUs free."""
    ws.client.request("DELETE", PODS.path(ws.namespace), query=[("gracePeriodSeconds", "1")])
    ws.wait_gone(timeout=240)

    def mine() -> list[dict[str, Any]]:
        return [r for r in reservations(ws) if r["spec"].get("nodeName") == ws.node.name]

    wait_until(lambda: not mine(), timeout=90, every=0.5)


def serving(ws: NodeWorkspace) -> None:
    """Until the API server calls kgpu's webhook (a dry run of a share comes back mutated):
    it learns of a new registration within a second or so, and a share created before is
    not mutated, and then not placed."""
    probe = pod(ws, "probe", annotations={"gpu-fraction": "0.5"})

    def mutated() -> bool:
        query = [("dryRun", "All")]
        answer = ws.client.request("POST", PODS.path(ws.namespace), query=query, body=probe)
        return "kgpu.io/gpu-env-configmap" in answer["metadata"].get("annotations", {})

    wait_until(mutated, timeout=60, every=0.5)


def _gpus(p: dict[str, Any]) -> list[dict[str, Any]]:
    import json

    return list(json.loads(p["metadata"]["annotations"]["kgpu.io/device-allocation"])["gpu"])


def test_the_four_pods_of_the_issue_each_see_the_gpus_of_their_allocation(
    workspace: NodeWorkspace,  # noqa: F811
    tmp_path: Path,
) -> None:
    ws = workspace
    with kgpu_agent(ws, tmp_path) as agent_log, kgpu_run(ws, tmp_path, *SHARES) as kgpu:
        ids_by_minor = _published_gpus(ws, agent_log)
        serving(ws)
        ws.add(
            pod(ws, "one", limits={"nvidia.com/gpu": "1"}),
            pod(ws, "two", limits={"nvidia.com/gpu": "2"}),
            pod(ws, "half-a", annotations={"gpu-fraction": "0.5"}),
            pod(ws, "half-b", annotations={"gpu-fraction": "0.5"}),
        )
        four = {"one", "two", "half-a", "half-b"}
        running(ws, kgpu.log, four)
        seen = check(ws, ids_by_minor, four)
        assert seen["half-a"] == seen["half-b"]
        assert sorted(i for n in ("one", "two", "half-a") for i in seen[n]) == sorted(
            ids_by_minor.values()
        )

        # One reservation holds the shares' GPU. The kubelet gave it its GPU before the shares'
        # environment was written, but its container may start after theirs.
        def held() -> list[str]:
            mine = [r for r in reservations(ws) if r["spec"].get("nodeName") == ws.node.name]
            return [r.get("status", {}).get("phase", "") for r in mine]

        wait_until(lambda: held() == ["Running"], timeout=60, every=0.5)
        drain(ws)


def test_twenty_pods_in_every_dialect_across_restarts(
    workspace: NodeWorkspace,  # noqa: F811
    tmp_path: Path,
    koordinator_node: None,
) -> None:
    ws = workspace
    eighth = {
        "fraction": {"annotations": {"gpu-fraction": "0.125"}},
        "kai-memory": {"annotations": {"gpu-memory": "10240"}},
        "koord-core-ratio": {
            "limits": {"kubernetes.io/gpu-core": "12", "kubernetes.io/gpu-memory-ratio": "12"}
        },
        "koord-core-memory": {
            "limits": {"kubernetes.io/gpu-core": "12", "kubernetes.io/gpu-memory": "10Gi"}
        },
        "koord-memory": {"limits": {"kubernetes.io/gpu-memory": "10Gi"}},
        "koord-ratio": {"limits": {"kubernetes.io/gpu-memory-ratio": "12"}},
        "koord-percent": {"limits": {"kubernetes.io/gpu": "12"}},
        "koordinator-sh": {
            "limits": {"koordinator.sh/gpu-core": "12", "koordinator.sh/gpu-memory-ratio": "12"}
        },
    }
    with kgpu_agent(ws, tmp_path) as agent_log, kgpu_run(ws, tmp_path, *SHARES) as kgpu:
        ids_by_minor = _published_gpus(ws, agent_log)
        serving(ws)
        # Whole GPUs first, from the device plugin and through a reservation.
        ws.add(
            pod(ws, "whole-plugin", limits={"nvidia.com/gpu": "1"}),
            pod(ws, "whole-koord", limits={"kubernetes.io/gpu": "100"}),
            pod(ws, "cpu-only"),
        )
        running(ws, kgpu.log, {"whole-plugin", "whole-koord", "cpu-only"})
        shares = {f"{kind}-{i}": how for kind, how in eighth.items() for i in range(2)}
        ws.add(*(pod(ws, name, **how) for name, how in shares.items()))
        everyone = {"whole-plugin", "whole-koord", "cpu-only", *shares}
        running(ws, kgpu.log, everyone, timeout=180)
        assert len(everyone) == 19
        seen = check(ws, ids_by_minor, everyone)
        assert len({i for n in shares for i in seen[n]}) == 2  # the two GPUs left

        # kgpu killed outright and started again: the books rebuilt, the same GPUs; a new
        # share still finds room where there is some.
        kgpu.kill_and_restart()
        serving(ws)
        ws.add(pod(ws, "late", annotations={"gpu-fraction": "0.02"}))
        everyone.add("late")
        running(ws, kgpu.log, everyone)
        seen = check(ws, ids_by_minor, everyone)

        # The kubelet restarted: every container made again sees what it saw.
        restart_kubelet(ws)
        again = check(ws, ids_by_minor, everyone, runs=2)
        assert again == seen
        drain(ws)
