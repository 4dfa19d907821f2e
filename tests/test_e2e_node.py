"""End to end on a real node: ``kgpu run`` binds GPU pods onto a kubelet v1.20.2 with
containerd and runc, whose device plugin behaves like NVIDIA's (4 GPUs of ``nvidia.com/gpu``,
ids fake-gpu-0..3; Allocate answers ``NVIDIA_VISIBLE_DEVICES`` naming the ids the kubelet
chose), and each container prints what it was given.

.ci/run starts the node (../shared/tools/kube-node, GPU Feature Discovery's labels on it) and
names it in KGPU_E2E_NODE; without it these tests skip, and under CI=true they fail
(tests/inputs.py). The scheduler is what a user runs: ``kgpu run --kubeconfig PATH`` as a
process, with the CRDs of ``kgpu manifests --crds-only`` in the API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError, NotFound
from kgpu.kube.api.resource_types import DEVICES, EVENTS, NODES, PODS
from kgpu.kube.objects.device_cr import devices_from_k8s
from tests.inputs import KUBE_NODE_TOOLS, E2eNode, e2e_node, require_input
from tests.kube_objects import SCHEDULER, allocation_of, gpu_use, wait_until
from tests.test_e2e_kube import NAMESPACES, _metrics_port, _stop, client, kubeconfig  # noqa: F401
from tests.test_e2e_webhook import api, crds  # noqa: F401

pytestmark = pytest.mark.e2e

GPU = "nvidia.com/gpu"
GPUS = 4  # KNODE_FAKE_GPUS in .ci/run
BUSYBOX = "knode.local/busybox:1.35"  # kube-node's image; there is no registry to pull from
# PID 1 is sh, which ignores SIGTERM unless it traps it: untrapped, every delete would wait
# out the grace period.
PRINT_ENV_AND_WAIT = "trap 'exit 0' TERM; env; sleep 3600 & wait"
VISIBLE = re.compile(r"^NVIDIA_VISIBLE_DEVICES=(.*)$", re.MULTILINE)


@pytest.fixture(scope="module")
def real_node(client: KubeClient) -> E2eNode:  # noqa: F811
    """The node, Ready with its fake GPUs allocatable."""
    node = e2e_node()
    how = f"start it: KNODE_FAKE_GPUS={GPUS} bash {KUBE_NODE_TOOLS}/start.sh"
    try:
        obj = client.get(NODES, node.name)
    except NotFound:
        require_input(f"the node {node.name} in the API server", how)
    ready = [c for c in obj["status"].get("conditions", []) if c["type"] == "Ready"]
    gpus = obj["status"].get("allocatable", {}).get(GPU)
    if [c["status"] for c in ready] != ["True"] or gpus != str(GPUS):
        require_input(f"the node {node.name} Ready with {GPUS} {GPU} allocatable", how)
    return node


@dataclass
class NodeWorkspace:
    """One test's namespace, whose pods go to the real node through ``kgpu run``."""

    client: KubeClient
    api: Any
    kubeconfig: str
    node: E2eNode
    namespace: str

    def gpu_pod(self, name: str, gpus: int) -> dict[str, Any]:
        """A pod whose one container asks for ``gpus`` whole GPUs and prints its environment."""
        resources = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {GPU: str(gpus)}}
        container = {
            "name": "main",
            "image": BUSYBOX,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", PRINT_ENV_AND_WAIT],
            "resources": resources,
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "schedulerName": SCHEDULER,
                "nodeSelector": {"kubernetes.io/hostname": self.node.name},
                "terminationGracePeriodSeconds": 5,
                "containers": [container],
            },
        }

    def add(self, *pods: dict[str, Any]) -> None:
        for pod in pods:
            self.client.create(PODS, pod, self.namespace)

    def pods(self) -> dict[str, dict[str, Any]]:
        items = self.client.list(PODS, namespace=self.namespace).items
        return {p["metadata"]["name"]: p for p in items}

    def running_pods(self) -> dict[str, dict[str, Any]]:
        return {
            n: p for n, p in self.pods().items() if p.get("status", {}).get("phase") == "Running"
        }

    def running(self) -> set[str]:
        return set(self.running_pods())

    def events(self, reason: str) -> list[dict[str, Any]]:
        items = self.client.list(EVENTS, namespace=self.namespace).items
        return [e for e in items if e.get("reason") == reason]

    def log(self, pod: str) -> str:
        """The container's output, through the API server and the kubelet (kubectl logs)."""
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        core: Any = CoreV1Api(self.api)
        try:
            text: str = core.read_namespaced_pod_log(pod, self.namespace, _request_timeout=30)
        except ApiException as exc:
            if exc.status == 400:  # the container is being made (again): nothing to read yet
                return ""
            raise
        return text

    def visible(self, pod: str, runs: int = 1) -> list[str]:
        """The NVIDIA_VISIBLE_DEVICES the container saw, as device ids, once it has printed
        it ``runs`` times: a container the kubelet made again (after its restart) appends
        to the same log, and the last print is the running one's."""
        printed: list[str] = []

        def ran() -> bool:
            printed[:] = VISIBLE.findall(self.log(pod))
            return len(printed) >= runs

        wait_until(ran, timeout=30, every=0.5)
        return [i for i in printed[-1].split(",") if i]

    def delete(self, pod: str) -> None:
        self.client.delete(PODS, pod, self.namespace)

    def wait_gone(self, timeout: float = 60) -> None:
        """Until the kubelet has stopped every pod of the namespace and confirmed it."""
        wait_until(lambda: not self.pods(), timeout=timeout, every=0.5)


