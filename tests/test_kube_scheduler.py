"""The live scheduler (``kgpu run``'s parts) over real HTTP against the API double, with the
double failing on purpose: nothing lost, nothing allocated twice."""

from __future__ import annotations

import gc
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import Timeouts
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.kube_double import KubeDouble
from tests.kube_objects import allocation_of, gpu_use, node_obj, pod_obj, signed, wait_until
from tests.schedulers import fast_options, schedulers

BINDING = r"/pods/[^/]+/binding$"


@pytest.fixture
def double(request: pytest.FixtureRequest) -> Iterator[KubeDouble]:
    """The API double; parametrize it indirectly with KubeDouble's keyword arguments."""
    with KubeDouble(**getattr(request, "param", {})) as d:
        yield d


Start = Callable[..., RunningScheduler]


@pytest.fixture
def start(double: KubeDouble, tmp_path: Path) -> Iterator[Start]:
    """Start schedulers against the double with short timings; all stopped at the end."""
    defaults: dict[str, Any] = {
        "metrics_port": 0,
        "metrics_host": "127.0.0.1",
        "timeouts": Timeouts(connect=1.0, request=0.5, watch=30, watch_grace=2.0),
        "loop": LoopConfig(
            backoff_initial=0.2,
            backoff_max=1.0,
            unschedulable_retry=0.5,
            uncertain_grace=10.0,
            idle_wait=0.05,
        ),
    }
    with schedulers() as run:
        yield lambda identity="s1", **o: run(
            fast_options(double, tmp_path, identity, **{**defaults, **o})
        )


def events(double: KubeDouble, reason: str) -> list[str]:
    return [
        f"{e['involvedObject']['name']}: {e['message']}"
        for e in double.objects("events")
        if e["reason"] == reason
    ]


def binding_requests(double: KubeDouble) -> list[tuple[str, int]]:
    """The Bindings sent (not the dry runs that learn what the server checks)."""
    return [
        (r.path.split("/")[-2], r.status)
        for r in double.requests
        if r.path.endswith("/binding") and "dryRun" not in r.query
    ]


def assert_within_capacity(double: KubeDouble, gpus_per_node: int) -> None:
    use = gpu_use(double.objects("pods"))
    assert all(milli <= 1000 for milli in use.values()), use
    assert all(minor < gpus_per_node for _, minor in use)


# ---------------------------------------------------------------------------- the happy path


def test_schedules_whole_and_shared_gpu_pods(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=2))
    for name, kwargs in [("whole", {"gpus": 1}), ("half-a", {"fraction": "0.5"}),
                         ("half-b", {"fraction": "0.5"}), ("too-big", {"gpus": 4})]:  # fmt: skip
        double.put(pod_obj(name, **kwargs))  # type: ignore[arg-type]
    scheduler = start()
    wait_until(lambda: len(double.bound()) == 3)
    pods = {p["metadata"]["name"]: p for p in double.objects("pods")}
    assert allocation_of(pods["whole"])[1:] == ([0], 1000)
    assert allocation_of(pods["half-a"])[1:] == ([1], 500) == allocation_of(pods["half-b"])[1:]
    assert pods["whole"]["metadata"]["annotations"]["kgpu.io/visible-devices"] == "0"
    wait_until(lambda: len(events(double, "Scheduled")) == 3)
    wait_until(lambda: len(events(double, "FailedScheduling")) == 1)
    assert events(double, "FailedScheduling") == [
        "too-big: 0/1 nodes are available: 1 insufficient GPU."
    ]
    with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics") as answer:
        text = answer.read().decode()
    assert 'kgpu_schedule_attempts_total{result="scheduled"} 3.0' in text
    assert 'kgpu_pending_pods{reason="InsufficientGPU"} 1.0' in text
    assert "kgpu_session_duration_seconds_count" in text
    assert "kgpu_pod_scheduling_duration_seconds_count 3.0" in text
    with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/readyz") as answer:
        assert answer.status == 200


