"""End to end, against the real kube-apiserver (issue #18, point 6): ``kgpu run`` as a process
while 200 seeded hostile pods and nodes (tests/hostile_objects.py) are created through the
API, and the faults a cluster has: the API server and etcd restarted mid-stream, nodes
deleted mid-session. (SIGKILL of the scheduler: test_e2e_kube's
``test_a_scheduler_killed_mid_stream_loses_and_doubles_nothing``; a kubelet restart:
test_e2e_node's ``test_restarts_of_kgpu_and_of_the_kubelet_give_no_gpu_twice``.)

Asserted every time, from the API server alone: no pod bound twice (one Scheduled event
each), none bound to a node that is not there, no GPU holding more than itself, and the
test's Queue's status what its pods hold. Fixtures and cleanup are test_e2e_kube's; every
hostile pod and node carries a selector or label of this test alone, so the hostile objects
never reach other tests' nodes or pods.
"""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import EVENTS, NODES, PODS, QUEUES
from tests.hostile_objects import HOSTILE_SETTINGS, Obj, nodes, pods, tally
from tests.inputs import KUBE_APISERVER_TOOLS, OPENB, require_input
from tests.kube_objects import allocation_of, gpu_use, node_obj, wait_until
from tests.test_e2e_kube import (  # noqa: F401
    TEST_LABEL,
    Cluster,
    _metrics_port,
    _stop,
    client,
    cluster,
    kubeconfig,
)
from tests.test_e2e_queues import crds  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore:Generating overly large repr")]

HOSTILE_COUNT = 200
RECORD = "kgpu.io/device-allocation"


def _healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _assert_sound(
    cluster: Cluster,  # noqa: F811
    present: set[str],
    gpus: int,
    forged: dict[str, object] | None = None,
) -> list[Obj]:
    """No pod reported scheduled twice, none of kgpu's bound to a node not in ``present``,
    no GPU over capacity; the pods kgpu bound: every bound pod, or given the records the
    hostile pods were created with (``forged``, by name), those with a Scheduled event, the
    GPUs counted from the records kgpu wrote (hostile pods created bound, and a forged record
    kgpu left on a pod it gave no GPU, are not kgpu's doing)."""
    scheduled = Counter(e["involvedObject"]["name"] for e in cluster.events("Scheduled"))
    assert not {n: c for n, c in scheduled.items() if c > 1}, "a pod was scheduled twice"
    everything = cluster.pods()
    if forged is None:
        ours = [p for p in everything.values() if p["spec"].get("nodeName")]
    else:
        ours = [everything[name] for name in scheduled if name in everything]
    missing = [p["metadata"]["name"] for p in ours if p["spec"].get("nodeName") not in present]
    assert not missing, f"bound to a node that is not there: {missing}"
    notes = [(p["metadata"]["name"], p["metadata"].get("annotations") or {}) for p in ours]
    written = [
        p
        for p, (name, note) in zip(ours, notes, strict=True)
        if note.get(RECORD) is not None and (forged is None or note.get(RECORD) != forged.get(name))
    ]
    use = gpu_use(written)
    assert not {k: v for k, v in use.items() if v > 1000}, f"GPUs over capacity: {use}"
    assert all(0 <= minor < gpus for _, minor in use), use
    return ours


def _queue(client: KubeClient, cluster: Cluster) -> str:  # noqa: F811
    name = f"{cluster.scheduler}-q"
    client.create(
        QUEUES,
        {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"deserved": {"gpu": 4}, "namespaces": [cluster.namespace]},
        },
    )
    return name


def _allocated(client: KubeClient, queue: str) -> object:  # noqa: F811
    try:
        status = client.get(QUEUES, queue).get("status") or {}
    except KubeError:
        return None
    return (status.get("allocated") or {}).get("gpu")


def _queued(cluster: Cluster, name: str, queue: str) -> Obj:  # noqa: F811
    pod = cluster.pod(name, gpus=1)
    pod["metadata"]["labels"] = {"kgpu.io/queue": queue}
    return pod


# ---------------------------------------------------------------------------- hostile objects


def _hostile_for(cluster: Cluster, obj: Obj) -> Obj:  # noqa: F811
    """``obj`` kept to this test: its pods are this test's scheduler's (or another's), in its
    namespace, selecting its hostile nodes only; its nodes named and labelled for it."""
    obj = copy.deepcopy(obj)
    tag = cluster.scheduler
    meta = obj["metadata"]
    if obj["kind"] == "Node":
        meta["name"] = f"{tag}-{meta['name']}"
        labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
        meta["labels"] = {**labels, TEST_LABEL: f"{tag}-hostile"}
        return obj
    meta["namespace"] = cluster.namespace
    spec = obj["spec"]
    if spec.get("schedulerName") == "kgpu-scheduler":
        spec["schedulerName"] = tag
    if isinstance(spec.get("nodeName"), str):
        spec["nodeName"] = f"{tag}-{spec['nodeName']}"
    spec["nodeSelector"] = {TEST_LABEL: f"{tag}-hostile"}
    return obj


