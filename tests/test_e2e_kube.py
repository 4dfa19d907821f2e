"""End to end: ``kgpu run`` against a real kube-apiserver with etcd.

CI starts one (../shared/tools/kube-apiserver, see .ci/run) and hands its kubeconfig over
in KGPU_E2E_KUBECONFIG; without it these tests are skipped, and under CI=true they fail
(tests/inputs.py). There is no kubelet: Nodes are API objects whose status (allocatable,
the Ready condition) is written through the status subresource (and the not-ready taint
the API server puts on new nodes is lifted by hand, as the node lifecycle controller
would), and bound pods stay Pending with their nodeName.

Each test uses its own scheduler name, namespace and nodes, and removes them after, so
tests (and other users of the same API server) do not see each other's pods. Every
scheduler sees every node, so a test's nodes carry a label with its scheduler name and its
pods select it: other nodes in the API server at the same time do not change what a test
sees placed (only the node count in a FailedScheduling message).
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import EVENTS, NODES, PODS, Resource
from tests.inputs import KUBE_APISERVER_TOOLS, e2e_kubeconfig, require_input
from tests.kube_objects import (
    allocation_of,
    bind,
    gpu_use,
    learn_preconditions,
    node_obj,
    pod_obj,
    wait_until,
)

pytestmark = pytest.mark.e2e

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
TEST_LABEL = "e2e.kgpu.io/test"


@pytest.fixture(scope="module")
def kubeconfig() -> str:
    return e2e_kubeconfig()


@pytest.fixture(scope="module")
def client(kubeconfig: str) -> Iterator[KubeClient]:
    c = KubeClient.from_kubeconfig(kubeconfig, pool_size=16)
    try:
        c.list(NAMESPACES)
    except KubeError as exc:
        require_input(
            f"an answering kube-apiserver (the one of {kubeconfig}: {exc})",
            f"start it: bash {KUBE_APISERVER_TOOLS}/start.sh",
        )
    yield c
    c.close()


@dataclass
class Cluster:
    """One test's corner of the API server: a namespace, a scheduler name, its nodes."""

    client: KubeClient
    kubeconfig: str
    namespace: str
    scheduler: str
    nodes: list[str]

    def add_nodes(self, objs: list[dict[str, Any]]) -> None:
        def create(obj: dict[str, Any]) -> None:
            name, status = obj["metadata"]["name"], obj.pop("status")
            obj["metadata"]["labels"][TEST_LABEL] = self.scheduler
            self.client.create(NODES, obj)
            # No kubelet: the status (allocatable, Ready) goes through its subresource.
            self.client.patch(NODES, name, {"status": status}, subresource="status")
            # The TaintNodesByCondition admission plugin taints every new node not-ready,
            # and no node lifecycle controller is there to lift it once the node is Ready.
            self.client.patch(NODES, name, {"spec": {"taints": None}})

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, objs))
        self.nodes.extend(o["metadata"]["name"] for o in objs)

    def add_pods(self, objs: list[dict[str, Any]]) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda o: self.client.create(PODS, o, self.namespace), objs))

    def pod(self, name: str, **kwargs: Any) -> dict[str, Any]:
        """A pod of this test's scheduler, kept to this test's nodes by a node selector
        (other tests' nodes may be in the same API server at the same time)."""
        obj = pod_obj(name, self.namespace, scheduler=self.scheduler, **kwargs)
        obj["spec"]["nodeSelector"] = {TEST_LABEL: self.scheduler}
        return obj

    def pods(self) -> dict[str, dict[str, Any]]:
        items = self.client.list(PODS, namespace=self.namespace).items
        return {p["metadata"]["name"]: p for p in items}

    def bound(self) -> dict[str, str]:
        return {
            n: p["spec"]["nodeName"] for n, p in self.pods().items() if p["spec"].get("nodeName")
        }

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = self.client.list(EVENTS, namespace=self.namespace).items
        return [e for e in items if e.get("reason") == reason]

    def run(self, log: Path, *args: str) -> subprocess.Popen[bytes]:
        """``kgpu run --kubeconfig PATH`` with this test's scheduler name, as a process."""
        command = [sys.executable, "-P", "-m", "kgpu.cli", "run", "--kubeconfig", self.kubeconfig]
        command += ["--scheduler-name", self.scheduler, "--metrics-port", "0", *args]
        # Several schedulers run at once here on nodes without a kubelet, and these tests
        # judge placements: no webhook (one port each would be needed; test_e2e_webhook
        # registers it), no reservation pods (none would ever run there).
        command += ["--no-serve-webhook", "--no-confine-shares"]
        with log.open("ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture
def cluster(client: KubeClient, kubeconfig: str) -> Iterator[Cluster]:
    tag = uuid.uuid4().hex[:6]
    namespace = f"kgpu-e2e-{tag}"
    client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    made = Cluster(client, kubeconfig, namespace, f"kgpu-e2e-{tag}", [])
    yield made
    # Grace period 0: with no kubelet to confirm it, a bound pod would never go otherwise.
    client.request("DELETE", PODS.path(namespace), query=[("gracePeriodSeconds", "0")], timeout=60)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: _quietly(lambda: client.delete(NODES, n)), made.nodes))
    _quietly(lambda: client.delete(NAMESPACES, namespace))