def test_pods_of_other_schedulers_use_their_gpus(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(pod_obj("theirs", gpus=1, scheduler="default-scheduler", node="n1"))
    double.put(pod_obj("waiting", gpus=1, scheduler="default-scheduler"))  # not ours
    double.put(pod_obj("a", gpus=1))
    double.put(pod_obj("b", gpus=1))
    start()
    wait_until(lambda: len(events(double, "FailedScheduling")) == 1)
    wait_until(lambda: set(double.bound()) == {"theirs", "a"})
    assert allocation_of(double.get("pods", "a", "default") or {})[1] == [1]  # GPU 0 is theirs


# ---------------------------------------------------------------------------- faults


@pytest.mark.parametrize("status", [409, 500])
def test_a_failed_bind_releases_and_retries(double: KubeDouble, start: Start, status: int) -> None:
    double.put(node_obj("n1", gpus=1))
    double.put(pod_obj("a", gpus=1))
    double.fail("POST", BINDING, status)
    start()
    wait_until(lambda: double.bound() == {"a": "n1"})
    assert binding_requests(double) == [("a", status), ("a", 201)]
    assert any("Binding rejected" in e for e in events(double, "FailedScheduling"))
    assert allocation_of(double.get("pods", "a", "default") or {})[1] == [0]


def test_a_released_gpu_goes_to_one_pod_only(double: KubeDouble, start: Start) -> None:
    """Two pods want the only GPU; the first bind fails with 500. Whatever the order of the
    retries, exactly one pod ends up with the GPU."""
    double.put(node_obj("n1", gpus=1))
    double.put(pod_obj("a", gpus=1))
    double.put(pod_obj("b", gpus=1))
    double.fail("POST", BINDING, 500)
    start()
    wait_until(lambda: len(double.bound()) == 1)
    wait_until(lambda: len(events(double, "FailedScheduling")) >= 2)
    assert len(double.bound()) == 1
    assert [s for _, s in binding_requests(double)].count(201) == 1
    assert_within_capacity(double, 1)


def test_a_slow_bind_keeps_its_reservation(double: KubeDouble, start: Start) -> None:
    """The Binding answers after the client's timeout (and takes effect then): the outcome
    is unknown, so the GPU stays reserved and the second pod does not get it meanwhile."""
    double.put(node_obj("n1", gpus=1))
    double.put(pod_obj("a", gpus=1))
    double.slow("POST", BINDING, 1.5)
    scheduler = start()
    wait_until(lambda: "default/a" in scheduler.loop.assumed())
    double.put(pod_obj("b", gpus=1))
    wait_until(lambda: double.bound() == {"a": "n1"})
    wait_until(lambda: any(e.startswith("b:") for e in events(double, "FailedScheduling")))
    assert double.bound() == {"a": "n1"}
    assert [s for _, s in binding_requests(double)].count(201) <= 1
    assert_within_capacity(double, 1)


def test_a_pod_deleted_mid_cycle_is_released(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=1))
    double.put(pod_obj("a", gpus=1))
    double.put(pod_obj("b", gpus=1))
    # The pod goes just as its Binding arrives: 404, and its GPU is free again.
    double.before("POST", "/pods/a/binding$", lambda: double.remove("pods", "a", "default"))
    start()
    wait_until(lambda: double.bound() == {"b": "n1"})
    assert double.get("pods", "a", "default") is None
    assert allocation_of(double.get("pods", "b", "default") or {})[1] == [0]


