"""Volcano's Queues and PodGroups into kgpu's model: every field, every malformed value."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.kube.anchors.volcano import (
    is_root_queue,
    volcano_podgroup_from_k8s,
    volcano_queue_from_k8s,
)
from kgpu.kube.objects.fields import ConversionError
from kgpu.kube.snapshot.session_input import QueueReader
from kgpu.model.job import JobKey
from kgpu.model.queue import QueueSpec, guarantee_ceilings

A100 = "NVIDIA-A100-80GB"


def _queue(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": meta,
            "spec": spec}  # fmt: skip


def _group(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "training", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta,
            "spec": spec}  # fmt: skip


def test_the_seeds_queue_reads_capability_as_limit_and_card_quota() -> None:
    spec = volcano_queue_from_k8s(
        _queue(
            {"capability": {"cpu": "100", "memory": "500Gi"}},
            {"volcano.sh/card.quota": '{"NVIDIA-A100-80GB": 5}'},
        )
    )
    assert spec.name == "team-a" and spec.parent == ""
    assert spec.limit == {"cpu": 100_000, "memory": 500 * 1024, A100: 5000}
    assert spec.deserved == {A100: 5000}
    assert spec.guarantee == {} and spec.reclaimable


def test_every_queue_field() -> None:
    spec = volcano_queue_from_k8s(
        _queue(
            {
                "capability": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 8, "pods": 110},
                "deserved": {"cpu": "4", "nvidia.com/gpu": "4", "ephemeral-storage": "1Ti"},
                "guarantee": {"resource": {"nvidia.com/gpu": 2, "cpu": "500m"}},
                "weight": 3,
                "reclaimable": False,
                "parent": "research",
            }
        )
    )
    assert spec.limit == {"cpu": 8000, "memory": 64 * 1024, "gpu": 8000}
    assert spec.deserved == {"cpu": 4000, "gpu": 4000}
    assert spec.guarantee == {"gpu": 2000, "cpu": 500}
    assert spec.over_quota_weight == {"cpu": 3.0, "memory": 3.0, "gpu": 3.0}
    assert not spec.reclaimable
    assert spec.parent == "research"


def test_root_is_the_top_level() -> None:
    assert volcano_queue_from_k8s(_queue({"parent": "root"})).parent == ""
    assert is_root_queue({"metadata": {"name": "root"}})
    assert not is_root_queue(_queue({}))


Q = "Queue team-a (scheduling.volcano.sh)"


@pytest.mark.parametrize(
    ("spec", "annotations", "message"),
    [
        ({"capability": {"cpu": "lots"}}, None, f'{Q}: spec.capability[cpu] is "lots", expected'),
        ({"capability": []}, None, f"{Q}: spec.capability is [], expected a mapping"),
        ({"deserved": {"memory": "-1Gi"}}, None, f'{Q}: spec.deserved[memory] is "-1Gi"'),
        ({"capability": {"pods": "many"}}, None, f'{Q}: spec.capability[pods] is "many"'),
        ({"guarantee": {"resource": {"cpu": {}}}}, None, f"{Q}: spec.guarantee.resource[cpu]"),
        ({"guarantee": "all"}, None, f'{Q}: spec.guarantee is "all", expected a mapping'),
        (
            {"capability": {"cpu": "1"}, "deserved": {"cpu": "2"}},
            None,
            f'{Q}: spec.deserved[cpu] is "2", expected at most spec.capability[cpu] (1)',
        ),
        (
            {"capability": {"nvidia.com/gpu": 1}, "guarantee": {"resource": {"nvidia.com/gpu": 2}}},
            None,
            f'{Q}: spec.guarantee.resource[nvidia.com/gpu] is "2", expected at most '
            "spec.capability[nvidia.com/gpu] (1)",
        ),
        ({"weight": 0}, None, f"{Q}: spec.weight is 0, expected a whole number, at least 1"),
        ({"weight": 1.5}, None, f"{Q}: spec.weight is 1.5, expected a whole number"),
        ({"weight": True}, None, f"{Q}: spec.weight is true, expected a whole number"),
        ({"reclaimable": "no"}, None, f'{Q}: spec.reclaimable is "no", expected true or false'),
        ({"parent": 7}, None, f"{Q}: spec.parent is 7, expected a string"),
        ({"parent": "team-a"}, None, f'{Q}: spec.parent is "team-a", expected the name of'),
        ({}, {"volcano.sh/card.quota": "five"}, f"{Q}: annotation volcano.sh/card.quota is"),
        ({}, {"volcano.sh/card.quota": '{"A": -1}'}, f'{Q}: annotation volcano.sh/card.quota["A"]'),
        ({}, {"volcano.sh/card.quota": '{"cpu": 1}'}, f"{Q}: annotation volcano.sh/card.quota key"),
    ],
)
def test_malformed_queue_fields_are_named(
    spec: dict[str, Any], annotations: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(ConversionError) as caught:
        volcano_queue_from_k8s(_queue(spec, annotations))
    assert str(caught.value).startswith(message)


def test_a_queue_without_name_or_spec() -> None:
    with pytest.raises(ConversionError, match=r"metadata.name is missing"):
        volcano_queue_from_k8s({"metadata": {}, "spec": {}})
    with pytest.raises(ConversionError, match=r"spec is 3, expected a mapping"):
        volcano_queue_from_k8s({"metadata": {"name": "q"}, "spec": 3})


def test_every_podgroup_field() -> None:
    job = volcano_podgroup_from_k8s(
        _group(
            {
                "minMember": 4,
                "queue": "team-a",
                "priorityClassName": "high",
                "minResources": {"cpu": "4", "nvidia.com/gpu": "4", "pods": "4"},
            },
            {"volcano.sh/card.request": '{"NVIDIA-A100-80GB|NVIDIA-H100-80GB": 4}'},
        )
    )
    assert job.key == JobKey("ml/training")
    assert (job.queue, job.min_member, job.max_member) == ("team-a", 4, 0)
    assert job.min_resources == {"cpu": 4000, "gpu": 4000}
    assert job.card_request == {(A100, "NVIDIA-H100-80GB"): 4}
    assert job.one_card_type


def test_podgroup_defaults_are_volcanos() -> None:
    job = volcano_podgroup_from_k8s(_group({}))
    assert (job.queue, job.min_member, job.card_request) == ("default", 1, {})


@pytest.mark.parametrize(
    ("status", "enqueued"),
    [
        (None, False),
        ({}, False),
        ({"phase": "Pending"}, False),
        ({"phase": "Inqueue"}, True),
        ({"phase": "Running"}, None),
        ({"phase": "Unknown"}, None),
        ({"phase": "Completed"}, None),
    ],
)
def test_the_phase_is_read_as_the_podgroups_admission(
    status: dict[str, Any] | None, enqueued: bool | None
) -> None:
    obj = _group({})
    if status is not None:
        obj["status"] = status
    assert volcano_podgroup_from_k8s(obj).enqueued is enqueued


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"phase": "Queued"}, 'status.phase is "Queued", expected one of Pending, Inqueue,'),
        ({"phase": 1}, "status.phase is 1, expected a string"),
        ("Inqueue", 'status is "Inqueue", expected a mapping'),
    ],
)
def test_a_malformed_phase_is_named(status: object, message: str) -> None:
    obj = {**_group({}), "status": status}
    with pytest.raises(ConversionError) as caught:
        volcano_podgroup_from_k8s(obj)
    assert str(caught.value).startswith(f"{G}: {message}")


G = "PodGroup ml/training (scheduling.volcano.sh)"


@pytest.mark.parametrize(
    ("spec", "annotations", "message"),
    [
        ({"minMember": 0}, None, f"{G}: spec.minMember is 0, expected a whole number, at least 1"),
        ({"minMember": "4"}, None, f'{G}: spec.minMember is "4", expected a whole number'),
        ({"queue": ["a"]}, None, f'{G}: spec.queue is ["a"], expected a string'),
        ({"priorityClassName": 1}, None, f"{G}: spec.priorityClassName is 1, expected a string"),
        ({"minResources": {"cpu": "x"}}, None, f'{G}: spec.minResources[cpu] is "x"'),
        ({}, {"volcano.sh/card.request": "{"}, f"{G}: annotation volcano.sh/card.request is"),
        (
            {},
            {"volcano.sh/card.request": '{"A||B": 1}'},
            f"{G}: annotation volcano.sh/card.request",
        ),
        (
            {},
            {"volcano.sh/card.request": '{"A": 1.5}'},
            f'{G}: annotation volcano.sh/card.request["A"]',
        ),
    ],
)
def test_malformed_podgroup_fields_are_named(
    spec: dict[str, Any], annotations: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(ConversionError) as caught:
        volcano_podgroup_from_k8s(_group(spec, annotations))
    assert str(caught.value).startswith(message)


def test_a_kgpu_queue_of_the_same_name_wins_and_volcanos_is_warned() -> None:
    ours = {"apiVersion": "kgpu.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": "team-a", "uid": "k"}, "spec": {"limit": {"gpu": 1}}}  # fmt: skip
    theirs = {**_queue({"capability": {"nvidia.com/gpu": 9}}), "metadata": {"name": "team-a"}}
    root = {**_queue({}), "metadata": {"name": "root"}}
    objects = QueueReader().read([ours, theirs, root], [])
    assert [q.limit for q in objects.queues] == [{"gpu": 1000}]
    assert objects.volcano == set()
    [problem] = objects.problems
    assert problem.reason == "Shadowed"
    assert problem.message == (
        "Queue team-a (scheduling.volcano.sh) is not used: a kgpu.io Queue of that name "
        "exists, and kgpu uses it; rename or delete one of them"
    )


def test_volcano_objects_are_read_beside_kgpus_and_bad_ones_left_out_alone() -> None:
    bad = {**_queue({"weight": -1}), "metadata": {"name": "bad"}}
    group = _group({"queue": "team-a", "minMember": 2})
    broken = {**_group({"minMember": 0}), "metadata": {"name": "broken", "namespace": "ml"}}
    objects = QueueReader().read([_queue({}), bad], [group, broken])
    assert [q.name for q in objects.queues] == ["team-a"]
    assert objects.invalid["bad"].startswith("Queue bad (scheduling.volcano.sh): spec.weight")
    assert objects.jobs[JobKey("ml/training")].min_member == 2
    assert objects.invalid["ml/broken"].endswith("its pods are not scheduled until it is fixed")
    assert objects.volcano == {"team-a", "bad", "ml/training", "ml/broken"}


def test_guarantee_is_held_back_from_every_other_queue() -> None:
    total = {"gpu": 8000, "cpu": 64_000}
    a = QueueSpec("a", guarantee={"gpu": 3000})
    b = QueueSpec("b", limit={"gpu": 6000})
    c = QueueSpec("c", parent="a", guarantee={"gpu": 2000})
    out = {q.name: q for q in guarantee_ceilings([a, b, c], total)}
    assert out["a"].limit == {}  # its own and its child's are its own: no ceiling
    assert out["b"].limit == {"gpu": 5000}  # min(6, 8 - 3): c's sits inside a's
    assert out["c"].limit == {}  # b guarantees nothing
    d = QueueSpec("d", parent="a")
    assert guarantee_ceilings([a, c, d], total)[2].limit == {"gpu": 6000}  # c's is not d's
    assert guarantee_ceilings([b], total) == [b]
