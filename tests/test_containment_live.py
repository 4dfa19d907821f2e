"""Hostile objects and a vanished node in the live scheduler, over real HTTP against the API
double (issue #18, failure 1): the good pods still bind, the bad objects get a Warning that
names field and value, no bind goes to a deleted node, and /healthz and /readyz say when
scheduling is not happening."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import Timeouts
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.schedulers import fast_options, schedulers

Start = Callable[..., RunningScheduler]
DEEP_ARRAY = "[" * 50_000 + "]" * 50_000
DEEP_OBJECT = '{"a":' * 40_000 + "1" + "}" * 40_000


@dataclass(frozen=True)
class Cluster:
    double: KubeDouble  # the API double, serving kgpu's CRDs (Queues, PodGroups)
    start: Start  # a scheduler of it: metrics served, no leader election, short timings


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    loop = LoopConfig(backoff_initial=0.2, backoff_max=1.0, idle_wait=0.05, event_repeat=0.0)
    timeouts = Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0)
    with KubeDouble(crds=True) as double, schedulers() as run:

        def start(**overrides: Any) -> RunningScheduler:
            options: dict[str, Any] = {"metrics_port": 0, "metrics_host": "127.0.0.1"}
            options |= {"leader_elect": False, "timeouts": timeouts, "loop": loop}
            return run(fast_options(double, tmp_path, **{**options, **overrides}))

        yield Cluster(double, start)


def warnings(double: KubeDouble) -> dict[str, str]:
    return {
        e["involvedObject"]["name"]: e["message"]
        for e in double.objects("events")
        if e["type"] == "Warning"
    }


def get(scheduler: RunningScheduler, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}{path}") as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_hostile_objects_are_refused_alone_and_the_good_pods_bind(cluster: Cluster) -> None:
    double, start = cluster.double, cluster.start
    double.put(node_obj("good", gpus=3))
    memory = node_obj("memory", gpus=2)
    memory["metadata"]["labels"]["nvidia.com/gpu.memory"] = "99999999999999999999"
    double.put(memory)
    huge = node_obj("huge", gpus=8, cpu="1e9")
    del huge["metadata"]["labels"]["nvidia.com/gpu.count"]
    huge["status"]["allocatable"]["nvidia.com/gpu"] = "1000000"
    double.put(huge)
    for name, owner in (("deep", "kgpu-scheduler"), ("deep-foreign", "default-scheduler")):
        # Each holds a GPU of "good": ours on the lowest free one, as its record is unreadable.
        deep = pod_obj(name, gpus=1, scheduler=owner, node="good")
        deep["metadata"]["annotations"]["kgpu.io/device-allocation"] = DEEP_ARRAY
        double.put(deep)
    for i in range(100):
        double.put(pod_obj(f"greedy-{i}", cpu="1e16", scheduler="default-scheduler"))
    double.put(pod_obj("greedy-ours", cpu="1e16"))
    double.put(
        {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "team-a", "annotations": {"volcano.sh/card.quota": DEEP_OBJECT}},
            "spec": {},
        }
    )
    group = {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "g",
            "namespace": "default",
            "annotations": {"volcano.sh/card.request": DEEP_OBJECT},
        },
        "spec": {"minMember": 1},
    }
    double.put(group)
    double.put(pod_obj("a", gpus=1))
    scheduler = start()
    wait_until(lambda: "a" in double.bound())
    assert double.bound()["a"] == "good"
    wait_until(lambda: {"memory", "huge", "greedy-ours", "team-a", "g"} <= set(warnings(double)))
    said = warnings(double)
    assert said["memory"] == (
        'Node memory: label nvidia.com/gpu.memory is "99999999999999999999", expected a whole '
        "number of MiB, at most 1048576; the node is not scheduled to"
    )
    assert said["huge"] == (
        'Node huge: status.allocatable[nvidia.com/gpu] is "1000000", expected at most 256 GPUs; '
        "the node is not scheduled to"
    )
    assert said["greedy-ours"] == (
        "Pod default/greedy-ours: resource cpu is 10000000000000000, expected at most 1048576 "
        "CPUs, more than any node holds"
    )
    assert said["team-a"].endswith("(nested 40000 deep, at most 32); the queue is left out")
    assert "(nested 40000 deep, at most 32); its pods are not scheduled" in said["g"]
    # Our pod's record, unsigned, is not even read (docs/SECURITY.md, "Reserved
    # annotations"): a Warning on it, the pod accounted as a foreign one.
    wait_until(lambda: "deep" in warnings(double))
    assert warnings(double)["deep"].startswith(
        "Pod default/deep: annotations kgpu.io/device-allocation carry no "
        "kgpu.io/record-signature: kgpu did not write them"
    )
    double.put(pod_obj("b", gpus=1))
    wait_until(lambda: "b" in {e["involvedObject"]["name"] for e in double.objects("events")})
    assert "b" not in double.bound()  # deep, deep-foreign and a hold the three GPUs
    assert get(scheduler, "/healthz") == (200, "ok")
    assert get(scheduler, "/readyz") == (200, "ok")


def test_a_bind_to_a_node_deleted_meanwhile_is_not_sent(cluster: Cluster) -> None:
    double, start = cluster.double, cluster.start
    double.put(node_obj("n1", gpus=4))
    for name in ("first", "second"):
        double.put(pod_obj(name, gpus=1))
    # One binder: the second bind waits behind the first, which the node's deletion
    # overtakes while it is on its way.
    double.before("POST", r"/pods/first/binding$", lambda: double.remove("nodes", "n1"))
    double.slow("POST", r"/pods/first/binding$", 1.0)
    loop = LoopConfig(backoff_initial=0.2, backoff_max=1.0, idle_wait=0.05, bind_workers=1)
    start(loop=loop)
    wait_until(
        lambda: any(
            e["involvedObject"]["name"] == "second" and e["reason"] == "FailedScheduling"
            for e in double.objects("events")
        )
    )
    sent = [r.path.split("/")[-2] for r in double.requests if r.path.endswith("/binding")]
    assert "second" not in sent
    assert warnings(double)["second"] == (
        "Binding rejected: node n1 is no longer in the cluster: not bound"
    )
    double.put(node_obj("n2", gpus=4))
    wait_until(lambda: double.bound().get("second") == "n2")


def test_healthz_fails_once_sessions_have_failed_for_the_configured_time(cluster: Cluster) -> None:
    double, start = cluster.double, cluster.start
    double.put(node_obj("n1", gpus=1))
    loop = LoopConfig(idle_wait=0.05, liveness_failure_s=0.5)
    scheduler = start(loop=loop)
    wait_until(lambda: get(scheduler, "/readyz")[0] == 200 and scheduler.loop.sessions > 0)
    assert get(scheduler, "/healthz") == (200, "ok")
    # A session that fails (as one did on every object above before these bounds): the
    # loop reports it to its liveness, and nothing succeeds after it while nothing changes.
    scheduler.loop.liveness.failed(RecursionError("maximum recursion depth exceeded"))
    wait_until(lambda: get(scheduler, "/healthz")[0] == 503)
    code, body = get(scheduler, "/healthz")
    assert code == 503
    assert body.startswith("not live: 1 scheduling sessions in a row failed over ")
    assert body.endswith("(the last: RecursionError: maximum recursion depth exceeded)")
    double.put(pod_obj("p", gpus=1))  # a session that succeeds clears it
    wait_until(lambda: get(scheduler, "/healthz") == (200, "ok"))


def test_readyz_fails_while_a_cache_lists_again_after_an_error(cluster: Cluster) -> None:
    double, start = cluster.double, cluster.start
    scheduler = start()
    wait_until(lambda: get(scheduler, "/readyz")[0] == 200)
    double.fail("GET", r"/api/v1/pods$", 500, times=None)
    double.drop_watches()
    wait_until(lambda: get(scheduler, "/readyz")[0] == 503)
    assert get(scheduler, "/readyz")[1].startswith("not ready: pods cache (listing again after:")
    double.faults.clear()
    wait_until(lambda: get(scheduler, "/readyz") == (200, "ok"))