@pytest.fixture
def workspace(
    client: KubeClient,  # noqa: F811
    api: Any,  # noqa: F811
    kubeconfig: str,  # noqa: F811
    real_node: E2eNode,
    crds: None,  # noqa: F811
) -> Iterator[NodeWorkspace]:
    namespace = f"kgpu-e2e-node-{uuid.uuid4().hex[:6]}"
    client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    made = NodeWorkspace(client, api, kubeconfig, real_node, namespace)
    yield made
    # A graceful delete: the kubelet stops the containers and confirms, so the next test finds
    # the node's GPUs free (a forced one would leave the kubelet cleaning up behind its back).
    client.request("DELETE", PODS.path(namespace), query=[("gracePeriodSeconds", "1")])
    made.wait_gone(timeout=180)  # a kubelet on a busy machine stops many pods slowly
    with contextlib.suppress(KubeError):
        client.delete(NAMESPACES, namespace)


def _ids_of_node() -> list[str]:
    return [f"fake-gpu-{i}" for i in range(GPUS)]


ASKED = {"one": 1, "two": 2, "three": 1}  # the node's four GPUs


def _filled(workspace: NodeWorkspace) -> dict[str, list[str]]:
    """The device ids each container of the running pods of ASKED saw, checked against
    kgpu's books: as many GPUs as asked, whole, none of them twice. Where the kubelet chose
    other GPUs, kgpu corrects the pods' annotations by one patch each, all in one session:
    until the last has landed two annotations may name one GPU, so this waits for them."""

    def each_gpu_once() -> bool:
        use = gpu_use(list(workspace.pods().values()))
        return sorted(use) == [(workspace.node.name, m) for m in range(GPUS)] and set(
            use.values()
        ) == {1000}

    wait_until(each_gpu_once, timeout=30, every=0.5)
    pods = workspace.pods()
    for name, gpus in ASKED.items():
        node, minors, milli = allocation_of(pods[name])
        assert (node, len(minors), milli) == (workspace.node.name, gpus, 1000), name
    seen = {name: workspace.visible(name) for name in ASKED}
    _assert_none_seen_twice(seen)
    return seen


def _assert_none_seen_twice(seen: dict[str, list[str]]) -> None:
    """Each container saw as many of the node's devices as its pod asked (one, for pods
    beyond ASKED), none seen twice."""
    for name, ids in seen.items():
        assert len(ids) == ASKED.get(name, 1) == len(set(ids)), seen
    every = [i for ids in seen.values() for i in ids]
    assert len(every) == len(set(every)) and set(every) <= set(_ids_of_node()), seen


