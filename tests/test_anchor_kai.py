"""KAI Scheduler's Queues and PodGroups read into kgpu's model (kgpu.kube.anchors.kai): every
field mapping, every malformed value, and how the session's reader uses them beside kgpu's
own objects (shadowing by name, min-runtime inherited)."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.kube.anchors.kai import (
    UNLIMITED_QUOTA,
    podgroup_from_kai,
    queue_from_kai,
    with_inherited_min_runtime,
)
from kgpu.kube.objects.fields import ConversionError
from kgpu.kube.snapshot.session_input import QueueReader
from kgpu.model.job import JobKey
from kgpu.model.queue import QueueSpec

Obj = dict[str, Any]


def kai_queue(name: str = "test", **spec: Any) -> Obj:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def kai_group(name: str = "pg-a", namespace: str = "team", **spec: Any) -> Obj:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": "2025-01-02T03:04:05Z",
        },
        "spec": spec,
    }


# ---------------------------------------------------------------------------- Queue fields


@pytest.mark.parametrize(
    ("resources", "deserved", "limit"),
    [
        # KAI's units: GPUs (fractions), millicores, megabytes of 10^6 bytes
        ({"gpu": {"quota": 2, "limit": 4}}, {"gpu": 2000}, {"gpu": 4000}),
        ({"gpu": {"quota": 0.5, "limit": 1.5}}, {"gpu": 500}, {"gpu": 1500}),
        ({"cpu": {"quota": 2000, "limit": 4000}}, {"cpu": 2000}, {"cpu": 4000}),
        # 4096 MB = 4096e6 bytes = 3906.25 MiB, rounded down as capacities are
        ({"memory": {"quota": 4096, "limit": 8192}}, {"memory": 3906}, {"memory": 7812}),
        # -1: a quota no demand exceeds; a limit of -1 is none
        ({"gpu": {"quota": -1, "limit": -1}}, {"gpu": UNLIMITED_QUOTA}, {}),
        # limit 0 or unset: nothing beyond the quota
        ({"gpu": {"quota": 2}}, {"gpu": 2000}, {"gpu": 2000}),
        ({"gpu": {"quota": 2, "limit": 0}}, {"gpu": 2000}, {"gpu": 2000}),
        ({"gpu": {}}, {"gpu": 0}, {"gpu": 0}),
        # no guarantee, no limit
        ({"gpu": {"quota": 0, "limit": -1}}, {"gpu": 0}, {}),
        # -1 quota with a limit, or a limit below the quota: the limit caps both
        ({"gpu": {"quota": -1, "limit": 3}}, {"gpu": 3000}, {"gpu": 3000}),
        ({"gpu": {"quota": 4, "limit": 3}}, {"gpu": 3000}, {"gpu": 3000}),
        # -1 quota and no limit given: no limit
        ({"gpu": {"quota": -1}}, {"gpu": UNLIMITED_QUOTA}, {}),
        # a resource not named is neither guaranteed nor limited
        ({}, {}, {}),
        ({"gpu": None}, {}, {}),
    ],
)
def test_queue_resources(resources: Obj, deserved: dict[str, int], limit: dict[str, int]) -> None:
    queue = queue_from_kai(kai_queue(resources=resources))
    assert (dict(queue.deserved), dict(queue.limit)) == (deserved, limit)


def test_queue_parent_priority_weight_and_min_runtime() -> None:
    queue = queue_from_kai(
        kai_queue(
            "ml-team",
            parentQueue="research-team",
            priority=200,
            resources={"cpu": {"quota": 500, "overQuotaWeight": 2}, "gpu": {"overQuotaWeight": 0}},
            preemptMinRuntime="90s",
            reclaimMinRuntime="1h30m",
        )
    )
    assert queue == QueueSpec(
        name="ml-team",
        parent="research-team",
        deserved={"cpu": 500, "gpu": 0},
        limit={"cpu": 500, "gpu": 0},
        over_quota_weight={"cpu": 2.0, "gpu": 0.0},
        priority=200,
        min_runtime_s=5400.0,  # the longer of the two
    )


def test_queue_defaults_are_kais() -> None:
    queue = queue_from_kai(kai_queue("q", resources={"gpu": {"quota": 1, "limit": -1}}))
    assert (queue.parent, queue.priority, queue.min_runtime_s) == ("", 100, 0.0)
    assert queue.weight("gpu") == 1.0  # unset weight: kgpu's default


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("0s", 0.0),
        ("300s", 300.0),
        ("10m", 600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("2m30s", 150.0),
    ],
)
def test_min_runtime_durations(text: str, seconds: float) -> None:
    assert queue_from_kai(kai_queue(preemptMinRuntime=text)).min_runtime_s == seconds
    assert queue_from_kai(kai_queue(reclaimMinRuntime=text)).min_runtime_s == seconds


DURATION = 'a duration of at least 0 such as "90s", "10m" or "1h30m"'


@pytest.mark.parametrize(
    ("obj", "field", "value", "expected"),
    [
        ({"metadata": {}}, "metadata.name", "missing", "a non-empty string"),
        ({"metadata": {"name": 3}}, "metadata.name", "3", "a non-empty string"),
        ({"metadata": {"name": "q"}, "spec": []}, "spec", "[]", "a mapping"),
        (kai_queue(resources=[1]), "spec.resources", "[1]", "a mapping"),
        (
            kai_queue(resources={"nvidia.com/gpu": {"quota": 1}}),
            "spec.resources.nvidia.com/gpu",
            '{"quota": 1}',
            "only gpu, cpu and memory",
        ),
        (
            kai_queue(resources={"gpu": 2}),
            "spec.resources.gpu",
            "2",
            "a mapping with quota, limit and overQuotaWeight",
        ),
        (
            kai_queue(resources={"gpu": {"quota": "2"}}),
            "spec.resources.gpu.quota",
            '"2"',
            "a number of at least 0, or -1",
        ),
        (
            kai_queue(resources={"gpu": {"quota": -2}}),
            "spec.resources.gpu.quota",
            "-2",
            "a number of at least 0, or -1",
        ),
        (
            kai_queue(resources={"cpu": {"quota": True}}),
            "spec.resources.cpu.quota",
            "true",
            "a number of at least 0, or -1",
        ),
        (
            kai_queue(resources={"memory": {"limit": -0.5}}),
            "spec.resources.memory.limit",
            "-0.5",
            "a number of at least 0, or -1",
        ),
        (
            kai_queue(resources={"gpu": {"limit": float("inf")}}),
            "spec.resources.gpu.limit",
            "Infinity",
            "a number of at least 0, or -1",
        ),
        (
            kai_queue(resources={"gpu": {"overQuotaWeight": -1}}),
            "spec.resources.gpu.overQuotaWeight",
            "-1",
            "a number of at least 0",
        ),
        (
            kai_queue(resources={"gpu": {"overQuotaWeight": "2"}}),
            "spec.resources.gpu.overQuotaWeight",
            '"2"',
            "a number of at least 0",
        ),
        (kai_queue(priority="high"), "spec.priority", '"high"', "an integer"),
        (kai_queue(priority=1.5), "spec.priority", "1.5", "an integer"),
        (kai_queue(parentQueue=7), "spec.parentQueue", "7", "a string"),
        (
            kai_queue(preemptMinRuntime="5 minutes"),
            "spec.preemptMinRuntime",
            '"5 minutes"',
            DURATION,
        ),
        (kai_queue(reclaimMinRuntime="-5s"), "spec.reclaimMinRuntime", '"-5s"', DURATION),
        (kai_queue(reclaimMinRuntime=300), "spec.reclaimMinRuntime", "300", DURATION),
        (kai_queue(preemptMinRuntime="10"), "spec.preemptMinRuntime", '"10"', DURATION),
        (kai_queue(preemptMinRuntime="1d"), "spec.preemptMinRuntime", '"1d"', DURATION),
    ],
)
def test_malformed_queues_name_object_field_value_and_expected(
    obj: Obj, field: str, value: str, expected: str
) -> None:
    with pytest.raises(ConversionError) as caught:
        queue_from_kai(obj)
    name = obj.get("metadata", {}).get("name")
    ref = f"KAI Queue {name if isinstance(name, str) else '(no name)'}"
    assert str(caught.value) == f"{ref}: {field} is {value}, expected {expected}"


def test_min_runtime_is_inherited_from_the_nearest_ancestor_that_sets_one() -> None:
    queues = [
        QueueSpec("root"),
        QueueSpec("b", parent="root", min_runtime_s=600.0),
        QueueSpec("c", parent="b"),
        QueueSpec("leaf1", parent="c"),
        QueueSpec("leaf2", parent="c", min_runtime_s=180.0),
    ]
    out = {
        q.name: q.min_runtime_s for q in with_inherited_min_runtime(queues, {"root", "c", "leaf1"})
    }
    assert out == {"root": 0.0, "b": 600.0, "c": 600.0, "leaf1": 600.0, "leaf2": 180.0}


# ---------------------------------------------------------------------------- PodGroup fields


def test_podgroup_as_kais_pod_grouper_writes_it() -> None:
    job = podgroup_from_kai(
        kai_group(
            minMember=2,
            queue="test",
            priorityClassName="train",
            markUnschedulable=True,
            schedulingBackoff=1,
            topologyConstraint={},
        )
    )
    assert (job.key, job.queue, job.min_member, job.priority) == (
        JobKey("team/pg-a"),
        "test",
        2,
        0,
    )
    assert job.created == pytest.approx(1735787045.0)


def test_podgroup_defaults() -> None:
    job = podgroup_from_kai(kai_group(minMember=None))
    assert (job.queue, job.min_member, job.max_member) == ("", 1, 0)


@pytest.mark.parametrize(
    ("spec", "field", "value", "expected"),
    [
        ({"minMember": 0}, "spec.minMember", "0", "a whole number, at least 1"),
        ({"minMember": "2"}, "spec.minMember", '"2"', "a whole number, at least 1"),
        ({"minMember": 1.5}, "spec.minMember", "1.5", "a whole number, at least 1"),
        ({"queue": ["a"]}, "spec.queue", '["a"]', "a string"),
        ({"priorityClassName": 5}, "spec.priorityClassName", "5", "a string"),
        (
            {"subGroups": [{"name": "workers", "minMember": 2}]},
            "spec.subGroups",
            '[{"name": "workers", "minMember": 2}]',
            "none: kgpu does not place KAI sub-groups (docs/MIGRATING.md)",
        ),
        (
            {"minSubGroup": 2},
            "spec.minSubGroup",
            "2",
            "none: kgpu does not place KAI sub-groups (docs/MIGRATING.md)",
        ),
    ],
)
def test_malformed_podgroups_name_object_field_value_and_expected(
    spec: Obj, field: str, value: str, expected: str
) -> None:
    with pytest.raises(ConversionError) as caught:
        podgroup_from_kai(kai_group(**spec))
    assert str(caught.value) == f"KAI PodGroup team/pg-a: {field} is {value}, expected {expected}"


def test_podgroup_without_a_name_or_spec() -> None:
    with pytest.raises(ConversionError, match=r"KAI PodGroup team/\(no name\): metadata.name"):
        podgroup_from_kai(
            {"apiVersion": "scheduling.run.ai/v2alpha2", "metadata": {"namespace": "team"}}
        )
    bad = kai_group()
    bad["spec"] = "x"
    with pytest.raises(ConversionError, match='spec is "x", expected a mapping'):
        podgroup_from_kai(bad)


# ---------------------------------------------------------------------------- beside kgpu's own


def kgpu_queue(name: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_the_reader_reads_kai_and_kgpu_objects_each_by_its_own_mapping() -> None:
    objects = QueueReader().read(
        [
            kai_queue("kai-q", resources={"gpu": {"quota": 1, "limit": 2}}),
            kgpu_queue("own", limit={"gpu": 3}),
        ],
        [kai_group("pg", minMember=2, queue="kai-q")],
    )
    specs = {q.name: q for q in objects.queues}
    assert dict(specs["kai-q"].limit) == {"gpu": 2000}
    assert dict(specs["own"].limit) == {"gpu": 3000}
    assert objects.jobs[JobKey("team/pg")].min_member == 2
    assert not objects.problems


def test_a_kgpu_queue_wins_over_a_kai_queue_of_the_same_name() -> None:
    kai = kai_queue("shared", resources={"gpu": {"quota": 1, "limit": 1}})
    objects = QueueReader().read([kai, kgpu_queue("shared", limit={"gpu": 5})], [])
    [queue] = objects.queues
    assert dict(queue.limit) == {"gpu": 5000}
    assert objects.queue_objs["shared"]["apiVersion"] == "kgpu.io/v1alpha1"
    [problem] = objects.problems
    assert problem.obj is kai
    assert problem.message == (
        'KAI Queue shared: metadata.name is "shared", expected a name no kgpu.io Queue has: '
        "the kgpu.io Queue shared is used, this one is left out"
    )
    assert "shared" not in objects.invalid  # the queue itself is usable: kgpu's


def test_a_kgpu_podgroup_wins_over_a_kai_podgroup_of_the_same_name() -> None:
    own = {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "team"},
        "spec": {"minMember": 3},
    }
    kai = kai_group("pg", minMember=1)
    objects = QueueReader().read([], [kai, own])
    assert objects.jobs[JobKey("team/pg")].min_member == 3
    [problem] = objects.problems
    assert (problem.obj, problem.reason) == (kai, "InvalidPodGroup")
    assert "the kgpu.io PodGroup team/pg is used" in problem.message
    assert JobKey("team/pg") not in objects.invalid


def test_a_malformed_kai_object_is_refused_alone() -> None:
    objects = QueueReader().read(
        [kai_queue("bad", priority="x"), kai_queue("good")],
        [kai_group("broken", minMember=0), kai_group("fine")],
    )
    assert [q.name for q in objects.queues] == ["good"]
    assert objects.invalid["bad"].startswith('KAI Queue bad: spec.priority is "x"')
    assert objects.invalid[JobKey("team/broken")].startswith(
        "KAI PodGroup team/broken: spec.minMember is 0"
    )
    assert JobKey("team/fine") in objects.jobs


def test_the_reader_gives_kai_queues_their_inherited_min_runtime_live() -> None:
    reader = QueueReader()
    parent = kai_queue("parent", reclaimMinRuntime="10m")
    child = kai_queue("child", parentQueue="parent")
    first = {q.name: q.min_runtime_s for q in reader.read([parent, child], []).queues}
    assert first == {"parent": 600.0, "child": 600.0}
    # edited live: the parent's new value reaches the child, though the child is unchanged
    parent = {
        **kai_queue("parent", reclaimMinRuntime="20m"),
        "metadata": {"name": "parent", "resourceVersion": "2"},
    }
    second = {q.name: q.min_runtime_s for q in reader.read([parent, child], []).queues}
    assert second == {"parent": 1200.0, "child": 1200.0}
