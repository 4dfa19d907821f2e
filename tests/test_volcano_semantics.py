"""Volcano's semantics for Volcano's objects, where they differ from kgpu's: one card type per
job, guarantee not lent, reclaimable false; kgpu's own objects keep kgpu's."""

from __future__ import annotations

from kgpu.model.queue import QueueSpec, queue_from_annotation
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, card, evicted, pending

A100 = "NVIDIA-A100-80GB"
H100 = "NVIDIA-H100-80GB"


def _node(name: str, product: str, gpus: int = 4):  # type: ignore[no-untyped-def]
    return make_node(name).gpus(gpus, product).label("nvidia.com/gpu.product", product).build()


def _snap(one_card_type: bool) -> Snap:
    team = queue_from_annotation(QueueSpec("team-a"), f'{{"{A100}": 2, "{H100}": 4}}')
    snap = Snap([_node("a100", A100), _node("h100", H100)], queues=[team])
    snap.job("flexible", "team-a", min_member=1, one_card_type=one_card_type)
    for i in range(4):
        snap.pending(card(make_pod(f"worker-{i}").gpus(1), f"{A100}|{H100}"), "flexible")
    return snap


def test_a_volcano_job_keeps_to_one_card_type() -> None:
    result = _snap(one_card_type=True).run()
    assert binds(result) == [("worker-0", "a100"), ("worker-1", "a100")]
    assert pending(result) == {
        f"worker-{i}": f"queue team-a: {A100} requested 1, allocated 2, quota 2; "
        f"job default/flexible runs on {A100}, not {H100}: all tasks of a job use one card type"
        for i in (2, 3)
    }
    assert result.pending[0].status.reason_code == "InsufficientScalarQuota"


def test_a_kgpu_job_still_spreads_over_its_alternatives() -> None:
    result = _snap(one_card_type=False).run()
    assert [node for _, node in binds(result)] == ["a100", "a100", "h100", "h100"]


def test_a_guarantee_is_not_lent_to_other_queues() -> None:
    """8 GPUs; team-b guarantees 3 and uses none: team-a gets 5, not 8."""
    queues = [QueueSpec("team-a"), QueueSpec("team-b", guarantee={"gpu": 3000})]
    snap = Snap([_node("n1", A100, 8)], queues=queues)
    for i in range(8):
        snap.pending(make_pod(f"a-{i}").gpus(1), queue="team-a")
    result = snap.run()
    assert len(binds(result)) == 5
    assert set(pending(result).values()) == {"queue team-a: gpu requested 1, allocated 5, quota 5"}
    assert result.pending[0].status.reason_code == "InsufficientScalarQuota"


def test_deserved_without_guarantee_is_still_lent() -> None:
    queues = [QueueSpec("team-a"), QueueSpec("team-b", deserved={"gpu": 3000})]
    snap = Snap([_node("n1", A100, 8)], queues=queues)
    for i in range(8):
        snap.pending(make_pod(f"a-{i}").gpus(1), queue="team-a")
    assert len(binds(snap.run())) == 8


def _reclaim(reclaimable: bool) -> Snap:
    queues = [
        QueueSpec("team-a", deserved={"gpu": 2000}, reclaimable=reclaimable),
        QueueSpec("team-b", deserved={"gpu": 2000}),
    ]
    snap = Snap([_node("n1", A100, 4)], queues=queues)
    for i in range(4):
        snap.running(make_pod(f"a-{i}").gpus(1), node="n1", queue="team-a")
    snap.pending(make_pod("b-0").gpus(1), queue="team-b")
    return snap


def test_reclaimable_false_keeps_what_a_queue_holds_past_its_deserved() -> None:
    assert evicted(_reclaim(reclaimable=True).run())
    assert evicted(_reclaim(reclaimable=False).run()) == []
