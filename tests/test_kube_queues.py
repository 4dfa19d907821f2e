"""Queues and PodGroups in the live scheduler, over real HTTP against the API double: gangs
placed whole or not at all, queue limits, reclaim by deleting the victim, and the Queue and
PodGroup status and queue metrics the scheduler reports."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import Timeouts
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from kgpu.kube.objects.node_pod import ConversionError
from kgpu.kube.objects.queue_podgroup import podgroup_from_k8s, quantity_text, queue_from_k8s
from kgpu.model.queue import QueueSpec
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.schedulers import fast_options, schedulers

Start = Callable[..., RunningScheduler]


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble(crds=True) as d:
        yield d


@pytest.fixture
def start(double: KubeDouble, tmp_path: Path) -> Iterator[Start]:
    defaults: dict[str, Any] = {
        "metrics_port": 0,
        "metrics_host": "127.0.0.1",
        "leader_elect": False,
        "timeouts": Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0),
        "loop": LoopConfig(unschedulable_retry=0.5, idle_wait=0.05, event_repeat=0.0),
    }
    with schedulers() as run:
        yield lambda identity="s1", **o: run(
            fast_options(double, tmp_path, identity, **{**defaults, **o})
        )


def queue_obj(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kgpu.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def podgroup_obj(name: str, queue: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member, "queue": queue},
    }


def member(name: str, group: str, gpus: int = 1) -> dict[str, Any]:
    return pod_obj(name, gpus=gpus, annotations={"scheduling.k8s.io/group-name": group})


def in_queue(
    name: str, queue: str, gpus: int = 1, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    pod = pod_obj(name, gpus=gpus, annotations=dict(annotations or {}))
    pod["metadata"]["labels"] = {"kgpu.io/queue": queue}
    return pod


def events(double: KubeDouble, reason: str) -> list[str]:
    return [
        f"{e['involvedObject']['kind']} {e['involvedObject']['name']}: {e['message']}"
        for e in double.objects("events")
        if e["reason"] == reason
    ]


def status(double: KubeDouble, plural: str, name: str, ns: str | None = None) -> dict[str, Any]:
    obj = double.get(plural, name, ns) or {}
    return dict(obj.get("status") or {})


def conditions(found: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in found["conditions"]}


def metrics(scheduler: RunningScheduler) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics") as answer:
        return str(answer.read().decode())


# ---------------------------------------------------------------------------- conversion


def test_a_queue_reads_quantities_cards_and_the_card_quota() -> None:
    obj = queue_obj(
        "team-a",
        parent="org",
        priority=2,
        overQuotaWeight=3,
        deserved={"cpu": "500m", "memory": "64Gi", "nvidia.com/gpu": 2},
        limit={"gpu": "1.5"},
        cards={"H100": {"deserved": 1, "limit": 4}},
        cardUnlimitedCpuMemory=True,
    )
    obj["metadata"]["annotations"] = {"volcano.sh/card.quota": '{"A100": 2, "H100": 9}'}
    queue = queue_from_k8s(obj)
    assert queue == QueueSpec(
        "team-a",
        "org",
        deserved={"cpu": 500, "memory": 65536, "gpu": 2000, "A100": 2000, "H100": 1000},
        limit={"gpu": 1500, "A100": 2000, "H100": 4000},
        over_quota_weight={"cpu": 3.0, "memory": 3.0, "gpu": 3.0, "H100": 3.0},
        priority=2,
        card_unlimited_cpu_memory=True,
    )
    assert [quantity_text(r, a) for r, a in [("cpu", 500), ("memory", 65536), ("gpu", 2000)]] == [
        "500m", "64Gi", "2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (queue_obj("q", deserved={"pods": 3}),
         'Queue q: spec.deserved key pods is "pods", expected one of cpu, memory, gpu, '
         "nvidia.com/gpu (cards go in spec.cards)"),
        (queue_obj("q", limit={"gpu": "two"}),
         'Queue q: spec.limit[gpu] is "two", expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3'),
        (queue_obj("q", cards={"A100": {"deserved": -1}}),
         "Queue q: spec.cards[A100].deserved is -1, expected a whole number, at least 0"),
        (queue_obj("q", cards={"A100": {"deserved": 8, "limit": 4}}),
         "Queue q: spec.cards[A100].limit is 4, expected at least deserved (8)"),
        (queue_obj("q", cardUnlimitedCpuMemory="yes"),
         'Queue q: spec.cardUnlimitedCpuMemory is "yes", expected true or false'),
        ({**queue_obj("q"), "metadata": {"name": "q", "annotations": {"volcano.sh/card.quota": "8"}}},
         'Queue q: annotation volcano.sh/card.quota is "8", expected a JSON object of card names '
         'to whole numbers of cards, such as {"NVIDIA-A100-80GB": 8}'),
    ],
)  # fmt: skip
def test_a_malformed_queue_names_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ConversionError) as caught:
        queue_from_k8s(obj)
    assert str(caught.value) == message


def test_a_podgroup_reads_its_gang_and_card_request() -> None:
    obj = podgroup_obj("train", "team-a", 4)
    obj["spec"]["maxMember"] = 8
    obj["metadata"]["annotations"] = {"volcano.sh/card.request": '{"A100|H100": 4}'}
    job = podgroup_from_k8s(obj)
    assert (job.key, job.queue, job.min_member, job.max_member) == ("default/train", "team-a", 4, 8)
    assert job.card_request == {("A100", "H100"): 4}
    obj["spec"]["maxMember"] = 2
    with pytest.raises(ConversionError, match=r"spec.maxMember is 2, expected a whole number, at least minMember \(4\)"):  # fmt: skip
        podgroup_from_k8s(obj)


def test_a_podgroup_reads_the_min_resources_queues_account() -> None:
    obj = podgroup_obj("train", "team-a", 2)
    obj["spec"]["minResources"] = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2, "pods": 2}
    assert podgroup_from_k8s(obj).min_resources == {"cpu": 4000, "memory": 8192, "gpu": 2000}
    obj["spec"]["minResources"] = {"nvidia.com/gpu": "two"}
    with pytest.raises(ConversionError) as caught:
        podgroup_from_k8s(obj)
    assert str(caught.value) == (
        'PodGroup default/train: spec.minResources[nvidia.com/gpu] is "two", expected a '
        "quantity such as 500m, 4, 1.5, 8Gi or 1e3"
    )


# ---------------------------------------------------------------------------- live


def test_a_gang_is_placed_whole_or_not_at_all(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(queue_obj("team", deserved={"gpu": 4}))
    double.put(podgroup_obj("train", "team", 3))
    for i in range(3):
        double.put(member(f"w{i}", "train"))
    start()
    wait_until(lambda: status(double, "podgroups", "train", "default").get("phase") == "Inqueue")
    assert double.bound() == {}
    found = status(double, "podgroups", "train", "default")
    assert found["scheduled"] == 0
    assert conditions(found)["Unschedulable"] == (
        "True",
        "InsufficientGPU",
        "0/1 nodes are available: 1 insufficient GPU. (gang default/train: 2 of 3 pods fit)",
    )
    double.put(node_obj("n2", gpus=2))
    wait_until(lambda: len(double.bound()) == 3)
    wait_until(lambda: status(double, "podgroups", "train", "default").get("phase") == "Running")
    found = status(double, "podgroups", "train", "default")
    assert found["scheduled"] == 3
    assert conditions(found)["Scheduled"] == ("True", "Scheduled", "3 of 3 pods scheduled")
    assert conditions(found)["Unschedulable"][0] == "False"


def test_a_gang_whose_pods_arrive_one_by_one_is_placed_when_the_last_arrives(
    double: KubeDouble, start: Start
) -> None:
    # A controller (Volcano's job controller) creates a gang's pods one at a time: each pod
    # before the last is told the gang is short, and the last one's arrival tries them all
    # again at once, not after the hour-long retry.
    double.put(node_obj("n1", gpus=4))
    double.put(queue_obj("team", deserved={"gpu": 4}))
    double.put(podgroup_obj("train", "team", 3))
    start(loop=LoopConfig(unschedulable_retry=3600, idle_wait=0.05, event_repeat=0.0))

    def told(name: str) -> bool:
        said = f"Pod {name}: job default/train has"
        return any(e.startswith(said) for e in events(double, "FailedScheduling"))

    double.put(member("w0", "train"))
    wait_until(lambda: told("w0"))
    double.put(member("w1", "train"))
    wait_until(lambda: told("w1"))
    assert [e for e in events(double, "FailedScheduling") if "w1" in e] == [
        "Pod w1: job default/train has 2 pods, fewer than its minMember 3"
    ]
    double.put(member("w2", "train"))
    wait_until(lambda: len(double.bound()) == 3)


def test_a_queue_at_its_limit_leaves_the_pod_pending(double: KubeDouble, start: Start) -> None:
    double.put(node_obj("n1", gpus=4))
    double.put(queue_obj("small", limit={"gpu": 1}, cards={"A100": {"deserved": 1, "limit": 2}}))
    card = {"volcano.sh/card.name": "A100"}
    double.put(in_queue("first", "small", annotations=card))
    scheduler = start()
    wait_until(lambda: double.bound() == {"first": "n1"})
    double.put(in_queue("second", "small", annotations=card))
    wait_until(lambda: any("second" in e for e in events(double, "FailedScheduling")))
    assert double.bound() == {"first": "n1"}
    assert [e for e in events(double, "FailedScheduling") if "second" in e] == [
        "Pod second: queue small: gpu requested 1, allocated 1, quota 1"
    ]
    wait_until(
        lambda: 'kgpu_pending_pods{reason="InsufficientScalarQuota"} 1.0' in metrics(scheduler)
    )
    wait_until(
        lambda: (
            status(double, "queues", "small").get("cards", {}).get("A100", {}).get("request") == 2
        )
    )
    found = status(double, "queues", "small")
    assert found["allocated"] == {"cpu": "1", "memory": "1Gi", "gpu": "1"}
    assert found["deserved"] == {"cpu": "0", "memory": "0Mi", "gpu": "0"}
    assert found["fairShare"]["gpu"] == "1"  # its limit caps what it can want
    assert found["cards"] == {"A100": {"deserved": 1, "allocated": 1, "request": 2, "capacity": 2}}
    assert conditions(found)["Valid"][0] == "True"
    text = metrics(scheduler)
    for line in (
        'kgpu_queue_allocated{queue="small",resource="gpu"} 1.0',
        'kgpu_queue_allocated{queue="small",resource="memory"} 1.073741824e+09',
        'kgpu_queue_fair_share{queue="small",resource="gpu"} 1.0',
        'kgpu_queue_deserved{queue="default",resource="gpu"} 0.0',
        'kgpu_queue_card_deserved{card="A100",queue="small"} 1.0',
        'kgpu_queue_card_allocated{card="A100",queue="small"} 1.0',
        'kgpu_queue_card_request{card="A100",queue="small"} 2.0',
        'kgpu_queue_card_capacity{card="A100",queue="small"} 2.0',
    ):
        assert line in text
    # Nothing changes: later sessions write no status.
    writes = len([r for r in double.requests if r.path.endswith("/status")])
    sessions = scheduler.loop.sessions
    double.put(node_obj("n1", gpus=4, labels={"touched": "yes"}))
    wait_until(lambda: scheduler.loop.sessions > sessions + 1)
    assert len([r for r in double.requests if r.path.endswith("/status")]) == writes
    # The queue goes: its series go with it.
    double.remove("queues", "small")
    wait_until(lambda: 'queue="small"' not in metrics(scheduler))


def test_a_podgroup_waits_while_its_min_resources_pass_the_queue_limit(
    double: KubeDouble, start: Start
) -> None:
    double.put(node_obj("n1", gpus=4))
    double.put(queue_obj("small", limit={"gpu": 2}))
    group = podgroup_obj("reserve", "small", 1)
    group["spec"]["minResources"] = {"nvidia.com/gpu": 3}
    double.put(group)
    double.put(member("r-0", "reserve"))
    start()
    message = "queue small: gpu requested 3, allocated 0, quota 2"
    wait_until(lambda: f"Pod r-0: {message}" in events(double, "FailedScheduling"))
    assert double.bound() == {}
    double.put({**group, "spec": {**group["spec"], "minResources": {"nvidia.com/gpu": 2}}})
    wait_until(lambda: double.bound() == {"r-0": "n1"})


def test_reclaim_deletes_the_victim_and_places_the_reclaimer(
    double: KubeDouble, start: Start
) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(queue_obj("a", deserved={"gpu": 1}))
    double.put(queue_obj("b", deserved={"gpu": 1}))
    double.put(in_queue("a1", "a"))
    double.put(in_queue("a2", "a"))
    start()
    wait_until(lambda: double.bound() == {"a1": "n1", "a2": "n1"})  # b is idle: a borrows
    double.put(in_queue("b1", "b"))
    wait_until(lambda: "b1" in double.bound())
    assert len(double.bound()) == 2
    gone = {"a1", "a2"} - set(double.bound())
    assert len(gone) == 1 and double.get("pods", gone.pop(), "default") is None
    # Events go out on the recorder's own threads: the deletion may be seen first.
    wait_until(lambda: len(events(double, "Reclaimed")) == 1)
    [said] = events(double, "Reclaimed")
    assert said.endswith(": reclaimed by queue b for default/b1")
    wait_until(lambda: status(double, "queues", "b").get("allocated", {}).get("gpu") == "1")
    assert status(double, "queues", "a")["allocated"]["gpu"] == "1"


def test_without_queues_no_label_or_card_name_holds_a_pod_back(
    double: KubeDouble, start: Start
) -> None:
    double.put(node_obj("n1", gpus=1))
    double.put(in_queue("p", "no-such-queue", annotations={"volcano.sh/card.name": "A100"}))
    start()
    wait_until(lambda: double.bound() == {"p": "n1"})


def test_a_malformed_queue_is_reported_and_the_rest_schedules(
    double: KubeDouble, start: Start
) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(queue_obj("good"))
    double.put(queue_obj("bad", limit={"gpu": "lots"}))
    double.put(in_queue("fine", "good"))
    double.put(in_queue("stuck", "bad"))
    start()
    wait_until(lambda: double.bound() == {"fine": "n1"})
    wait_until(lambda: any("stuck" in e for e in events(double, "FailedScheduling")))
    assert [e for e in events(double, "FailedScheduling") if "stuck" in e] == [
        "Pod stuck: queue bad does not exist or is invalid"
    ]
    problem = (
        'Queue bad: spec.limit[gpu] is "lots", expected a quantity such as 500m, 4, 1.5, 8Gi '
        "or 1e3; the queue is left out"
    )
    assert events(double, "InvalidQueue") == [f"Queue bad: {problem}"]
    wait_until(lambda: "conditions" in status(double, "queues", "bad"))
    assert conditions(status(double, "queues", "bad"))["Valid"] == (
        "False",
        "InvalidQueue",
        problem,
    )


def preempt_one_of_two(double: KubeDouble, start: Start) -> str:
    """low1 and low2 fill n1; high preempts one of them, which starts terminating."""
    double.graceful_pods = True  # a victim keeps running through its grace period
    double.put(node_obj("n1", gpus=2))
    double.put(pod_obj("low1", gpus=1, priority=1))
    double.put(pod_obj("low2", gpus=1, priority=1))
    start()
    wait_until(lambda: double.bound() == {"low1": "n1", "low2": "n1"})
    double.put(pod_obj("high", gpus=1, priority=100))
    wait_until(lambda: len(events(double, "Preempted")) == 1)
    [victim] = [p for p in double.objects("pods") if p["metadata"].get("deletionTimestamp")]
    return str(victim["metadata"]["name"])


def test_a_preemptor_waits_for_its_victim_to_terminate_and_evicts_no_more(
    double: KubeDouble, start: Start
) -> None:
    victim = preempt_one_of_two(double, start)
    double.put(node_obj("cpu-only", gpus=0))  # the cluster changes: high is tried again
    wait_until(lambda: sum("Pod high:" in e for e in events(double, "FailedScheduling")) >= 2)
    assert len(events(double, "Preempted")) == 1  # no second victim
    assert "high" not in double.bound()
    said = [e for e in events(double, "FailedScheduling") if e.startswith("Pod high:")]
    assert said[-1].startswith("Pod high: waiting for 1 pod(s) to leave node n1")
    double.remove("pods", victim, "default")  # its kubelet is done
    wait_until(lambda: double.bound().get("high") == "n1")
    survivor = ({"low1", "low2"} - {victim}).pop()
    assert double.bound() == {"high": "n1", survivor: "n1"}
    assert len(events(double, "Preempted")) == 1


def test_a_preemptor_takes_room_that_appears_while_its_victim_terminates(
    double: KubeDouble, start: Start
) -> None:
    preempt_one_of_two(double, start)
    double.put(node_obj("n2", gpus=1))
    wait_until(lambda: double.bound().get("high") == "n2")
    assert len(events(double, "Preempted")) == 1
