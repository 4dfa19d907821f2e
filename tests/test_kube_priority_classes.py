"""A PodGroup's ``spec.priorityClassName`` in the live scheduler: the class's value is the
job's priority (its order and what it may preempt), a class that does not exist gets the
PodGroup one Warning and the pods' own priority; over real HTTP against the API double."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.resource_types import PRIORITY_CLASSES
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from kgpu.kube.snapshot.session_input import QueueReader
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.test_kube_queues import Start, double, events, start  # noqa: F401

MISSING_HIGH = (
    'PodGroup default/urgent: spec.priorityClassName is "high", expected the name of an '
    "existing PriorityClass; the job takes its pods' highest priority until "
    "it is fixed"
)


def priority_class(name: str, value: object) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}  # fmt: skip


def podgroup(name: str, priority_class_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": 1}
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name
    return {"apiVersion": "kgpu.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}  # fmt: skip


def member(name: str, group: str, priority: int) -> dict[str, Any]:
    notes = {"scheduling.k8s.io/group-name": group}
    return pod_obj(name, gpus=1, annotations=notes, priority=priority)


def after_session(scheduler: RunningScheduler, change: Callable[[], object]) -> None:
    """Make ``change`` and wait for a session that saw it."""
    before = scheduler.loop.sessions
    change()
    wait_until(lambda: scheduler.loop.sessions > before)


# ---------------------------------------------------------------------------- reading


def test_a_podgroup_takes_its_classs_value_and_names_a_class_it_cannot_use() -> None:
    groups = [
        podgroup("urgent", "high"),
        podgroup("plain"),
        podgroup("typo", "hihg"),
        podgroup("odd", "broken"),
    ]
    classes = [priority_class("high", 1000), priority_class("broken", "1000")]
    read = QueueReader().read([], groups, classes)
    assert read.priorities == {"default/urgent": 1000}
    assert set(read.jobs) == {"default/urgent", "default/plain", "default/typo", "default/odd"}
    assert read.invalid == {}  # their pods are scheduled all the same
    fallback = "; the job takes its pods' highest priority until it is fixed"
    assert [(p.reason, p.message) for p in read.problems] == [
        ("InvalidPriorityClassName",
         'PodGroup default/odd: spec.priorityClassName is "broken", expected a PriorityClass '
         f'whose value is an integer (its value is "1000"){fallback}'),
        ("InvalidPriorityClassName",
         'PodGroup default/typo: spec.priorityClassName is "hihg", expected the name of an '
         f"existing PriorityClass{fallback}"),
    ]  # fmt: skip


def test_priority_classes_list_and_watch_cluster_wide(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
) -> None:
    double.put(priority_class("high", 1000))
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
    informer = Informer(client, PRIORITY_CLASSES, watch_seconds=30).start()
    try:
        wait_until(lambda: informer.get("high") is not None)
        double.put(priority_class("low", -5))
        wait_until(lambda: informer.get("low") is not None)
        double.remove("priorityclasses", "high")
        wait_until(lambda: informer.get("high") is None)
        assert [(o["metadata"]["name"], o["value"]) for o in informer.items()] == [("low", -5)]
    finally:
        informer.stop()
        client.close()


# ---------------------------------------------------------------------------- live


# With a batch of one pod a session, the class also decides which pod makes the batch.
@pytest.mark.parametrize("batch_size", [1, 2000])
def test_a_podgroups_priority_class_orders_it_before_higher_priority_pods(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    batch_size: int,
) -> None:
    double.put(node_obj("n1", gpus=1))
    double.put(priority_class("high", 1000))
    double.put(podgroup("steady"))  # created first: it would go first at equal priority
    double.put(member("s0", "steady", priority=10))
    double.put(podgroup("urgent", "high"))
    double.put(member("u0", "urgent", priority=0))
    start(loop=LoopConfig(batch_size=batch_size, unschedulable_retry=0.5, idle_wait=0.05))
    wait_until(lambda: double.bound() == {"u0": "n1"})
    wait_until(lambda: any("Pod s0:" in e for e in events(double, "FailedScheduling")))
    # Placed first, not by taking s0's room: s0 was never bound, nor evicted.
    assert double.get("pods", "s0", "default") is not None
    assert double.bound() == {"u0": "n1"}
    assert events(double, "Preempted") == []


def test_a_podgroups_priority_class_preempts_a_job_of_higher_priority_pods(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(podgroup("steady"))
    double.put(member("s0", "steady", priority=10))
    double.put(member("s1", "steady", priority=10))
    double.put(podgroup("urgent", "high"))
    # Pods no node fits are not retried on the clock here: only a change of the cluster,
    # the PriorityClass's creation included, tries u0 again.
    scheduler = start(loop=LoopConfig(unschedulable_retry=600, idle_wait=0.05))
    wait_until(lambda: double.bound() == {"s0": "n1", "s1": "n1"})
    # The class does not exist yet: a Warning, and the pods' priority 0 preempts no one.
    double.put(member("u0", "urgent", priority=0))
    wait_until(lambda: any("Pod u0:" in e for e in events(double, "FailedScheduling")))
    wait_until(lambda: bool(events(double, "InvalidPriorityClassName")))
    for touch in range(3):  # later sessions do not say it again
        touched = node_obj("n1", gpus=2, labels={"touched": str(touch)})
        after_session(scheduler, partial(double.put, touched))
    assert events(double, "InvalidPriorityClassName") == [f"PodGroup urgent: {MISSING_HIGH}"]
    assert events(double, "Preempted") == []
    # The class appears: its value is the job's priority, and the job takes s0's or s1's GPU.
    double.put(priority_class("high", 1000))
    wait_until(lambda: len(events(double, "Preempted")) == 1)
    [said] = events(double, "Preempted")
    assert said.endswith("preempted by default/urgent (priority 1000) in queue default")
    wait_until(lambda: double.bound().get("u0") == "n1")
    assert len(double.bound()) == 2
    assert events(double, "InvalidPriorityClassName") == [f"PodGroup urgent: {MISSING_HIGH}"]