def _assert_waits_for_a_gpu(workspace: NodeWorkspace, name: str) -> None:
    """The pod stays unbound, and kgpu's FailedScheduling event says the GPUs are short."""
    wait_until(lambda: bool(workspace.events("FailedScheduling")), timeout=60, every=0.5)
    failed = workspace.events("FailedScheduling")[0]
    assert failed["involvedObject"]["name"] == name
    assert failed["source"]["component"] == SCHEDULER
    assert "insufficient GPU" in failed["message"], failed["message"]
    pending = workspace.pods()[name]
    assert "nodeName" not in pending["spec"]
    assert pending["status"]["phase"] == "Pending"


class KgpuRun:
    """``kgpu run --kubeconfig PATH`` as a user starts it, as a process, for one workspace."""

    def __init__(self, workspace: NodeWorkspace, log: Path, args: tuple[str, ...] = ()) -> None:
        self.workspace, self.log, self.args = workspace, log, args
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-P", "-m", "kgpu.cli", "run", "--kubeconfig"]
        command += [self.workspace.kubeconfig, "--metrics-port", "0", *self.args]
        with self.log.open("ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def kill_and_restart(self) -> None:
        _stop(self.process, signal.SIGKILL)
        self.process = self._start()

    def running(self, *names: str) -> None:
        """Until the pods run, or an error with their phases and kgpu's log."""
        workspace = self.workspace
        try:
            wait_until(lambda: set(names) <= workspace.running(), timeout=90, every=0.5)
        except AssertionError:
            phases = {n: p.get("status", {}).get("phase") for n, p in workspace.pods().items()}
            raise AssertionError(f"phases: {phases}\n{self.log.read_text()[-3000:]}") from None

    def fill(self) -> dict[str, list[str]]:
        """The pods of ASKED, made and running; the device ids each container saw."""
        workspace = self.workspace
        workspace.add(*(workspace.gpu_pod(name, gpus) for name, gpus in ASKED.items()))
        self.running(*ASKED)
        return _filled(workspace)


@contextlib.contextmanager
def kgpu_run(workspace: NodeWorkspace, tmp_path: Path, *args: str) -> Iterator[KgpuRun]:
    """kgpu running for the block (with ``args``); stopped after it, which it must survive
    cleanly."""
    run = KgpuRun(workspace, tmp_path / "kgpu-run.log", args)
    try:
        yield run
    finally:
        _stop(run.process, signal.SIGTERM)
    assert run.process.returncode == 0, run.log.read_text()[-3000:]


def test_whole_gpu_pods_run_with_as_many_gpus_as_they_asked_and_none_twice(
    workspace: NodeWorkspace, tmp_path: Path
) -> None:
    with kgpu_run(workspace, tmp_path) as kgpu:
        seen = kgpu.fill()
        assert sorted(i for ids in seen.values() for i in ids) == _ids_of_node()

        # The node is full: one more GPU pod waits, and kgpu says why.
        workspace.add(workspace.gpu_pod("four", 1))
        _assert_waits_for_a_gpu(workspace, "four")

        # Deleting the two-GPU pod frees its GPUs on the node and in kgpu's books: the
        # waiting pod runs on one of them, and still no device is seen by two pods.
        workspace.delete("two")
        kgpu.running("four")
        assert allocation_of(workspace.pods()["four"])[0] == workspace.node.name
        seen["four"] = workspace.visible("four")
        assert set(seen["four"]) <= set(seen.pop("two"))
        _assert_none_seen_twice(seen)


def test_a_pod_asking_more_gpus_than_the_node_has_stays_pending_with_kgpus_reason(
    workspace: NodeWorkspace, tmp_path: Path
) -> None:
    workspace.add(workspace.gpu_pod("too-big", GPUS + 1), workspace.gpu_pod("fits", GPUS))
    with kgpu_run(workspace, tmp_path) as kgpu:
        kgpu.running("fits")
        assert sorted(workspace.visible("fits")) == _ids_of_node()
        _assert_waits_for_a_gpu(workspace, "too-big")


def restart_kubelet(workspace: NodeWorkspace) -> None:
    """kube-node's stop.sh then start.sh: containerd and the kubelet go, their containers
    are killed and removed, and the new kubelet makes the pods' containers again."""
    node = workspace.node
    env = {
        **os.environ,
        "KNODE_KUBECONFIG": workspace.kubeconfig,
        "KNODE_NODE_NAME": node.name,
        "KNODE_FAKE_GPUS": str(GPUS),
    }
    for script in ("stop.sh", "start.sh"):
        done = subprocess.run(
            ["bash", str(node.tools / script)], env=env, capture_output=True, timeout=300
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]


def test_restarts_of_kgpu_and_of_the_kubelet_give_no_gpu_twice(
    workspace: NodeWorkspace, tmp_path: Path
) -> None:
    with kgpu_run(workspace, tmp_path) as kgpu:
        seen = kgpu.fill()

        # kgpu killed outright and started again: it takes the lease over once it expires
        # and rebuilds its books from the pods' annotations, so the node is still full.
        kgpu.kill_and_restart()
        workspace.add(workspace.gpu_pod("four", 1))
        _assert_waits_for_a_gpu(workspace, "four")

        # The kubelet restarted: it makes every container again on the devices its
        # checkpoint kept, and kgpu still binds nothing more.
        restart_kubelet(workspace)
        for name in ASKED:
            assert workspace.visible(name, runs=2) == seen[name], name
        kgpu.running(*ASKED)
        assert "nodeName" not in workspace.pods()["four"]["spec"]

        workspace.delete("one")
        kgpu.running("four")
        assert workspace.visible("four") == seen.pop("one")


GFD_MEMORY_MIB = 81920  # the node's nvidia.com/gpu.memory label in .ci/run


@contextlib.contextmanager
def kgpu_agent(workspace: NodeWorkspace, tmp_path: Path) -> Iterator[Path]:
    """``kgpu agent`` on the node as a user starts it (no NVML here: the GPUs the kubelet
    lists), for the block; its Device is deleted after, so later tests start without it."""
    node = workspace.node
    command = [sys.executable, "-P", "-m", "kgpu.cli", "agent", "--node", node.name]
    command += ["--kubeconfig", workspace.kubeconfig, "--interval", "1", "--metrics-port", "0"]
    command += ["--pod-resources-socket", str(node.pod_resources_socket)]
    command += ["--kubelet-checkpoint", str(node.kubelet_checkpoint)]
    log = tmp_path / "kgpu-agent.log"
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield log
    finally:
        _stop(process, signal.SIGTERM)
        with contextlib.suppress(KubeError):
            workspace.client.delete(DEVICES, node.name)
    assert process.returncode == 0, log.read_text()[-3000:]


def _device(workspace: NodeWorkspace) -> dict[str, Any]:
    try:
        return workspace.client.get(DEVICES, workspace.node.name)
    except NotFound:
        return {}


def _gpu_count(device: dict[str, Any]) -> int:
    return len(devices_from_k8s(device).gpus) if device else 0


def _published_gpus(workspace: NodeWorkspace, log: Path) -> dict[int, str]:
    """Once the agent has published all the node's GPUs: their ids by minor."""
    try:
        wait_until(lambda: _gpu_count(_device(workspace)) == GPUS, timeout=60, every=0.5)
    except AssertionError:
        raise AssertionError(log.read_text()[-3000:]) from None
    return {g.minor: g.uuid for g in devices_from_k8s(_device(workspace)).gpus}


def _holders(workspace: NodeWorkspace, resource: str = GPU) -> dict[str, list[str]]:
    """Which device ids of ``resource`` each of the workspace's pods holds, as the agent
    publishes it."""
    text = _device(workspace).get("metadata", {}).get("annotations", {})
    entries = json.loads(text.get("kgpu.io/devices-checkpoints", "[]"))
    return {
        e["podName"]: sorted(e["deviceIDs"])
        for e in entries
        if e.get("podNamespace") == workspace.namespace and e["resourceName"] == resource
    }


def test_the_agent_publishes_the_gpus_and_who_holds_them_from_the_kubelet_alone(
    workspace: NodeWorkspace, tmp_path: Path
) -> None:
    with kgpu_agent(workspace, tmp_path) as agent_log, kgpu_run(workspace, tmp_path) as kgpu:
        # The fake plugin's ids, minor by natural order, memory from the GFD label.
        assert _published_gpus(workspace, agent_log) == dict(enumerate(_ids_of_node()))
        gpus = devices_from_k8s(_device(workspace)).gpus
        assert {(g.healthy, g.memory_mib) for g in gpus} == {(True, GFD_MEMORY_MIB)}
        seen = kgpu.fill()
        want = {name: sorted(ids) for name, ids in seen.items()}
        wait_until(lambda: _holders(workspace) == want, timeout=30, every=0.5)


def _annotated_ids(pod: dict[str, Any], ids_by_minor: dict[int, str]) -> list[str]:
    """The device ids of the GPUs the pod's kgpu.io/device-allocation names."""
    return sorted(ids_by_minor[m] for m in allocation_of(pod)[1])


def _books_agree(workspace: NodeWorkspace, ids_by_minor: dict[int, str], runs: int = 1) -> None:
    """Until every running pod's allocation annotation names exactly the GPUs its container
    sees (kgpu corrects it from what the node reports), and its visible-devices annotation
    the same GPUs by minor."""

    def agree() -> bool:
        return all(
            _annotated_ids(pod, ids_by_minor) == sorted(workspace.visible(name, runs))
            for name, pod in workspace.running_pods().items()
        )

    try:
        wait_until(agree, timeout=60, every=1.0)
    except AssertionError:
        told = {
            n: (allocation_of(p)[1], workspace.visible(n, runs))
            for n, p in workspace.running_pods().items()
        }
        raise AssertionError(f"annotated minors vs seen ids: {told}") from None
    for pod in workspace.pods().values():
        minors = allocation_of(pod)[1]
        if minors:
            visible = pod["metadata"]["annotations"]["kgpu.io/visible-devices"]
            assert visible == ",".join(map(str, minors))


def _corrections(port: int, node: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    line = f'kgpu_device_allocation_corrections_total{{node="{node}"}} '
    return sum(float(row[len(line) :]) for row in text.splitlines() if row.startswith(line))


def test_every_container_sees_exactly_the_gpus_of_its_allocation_across_restarts(
    workspace: NodeWorkspace, tmp_path: Path
) -> None:
    with kgpu_agent(workspace, tmp_path) as agent_log, kgpu_run(workspace, tmp_path) as kgpu:
        ids_by_minor = _published_gpus(workspace, agent_log)
        seen = kgpu.fill()
        _books_agree(workspace, ids_by_minor)
        # Never silently: each corrected pod has its event, and the metric counts them all.
        corrected = {
            e["involvedObject"]["name"] for e in workspace.events("DeviceAllocationCorrected")
        }
        assert corrected <= set(ASKED)
        port = _metrics_port(kgpu.log)
        assert _corrections(port, workspace.node.name) == len(corrected)

        # kgpu killed outright and started again: its books, rebuilt, still agree.
        kgpu.kill_and_restart()
        workspace.add(workspace.gpu_pod("four", 1))
        _assert_waits_for_a_gpu(workspace, "four")
        _books_agree(workspace, ids_by_minor)

        # The kubelet restarted: containers made again see the same GPUs, the books agree.
        restart_kubelet(workspace)
        _books_agree(workspace, ids_by_minor, runs=2)
        assert {n: workspace.visible(n, runs=2) for n in ASKED} == seen

        # A pod deleted mid-way: the waiting one gets its GPU, in the books as on the node.
        workspace.delete("one")
        kgpu.running("four")
        _books_agree(workspace, ids_by_minor)
        assert workspace.visible("four") == seen["one"]