def _create(client: KubeClient, cluster: Cluster, obj: Obj) -> bool:  # noqa: F811
    """Create ``obj`` through the API; False when the API server refuses it."""
    try:
        if obj["kind"] == "Pod":
            client.create(PODS, obj, cluster.namespace)
            return True
        name, status = obj["metadata"]["name"], obj.pop("status", None)
        client.create(NODES, obj)
        cluster.nodes.append(name)
        client.patch(NODES, name, {"status": status}, subresource="status")
        client.patch(NODES, name, {"spec": {"taints": None}})
    except (KubeError, TypeError, ValueError):
        return False
    return True


@settings(
    HOSTILE_SETTINGS,
    max_examples=1,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)  # fmt: skip
@given(
    hostile=st.tuples(
        st.lists(nodes(), min_size=20, max_size=20),
        st.lists(pods(nodes=("h-node-0", "h-missing")), min_size=180, max_size=180),
    )
)
def test_kgpu_run_binds_good_pods_while_200_hostile_objects_are_created(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    crds: None,  # noqa: F811
    tmp_path: Path,
    hostile: tuple[list[Obj], list[Obj]],
) -> None:
    tag = cluster.scheduler
    good_nodes = [f"{tag}-good-{i}" for i in range(2)]
    cluster.add_nodes([node_obj(n, gpus=4) for n in good_nodes])
    queue = _queue(client, cluster)
    log = tmp_path / "kgpu-run.log"
    process = cluster.run(log)
    try:
        port = _metrics_port(log)
        objs = [_hostile_for(cluster, o) for o in [*hostile[0], *hostile[1]]]
        assert len(objs) == HOSTILE_COUNT
        half = len(objs) // 2
        refused_by_api = sum(not _create(client, cluster, o) for o in objs[:half])
        cluster.add_pods([_queued(cluster, f"good-{i}", queue) for i in range(4)])
        refused_by_api += sum(not _create(client, cluster, o) for o in objs[half:])
        try:
            wait_until(lambda: {f"good-{i}" for i in range(4)} <= set(cluster.bound()), 120, 0.5)
        except AssertionError:
            raise AssertionError(f"{cluster.bound()}\n{log.read_text()[-3000:]}") from None
        wait_until(lambda: _allocated(client, queue) == "4", timeout=60, every=0.5)
        assert _healthz(port) == 200
        present = {n["metadata"]["name"] for n in client.list(NODES).items}
        forged = {
            o["metadata"]["name"]: (o["metadata"].get("annotations") or {}).get(RECORD)
            for o in objs
            if o["kind"] == "Pod" and isinstance(o["metadata"].get("annotations"), dict)
        }
        ours = _assert_sound(cluster, present, gpus=256, forged=forged)
        good = [p for p in ours if p["metadata"]["name"].startswith("good-")]
        assert all(allocation_of(p)[0] in good_nodes for p in good)
        # Hostile pods kgpu refused: each has a Warning event (the hostile nodes' are in
        # the default namespace, not counted).
        warned = {
            e["involvedObject"]["name"]
            for e in client.list(EVENTS, namespace=cluster.namespace).items
            if e.get("type") == "Warning"
        }
    finally:
        _stop(process)
        with contextlib.suppress(KubeError):
            client.delete(QUEUES, queue)
    tally("kube-apiserver, refused by the API server", HOSTILE_COUNT, refused_by_api)
    tally("kube-apiserver, refused by kgpu", HOSTILE_COUNT - refused_by_api, len(warned))


# ---------------------------------------------------------------------------- faults


def _apiserver_tools() -> Path:
    """The folder of the kube-apiserver's start.sh and stop.sh (KGPU_E2E_APISERVER_TOOLS, or
    ../shared/tools/kube-apiserver beside the repository)."""
    folder = Path(
        os.environ.get("KGPU_E2E_APISERVER_TOOLS") or OPENB.parents[1] / "tools" / "kube-apiserver"
    )
    if not (folder / "start.sh").exists():
        require_input(
            f"the kube-apiserver's tools ({folder}/start.sh)",
            f"name the folder of {KUBE_APISERVER_TOOLS} in KGPU_E2E_APISERVER_TOOLS",
        )
    return folder