def test_a_restart_rebuilds_allocations_from_annotations(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=2))
    first = start("first")
    double.put(pod_obj("a", gpus=1))
    wait_until(lambda: double.bound() == {"a": "n1"})
    first.stop()
    # A pod of ours bound on GPU 1, as its annotation says; the lowest free GPU would be 0.
    double.put(node_obj("n2", gpus=2))
    note = {
        "kgpu.io/device-allocation": '{"gpu":[{"minor":1,"resources":{"kubernetes.io/gpu-core":100}}]}'
    }
    double.put(signed(double, pod_obj("old", gpus=1, node="n2", annotations=note)))
    for name in ("b", "c"):
        double.put(pod_obj(name, gpus=1))
    start("second")
    wait_until(lambda: len(double.bound()) == 4)
    use = gpu_use(double.objects("pods"))
    assert sorted(use) == [("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1)]
    assert_within_capacity(double, 2)
    assert allocation_of(double.get("pods", "c", "default") or {})[:2] == ("n2", [0])
    double.put(pod_obj("e", gpus=1))
    wait_until(lambda: any(e.startswith("e:") for e in events(double, "FailedScheduling")))


def test_a_malformed_annotation_warns_and_counts_once(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=2))
    note = {"kgpu.io/device-allocation": "GPU 0 please"}
    double.put(signed(double, pod_obj("odd", gpus=1, node="n1", annotations=note)))
    double.put(pod_obj("a", gpus=1))
    double.put(pod_obj("b", gpus=1))
    start()
    wait_until(lambda: len(double.bound()) == 2)
    wait_until(lambda: len(events(double, "FailedScheduling")) == 1)
    warnings = events(double, "InvalidDeviceAllocation")
    assert len(warnings) == 1
    assert 'annotation kgpu.io/device-allocation is "GPU 0 please", expected JSON' in warnings[0]
    assert "accounted on GPUs 0 of n1" in warnings[0]
    assert allocation_of(double.get("pods", "a", "default") or {})[1] == [1]


def test_a_pending_pod_whose_annotation_changes_is_read_again(
    double: KubeDouble, start: Start
) -> None:
    double.put(node_obj("n1", gpus=1))
    double.put(pod_obj("a", fraction="0.75"))
    start()
    wait_until(lambda: "a" in double.bound())
    double.put(pod_obj("b", fraction="0.5"))
    wait_until(lambda: any(e.startswith("b:") for e in events(double, "FailedScheduling")))
    # The owner asks for less: the next session reads the new version of the pod.
    double.put(pod_obj("b", fraction="0.25"))
    wait_until(lambda: "b" in double.bound())
    assert allocation_of(double.get("pods", "b", "default") or {})[1:] == ([0], 250)
    assert_within_capacity(double, gpus_per_node=1)


def test_only_the_leader_binds(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=8))
    one = start("one")
    wait_until(lambda: one.elector is not None and one.elector.is_leader())
    two = start("two")
    assert two.elector is not None
    wait_until(two.elector.status_known.is_set)
    for i in range(4):
        double.put(pod_obj(f"p{i}", gpus=1))
    wait_until(lambda: len(double.bound()) == 4)
    agents = {r.agent for r in double.requests if r.path.endswith("/binding")}
    assert agents == {"kgpu-scheduler/one"}
    assert not two.elector.is_leader()
    one.stop()  # gives the lease up: the standby takes over
    wait_until(two.elector.is_leader)
    since = len(double.requests)
    for i in range(4, 6):
        double.put(pod_obj(f"p{i}", gpus=1))
    wait_until(lambda: len(double.bound()) == 6)
    late = {r.agent for r in double.requests[since:] if r.path.endswith("/binding")}
    assert late == {"kgpu-scheduler/two"}
    assert_within_capacity(double, 8)


def test_a_leader_cut_off_stops_binding(double: KubeDouble, start: Start) -> None:
    """While lease renewals fail, the leader's term runs out before anyone else's can
    begin; it binds nothing after that."""
    double.put(node_obj("n1", gpus=8))
    one = start("one")
    elector = one.elector
    assert elector is not None
    wait_until(elector.is_leader)
    double.fail("*", "/leases/", 503, times=None)
    wait_until(lambda: not elector.is_leader(), timeout=3)
    double.put(pod_obj("p", gpus=1))
    time.sleep(0.5)
    assert double.bound() == {}
    assert binding_requests(double) == []


def test_device_resources_name_the_gpus_in_the_annotation(double: KubeDouble, start: Start) -> None:
    """The node agent's Device resource gives each minor its UUID; the allocation says it."""
    double.install_crds()
    double.put(node_obj("n1", gpus=2))
    double.put(
        {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "Device",
            "metadata": {"name": "n1"},
            "spec": {
                "devices": [
                    {"type": "gpu", "minor": m, "uuid": f"GPU-n1-{m}", "health": True}
                    for m in range(2)
                ]
            },
        }
    )
    double.put(pod_obj("whole", gpus=1))
    start()
    wait_until(lambda: len(double.bound()) == 1)
    pod = next(p for p in double.objects("pods") if p["metadata"]["name"] == "whole")
    allocation = json.loads(pod["metadata"]["annotations"]["kgpu.io/device-allocation"])
    assert allocation["gpu"][0]["minor"] == 0
    assert allocation["gpu"][0]["uuid"] == "GPU-n1-0"


def sessions_run(scheduler: RunningScheduler) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics") as answer:
        text = answer.read().decode()
    line = next(x for x in text.splitlines() if x.startswith("kgpu_session_duration_seconds_count"))
    return float(line.split()[-1])


