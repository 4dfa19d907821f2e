"""Volcano's PodGroups are admitted before their pods exist: enqueue writes them Inqueue (the
job controller waits for it), holds their minimum in the queue, and never judges them again."""

from __future__ import annotations

from typing import Any

from kgpu.actions.session_runner import SessionConfig, run_session
from kgpu.config import load_profile
from kgpu.framework.session_result import SessionResult
from kgpu.kube.live.status_writer import podgroup_statuses
from kgpu.model.queue import QueueSpec, queue_from_annotation
from kgpu.plugins.registry import build_scheduler
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds

A100 = "NVIDIA-A100-80GB"
GPU = "gpu"


def _snap(limit: int = 5) -> Snap:
    node = make_node("n1").gpus(8, A100).label("nvidia.com/gpu.product", A100).build()
    return Snap([node], queues=[QueueSpec("team-a", limit={GPU: limit * 1000})])


def _group(snap: Snap, name: str, gpus: int, enqueued: bool | None, **kw: Any) -> None:
    created = float(len(snap.jobs))  # in the order written: enqueue judges the oldest first
    snap.job(name, "team-a", min_member=gpus, min_resources={GPU: gpus * 1000},
             enqueued=enqueued, created=created, **kw)  # fmt: skip


def _run(snap: Snap) -> SessionResult:
    jobs = {str(j.key) for j in snap.jobs}
    config = SessionConfig()
    result = run_session(snap.snapshot(), build_scheduler(load_profile("bestfit")), config, jobs)
    snap.state.check_invariants()
    return result


def _phases(result: SessionResult) -> dict[str, str]:
    return {k.split("/")[1]: s["phase"] for k, s in podgroup_statuses(result.jobs, {}).items()}


def _events(result: SessionResult) -> list[tuple[str, str, str, str]]:
    return [
        (e.pod.split("/")[1], e.type, e.reason, e.message)
        for e in result.events
        if e.kind == "PodGroup"
    ]


def test_a_podless_podgroup_that_fits_its_queue_is_admitted_inqueue() -> None:
    snap = _snap()
    _group(snap, "training", 4, enqueued=False)
    result = _run(snap)
    assert _phases(result) == {"training": "Inqueue"}
    assert _events(result) == []


def test_one_over_its_queues_capability_stays_pending_with_the_reason() -> None:
    snap = _snap()
    _group(snap, "training", 6, enqueued=False)
    result = _run(snap)
    assert _phases(result) == {"training": "Pending"}
    message = "queue team-a: gpu requested 6, allocated 0, quota 5"
    assert _events(result) == [("training", "Warning", "InsufficientScalarQuota", message)]
    status = podgroup_statuses(result.jobs, {})["default/training"]
    unschedulable = status["conditions"][1]
    assert (unschedulable["status"], unschedulable["reason"], unschedulable["message"]) == (
        "True",
        "InsufficientScalarQuota",
        message,
    )


def test_two_whose_minimums_pass_the_quota_together_only_the_first_is_let_in() -> None:
    snap = _snap()
    _group(snap, "first", 3, enqueued=False)
    _group(snap, "second", 3, enqueued=False)
    result = _run(snap)
    assert _phases(result) == {"first": "Inqueue", "second": "Pending"}
    assert [(name, reason) for name, _, reason, _ in _events(result)] == [
        ("second", "InsufficientScalarQuota")
    ]


def test_twenty_at_once_are_let_in_only_up_to_the_quota() -> None:
    snap = _snap()
    for i in range(20):
        _group(snap, f"job-{i:02}", 1, enqueued=False)
    phases = _phases(_run(snap))
    assert [n for n, p in sorted(phases.items()) if p == "Inqueue"] == [
        f"job-{i:02}" for i in range(5)
    ]


def test_an_inqueue_podgroup_holds_its_minimum_against_later_ones() -> None:
    """What a restarted kgpu reads back: the phase is on the object."""
    snap = _snap()
    _group(snap, "admitted", 4, enqueued=True)
    _group(snap, "later", 2, enqueued=False)
    result = _run(snap)
    assert _phases(result) == {"admitted": "Inqueue", "later": "Pending"}
    assert _events(result)[0][3] == "queue team-a: gpu requested 2, allocated 4, quota 5"


def test_its_hold_is_what_its_running_pods_do_not_already_hold() -> None:
    """Its phase not yet written Running (a write in flight): not counted twice."""
    snap = _snap()
    snap.job("admitted", "team-a", min_member=3, min_resources={GPU: 4000}, enqueued=True)
    for i in range(3):
        snap.running(make_pod(f"w-{i}").gpus(1), node="n1", job="admitted")
    _group(snap, "later", 1, enqueued=False)
    _group(snap, "last", 1, enqueued=False)
    # 3 held + 1 still held back for "admitted" + 1 for "later" = 5: "last" waits.
    assert _phases(_run(snap)) == {"admitted": "Running", "later": "Inqueue", "last": "Pending"}


def test_an_inqueue_podgroup_is_not_judged_again_and_its_pods_are_placed() -> None:
    snap = _snap(limit=4)
    _group(snap, "admitted", 4, enqueued=True)
    # Its minimum is held in the queue; judged again, it would not fit beside itself.
    for i in range(4):
        snap.pending(make_pod(f"w-{i}").gpus(1), job="admitted")
    result = _run(snap)
    assert sorted(pod for pod, _ in binds(result)) == [f"w-{i}" for i in range(4)]
    assert _phases(result) == {"admitted": "Running"}
    assert _events(result) == []


def test_an_inqueue_podgroups_card_request_counts_against_the_card_quota() -> None:
    node = make_node("n1").gpus(8, A100).label("nvidia.com/gpu.product", A100).build()
    team = queue_from_annotation(QueueSpec("team-a"), f'{{"{A100}": 5}}')
    snap = Snap([node], queues=[team])
    snap.job("admitted", "team-a", card_request={(A100,): 4}, enqueued=True, created=0.0)
    snap.job("later", "team-a", card_request={(A100,): 2}, enqueued=False, created=1.0)
    result = _run(snap)
    assert _phases(result) == {"admitted": "Inqueue", "later": "Pending"}
    assert _events(result) == [
        (
            "later",
            "Warning",
            "InsufficientScalarQuota",
            f"queue team-a: {A100} requested 2, allocated 4, quota 5",
        )
    ]


def test_kgpus_own_podgroups_without_pods_are_not_judged() -> None:
    snap = _snap()
    _group(snap, "kgpu-job", 4, enqueued=None)
    result = _run(snap)
    assert result.jobs == [] and _events(result) == []