def _restart_apiserver(kubeconfig: str) -> None:  # noqa: F811
    """stop.sh, then start.sh keeping etcd's data: both etcd and kube-apiserver go down and
    come back with everything they held. KAPI_DIR is where start.sh wrote the kubeconfig."""
    tools = _apiserver_tools()
    env = {**os.environ, "KAPI_DIR": str(Path(kubeconfig).parent), "KAPI_KEEP_DATA": "1"}
    subprocess.run(["bash", str(tools / "stop.sh")], env=env, check=True, timeout=60)
    subprocess.run(["bash", str(tools / "start.sh")], env=env, check=True, timeout=120)


def test_the_api_server_and_etcd_restarted_mid_stream_lose_and_double_nothing(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    kubeconfig: str,  # noqa: F811
    crds: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    """600 one-GPU pods in one Queue on 80 8-GPU nodes; etcd and kube-apiserver are stopped
    and started again with a quarter bound. The same scheduler finishes: every pod bound
    once, to a node that is there, no GPU over capacity, the Queue's status 600 GPUs."""
    _apiserver_tools()  # before anything is created: a missing tool skips (or fails) first
    tag, count, gpus = cluster.scheduler, 600, 8
    cluster.add_nodes([node_obj(f"{tag}-{i:03d}", gpus=gpus) for i in range(80)])
    queue = _queue(client, cluster)
    try:
        cluster.add_pods([_queued(cluster, f"p{i:04d}", queue) for i in range(count)])
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            wait_until(lambda: len(cluster.bound()) >= count // 4, timeout=120, every=0.2)
            _restart_apiserver(kubeconfig)
            try:
                wait_until(lambda: len(cluster.bound()) == count, timeout=300, every=1.0)
            except AssertionError:
                raise AssertionError(
                    f"{len(cluster.bound())} bound\n{log.read_text()[-3000:]}"
                ) from None
            assert process.poll() is None, "kgpu run ended with the API server's restart"
            wait_until(lambda: _allocated(client, queue) == str(count), timeout=120, every=1.0)
        finally:
            _stop(process)
        ours = _assert_sound(cluster, set(cluster.nodes), gpus)
        assert len(ours) == count
        assert all(len(allocation_of(p)[1]) == 1 for p in ours)
    finally:
        with contextlib.suppress(KubeError):
            client.delete(QUEUES, queue)


def _only_on(cluster: Cluster, name: str, node: str) -> Obj:  # noqa: F811
    pod = cluster.pod(name, gpus=1)
    pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    return pod


def test_nodes_deleted_mid_session_take_no_more_pods(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    crds: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    """400 one-GPU pods on 40 4-GPU nodes (160 GPUs: most stay pending); 10 nodes, pods
    bound to them included, are deleted mid-stream. Then a pod that only a deleted node
    would take stays pending, the rest still fits only the nodes there, and nothing is
    doubled or over capacity."""
    tag, gpus = cluster.scheduler, 4
    names = [f"{tag}-{i:02d}" for i in range(40)]
    cluster.add_nodes([node_obj(n, gpus=gpus, labels={"kubernetes.io/hostname": n}) for n in names])
    queue = _queue(client, cluster)
    try:
        cluster.add_pods([_queued(cluster, f"p{i:03d}", queue) for i in range(400)])
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            wait_until(lambda: len(cluster.bound()) >= 40, timeout=120, every=0.2)
            gone = names[:10]
            for name in gone:
                client.delete(NODES, name)
            cluster.add_pods([_only_on(cluster, "orphan", gone[0])])
            wait_until(
                lambda: any(
                    e["involvedObject"]["name"] == "orphan"
                    for e in cluster.events("FailedScheduling")
                ),
                timeout=120,
                every=0.5,
            )
            assert "orphan" not in cluster.bound()
            left = set(names[10:])
            # Every GPU of the nodes left is taken in the end; none of the pods after the
            # deletion went to a deleted node.
            wait_until(
                lambda: sum(1 for n in cluster.bound().values() if n in left) == gpus * len(left),
                timeout=180,
                every=1.0,
            )
            # Pods bound to a deleted node are still there (no pod garbage collector runs
            # here), but hold nothing: their node is gone. The Queue's status counts what
            # the pods on the nodes left hold.
            wait_until(
                lambda: _allocated(client, queue) == str(gpus * len(left)),
                timeout=60,
                every=0.5,
            )
        finally:
            _stop(process)
        present = {n["metadata"]["name"] for n in client.list(NODES).items}
        ours = _assert_sound(cluster, present | set(gone), gpus)
        on_left = [p for p in ours if p["spec"]["nodeName"] in left]
        assert len(on_left) == gpus * len(left)
    finally:
        with contextlib.suppress(KubeError):
            client.delete(QUEUES, queue)