def test_an_idle_scheduler_builds_no_snapshots(double: KubeDouble, start: Start) -> None:
    """With nothing changed and nothing waiting on the clock, no session runs (each would
    rebuild the whole snapshot); a new pod starts one at once, and an unschedulable pod's
    retry time starts another."""
    double.put(node_obj("n1", gpus=1))
    double.put(pod_obj("a", gpus=1))
    scheduler = start()
    wait_until(lambda: len(double.bound()) == 1)
    time.sleep(0.5)  # the sessions that saw the bind land
    settled = sessions_run(scheduler)
    time.sleep(0.6)  # a dozen idle waits of 0.05 s
    assert sessions_run(scheduler) == settled
    double.put(pod_obj("b", gpus=1))
    wait_until(lambda: len(events(double, "FailedScheduling")) == 1)
    woken = sessions_run(scheduler)
    assert woken > settled
    wait_until(lambda: sessions_run(scheduler) > woken)  # b's retry, 0.5 s later


def test_the_collector_runs_less_often_while_a_scheduler_runs(
    double: KubeDouble, start: Start
) -> None:
    """The young-generation threshold is raised while the scheduler runs and given back
    when it stops; one already higher is left as it is."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, before[1], before[2])
        scheduler = start()
        assert gc.get_threshold() == (10_000, before[1], before[2])
        scheduler.stop()
        assert gc.get_threshold() == (700, before[1], before[2])
        gc.set_threshold(50_000, before[1], before[2])
        start(gc_threshold=20_000).stop()
        assert gc.get_threshold()[0] == 50_000
    finally:
        gc.set_threshold(*before)


# ------------------------------------------------- the Binding carries the allocation


SERVERS = [
    pytest.param({"binding_preconditions": True}, id="v1.23+"),
    pytest.param({"binding_preconditions": False}, id="v1.20"),
]


@pytest.mark.parametrize("double", SERVERS, indirect=True)
def test_each_bind_is_one_write_that_carries_the_allocation(
    double: KubeDouble, start: Start
) -> None:
    """No annotation patch: the Binding itself carries the annotations. Where the server
    ignores a Binding's preconditions (v1.20) a read of the pod comes first."""
    double.put(node_obj("n1", gpus=2))
    for name in ("a", "b", "c"):
        double.put(pod_obj(name, fraction="0.5"))
    start()
    wait_until(lambda: len(double.bound()) == 3)
    assert sorted(binding_requests(double)) == [("a", 201), ("b", 201), ("c", 201)]
    pod_writes = [r for r in double.requests if "/pods" in r.path and r.method in ("PATCH", "PUT")]
    assert pod_writes == []
    reads = sorted(r.path.split("/")[-1] for r in double.requests if r.method == "GET" and
                   r.path.startswith("/api/v1/namespaces/default/pods/"))  # fmt: skip
    assert reads == ([] if double.binding_preconditions else ["a", "b", "c"])
    for pod in double.objects("pods"):
        assert allocation_of(pod)[2] == 500
        assert pod["metadata"]["annotations"]["kgpu.io/visible-devices"] in ("0", "1")
    assert_within_capacity(double, 2)


@pytest.mark.parametrize("double", SERVERS, indirect=True)
def test_a_pod_created_again_under_its_name_gets_its_own_decision(
    double: KubeDouble, start: Start
) -> None:
    """Pod a (one GPU) is deleted and created again asking for two just before its bind:
    the decision made for the first is refused (by the Binding's preconditions, or by the
    read before it on v1.20), and the new pod is bound with two GPUs of its own."""
    double.put(node_obj("n1", gpus=2))
    double.put(pod_obj("a", gpus=1))

    def recreate() -> None:
        double.remove("pods", "a", "default")
        double.put(pod_obj("a", gpus=2))

    step = ("POST", "/pods/a/binding$") if double.binding_preconditions else ("GET", "/pods/a$")
    double.before(*step, recreate)
    start()
    wait_until(lambda: allocation_of(double.get("pods", "a", "default") or {})[1] == [0, 1])
    assert [s for _, s in binding_requests(double)].count(201) == 1
    if double.binding_preconditions:
        assert binding_requests(double)[0] == ("a", 409)
        refused = "a: Binding rejected: Binding: POST /api/v1/namespaces/default/pods/a/binding"
        wait_until(lambda: any(refused in e for e in events(double, "FailedScheduling")))
        said = next(e for e in events(double, "FailedScheduling") if refused in e)
        assert "409 Conflict" in said and "Precondition failed: UID in precondition" in said
    assert_within_capacity(double, 2)