def _quietly(call: Callable[[], object]) -> None:
    with contextlib.suppress(KubeError):
        call()


def _stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _metrics_port(log: Path, timeout: float = 30.0) -> int:
    found: list[int] = []

    def port_logged() -> bool:
        match = re.search(r"metrics on port (\d+)", log.read_text(errors="replace"))
        if match:
            found.append(int(match.group(1)))
        return bool(found)

    wait_until(port_logged, timeout)
    return found[0]


def test_kgpu_run_binds_gpu_pods_in_a_real_cluster(cluster: Cluster, tmp_path: Path) -> None:
    tag = cluster.scheduler
    cluster.add_nodes(
        [
            node_obj(f"{tag}-a100-0", gpus=4, product="NVIDIA-A100-SXM4-80GB"),
            node_obj(f"{tag}-a100-1", gpus=4, product="NVIDIA-A100-SXM4-80GB"),
            node_obj(f"{tag}-t4", gpus=4, product="Tesla-T4", memory_mib=15360),
        ]
    )
    t4 = f"{tag}-t4"
    # Bound by another scheduler: its two GPUs are taken, on the lowest minors.
    foreign = pod_obj("foreign", cluster.namespace, gpus=2, scheduler="default-scheduler", node=t4)
    cluster.add_pods([foreign])
    selector = cluster.pod("a100-only", gpus=1)
    selector["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    cluster.add_pods(
        [
            cluster.pod("two-gpus", gpus=2),
            cluster.pod("half-a", fraction="0.5"),
            cluster.pod("half-b", fraction="0.5"),
            cluster.pod("on-t4", gpus=1, annotations={"volcano.sh/card.name": "Tesla-T4"}),
            selector,
            cluster.pod("too-big", gpus=16),
        ]
    )
    log = tmp_path / "kgpu-run.log"
    process = cluster.run(log)
    try:
        port = _metrics_port(log)
        try:
            wait_until(lambda: len(cluster.bound()) == 6, timeout=60)
        except AssertionError:
            raise AssertionError(f"bound: {cluster.bound()}\n{log.read_text()[-3000:]}") from None
        pods = cluster.pods()
        assert "nodeName" not in pods["too-big"]["spec"]
        node, minors, milli = allocation_of(pods["on-t4"])
        assert (node, minors, milli) == (t4, [2], 1000)  # GPUs 0 and 1 are the foreign pod's
        assert pods["on-t4"]["metadata"]["annotations"]["kgpu.io/visible-devices"] == "2"
        assert allocation_of(pods["two-gpus"])[2] == 1000
        assert len(allocation_of(pods["two-gpus"])[1]) == 2
        assert allocation_of(pods["half-a"])[2] == 500 == allocation_of(pods["half-b"])[2]
        assert allocation_of(pods["a100-only"])[0].startswith(f"{tag}-a100")
        allocation = json.loads(
            pods["half-a"]["metadata"]["annotations"]["kgpu.io/device-allocation"]
        )
        assert allocation["gpu"][0]["resources"]["kubernetes.io/gpu-core"] == 50
        use = gpu_use(list(pods.values()))
        assert all(v <= 1000 for v in use.values())
        wait_until(lambda: len(cluster.events("Scheduled")) == 5, timeout=30)
        wait_until(lambda: len(cluster.events("FailedScheduling")) >= 1, timeout=30)
        failed = cluster.events("FailedScheduling")[0]
        assert failed["involvedObject"]["name"] == "too-big"
        assert failed["message"].startswith("0/")
        assert "insufficient GPU" in failed["message"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            assert answer.read() == b"ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        assert 'kgpu_schedule_attempts_total{result="scheduled"} 5.0' in text
        assert "kgpu_leader 1.0" in text
    finally:
        _stop(process)
    assert process.returncode == 0, log.read_text()


def test_a_scheduler_killed_mid_stream_loses_and_doubles_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    """2,000 pods; the scheduler is killed (SIGKILL) with a quarter of them bound; a new one
    takes the lease over once it expires and finishes. Judged from the API server alone:
    every pod bound once, with an allocation annotation, and no GPU over capacity."""
    tag = cluster.scheduler
    nodes, gpus = 160, 8
    cluster.add_nodes([node_obj(f"{tag}-{i:03d}", gpus=gpus) for i in range(nodes)])
    mix = [("0.25", 0)] * 10 + [("0.5", 0)] * 5 + [("", 1)] * 4 + [("", 2)] * 1
    pods = []
    for i in range(2000):
        fraction, whole = mix[i % len(mix)]
        pods.append(cluster.pod(f"p{i:04d}", gpus=whole, fraction=fraction))
    cluster.add_pods(pods)
    log = tmp_path / "kgpu-run.log"
    first = cluster.run(log)
    try:
        wait_until(lambda: len(cluster.bound()) >= 500, timeout=120, every=0.2)
    finally:
        _stop(first, signal.SIGKILL)
    killed_at = len(cluster.bound())
    assert killed_at < 2000, "the first scheduler finished before it could be killed"
    second = cluster.run(log)
    try:
        wait_until(lambda: len(cluster.bound()) == 2000, timeout=180, every=0.5)
    finally:
        _stop(second)
    final = cluster.pods()
    assert len(final) == 2000
    capacity = {f"{tag}-{i:03d}" for i in range(nodes)}
    for name, pod in final.items():
        node, minors, milli = allocation_of(pod)
        assert node in capacity, name
        want = pod["spec"]["containers"][0]["resources"].get("limits", {}).get("nvidia.com/gpu")
        assert len(minors) == (int(want) if want else 1), (name, minors)
        assert all(0 <= m < gpus for m in minors), (name, minors)
        assert milli > 0, name
    use = gpu_use(list(final.values()))
    over = {k: v for k, v in use.items() if v > 1000}
    assert not over, f"GPUs over capacity: {over}"
    scheduled = [e["involvedObject"]["name"] for e in cluster.events("Scheduled")]
    assert len(scheduled) == len(set(scheduled)), "a pod was reported scheduled twice"


def test_what_the_binding_does_on_this_server(cluster: Cluster) -> None:
    """What kgpu.kube.live.binder relies on, as the real server does it: a Binding's annotations
    land on the pod in the write that binds it; whether its uid and resourceVersion are
    preconditions is learned by dry runs, and where they are not (v1.20), a Binding with a
    stale uid does bind, which is why the binder reads the pod first there."""
    client = cluster.client
    version = client.request("GET", "/version")
    minor = int(re.sub(r"\D.*", "", str(version["minor"])))
    pods = {
        name: client.create(PODS, cluster.pod(name), cluster.namespace)
        for name in ("noted", "stale")
    }
    meta = pods["noted"]["metadata"]
    checks = learn_preconditions(
        client, cluster.namespace, "noted", meta["uid"], meta["resourceVersion"]
    )
    assert not cluster.bound()  # the dry runs bound nothing
    assert checks is (minor >= 23) or minor in (25, 26)  # 1.25-1.26: see kubernetes#116550
    note = {"kgpu.io/visible-devices": "3"}
    bind(
        client,
        cluster.namespace,
        "noted",
        "no-such-node",
        uid=meta["uid"],
        resource_version=meta["resourceVersion"],
        annotations=note,
    )
    noted = client.get(PODS, "noted", cluster.namespace)
    assert noted["spec"]["nodeName"] == "no-such-node"
    assert noted["metadata"]["annotations"]["kgpu.io/visible-devices"] == "3"
    stale_uid = "00000000-0000-0000-0000-00000000beef"
    if checks:
        with pytest.raises(KubeError, match="Precondition failed"):
            bind(
                client,
                cluster.namespace,
                "stale",
                "no-such-node",
                uid=stale_uid,
                resource_version="1",
            )
    else:
        bind(
            client, cluster.namespace, "stale", "no-such-node", uid=stale_uid, resource_version="1"
        )
        assert cluster.bound()["stale"] == "no-such-node"
