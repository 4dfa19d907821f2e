"""Capacity cards: the three examples of Volcano's design, refusals with numbers, the tree."""

from __future__ import annotations

from kgpu.model.queue import QueueSpec, queue_from_annotation
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, card, evicted, nominated, pending

A100 = "NVIDIA-A100-80GB"
H100 = "NVIDIA-H100-80GB"
MPS = f"{A100}/mps-80g*1/8"
GI = 1024


def _node(name: str, product: str, gpus: int = 4):  # type: ignore[no-untyped-def]
    return make_node(name).gpus(gpus, product).label("nvidia.com/gpu.product", product).build()


def _team_a(quota: str, **kw: object) -> QueueSpec:
    base = QueueSpec("team-a", limit={"cpu": 100_000, "memory": 500 * GI}, **kw)  # type: ignore[arg-type]
    return queue_from_annotation(base, quota)


def test_example_1_basic_card_quota() -> None:
    """2 nodes × 4 A100, team-a quota 5, a job asking 4: enqueued (4 ≤ 5) and scheduled."""
    snap = Snap([_node("n1", A100), _node("n2", A100)], queues=[_team_a(f'{{"{A100}": 5}}')])
    snap.job("training", "team-a", min_member=4, card_request={(A100,): 4})
    for i in range(4):
        snap.pending(card(make_pod(f"worker-{i}").gpus(1), A100), job="training")
    result = snap.run()
    assert sorted(b for b, _ in binds(result)) == [f"worker-{i}" for i in range(4)]
    assert result.allocated["team-a"][A100] == 4000
    assert result.pending == []


def test_example_2_multi_card_selection_tries_a100_first_then_h100() -> None:
    """A100|H100: A100 while its quota lasts, then H100."""
    snap = Snap(
        [_node("a100", A100), _node("h100", H100)],
        queues=[_team_a(f'{{"{A100}": 2, "{H100}": 4}}')],
    )
    snap.job("flexible-training", "team-a", min_member=1, card_request={(A100, H100): 4})
    for i in range(4):
        snap.pending(card(make_pod(f"worker-{i}").gpus(1), f"{A100}|{H100}"), "flexible-training")
    result = snap.run()
    assert binds(result) == [
        ("worker-0", "a100"),
        ("worker-1", "a100"),
        ("worker-2", "h100"),
        ("worker-3", "h100"),
    ]
    assert result.allocated["team-a"][A100] == 2000
    assert result.allocated["team-a"][H100] == 2000


def test_example_2_with_a100_quota_to_spare_stays_on_a100() -> None:
    snap = Snap([_node("a100", A100), _node("h100", H100)], queues=[_team_a(f'{{"{A100}": 5}}')])
    snap.job("flexible-training", "team-a", card_request={(A100, H100): 4})
    for i in range(4):
        snap.pending(card(make_pod(f"worker-{i}").gpus(1), f"{A100}|{H100}"), "flexible-training")
    result = snap.run()
    assert [node for _, node in binds(result)] == ["a100"] * 4


def test_example_3_mps_shared_gpu() -> None:
    """16 pods of one MPS replica each share the 4 A100 of one node (8 replicas a GPU)."""
    node = (
        make_node("mps")
        .gpus(4, A100, 81920)
        .label("nvidia.com/gpu.product", A100)
        .label("nvidia.com/gpu.count", "4")
        .label("nvidia.com/gpu.memory", "81920")
        .label("nvidia.com/gpu.replicas", "8")
        .build()
    )
    snap = Snap([node], queues=[_team_a(f'{{"{MPS}": 32}}')])
    snap.job("inference", "team-a", card_request={(MPS,): 16})
    for i in range(16):  # nvidia.com/gpu.shared: 1 on an 8-replica GPU is 1/8 of it
        snap.pending(card(make_pod(f"infer-{i}").share(125).cpu(500).memory(GI), MPS), "inference")
    result = snap.run()
    assert len(result.binds) == 16 and {b.node for b in result.binds} == {"mps"}
    assert result.allocated["team-a"][MPS] == 16_000
    assert snap.state.used_gpu_milli == 2000


def test_enqueue_refuses_a_card_request_past_the_quota_with_the_numbers() -> None:
    snap = Snap([_node("n1", A100, 8)], queues=[_team_a(f'{{"{A100}": 5}}')])
    for i in range(3):
        snap.running(card(make_pod(f"old-{i}").gpus(1), A100), node="n1", queue="team-a")
    snap.job("training", "team-a", min_member=4, card_request={(A100,): 4})
    for i in range(4):
        snap.pending(card(make_pod(f"worker-{i}").gpus(1), A100), job="training")
    result = snap.run()
    message = f"queue team-a: {A100} requested 4, allocated 3, quota 5"
    assert result.binds == []
    assert set(pending(result).values()) == {message}
    assert result.pending[0].status.reason_code == "InsufficientScalarQuota"
    events = [(e.pod, e.reason, e.message) for e in result.events if e.kind == "PodGroup"]
    assert events == [("default/training", "InsufficientScalarQuota", message)]


def test_allocation_stops_at_the_card_quota_and_a_card_without_quota_is_refused() -> None:
    snap = Snap([_node("n1", A100, 8), _node("t4", "T4")], queues=[_team_a(f'{{"{A100}": 2}}')])
    for i in range(3):
        snap.pending(card(make_pod(f"p-{i}").gpus(1), A100), queue="team-a")
    snap.pending(card(make_pod("t4-pod").gpus(1), "T4"), queue="team-a")
    result = snap.run()
    assert binds(result) == [("p-0", "n1"), ("p-1", "n1")]
    assert pending(result) == {
        "p-2": f"queue team-a: {A100} requested 1, allocated 2, quota 2",
        "t4-pod": "queue team-a: T4 requested 1, allocated 0, quota 0",
    }


def test_card_unlimited_cpu_memory_lets_card_pods_past_cpu_and_memory_limits() -> None:
    queue = _team_a(f'{{"{A100}": 4}}')
    queue = QueueSpec(queue.name, deserved=queue.deserved, limit={**queue.limit, "cpu": 1000})
    for flag, expect in ((False, []), (True, [("big-cpu", "n1")])):
        snap = Snap([_node("n1", A100)], queues=[queue])
        snap.job("j", "team-a")
        snap.pending(card(make_pod("big-cpu").gpus(1).cpu(8000), A100), job="j")
        result = snap.run(args={"capacity-card": {"cardUnlimitedCpuMemory": flag}})
        assert binds(result) == expect
        if not flag:
            assert pending(result) == {
                "big-cpu": "queue team-a: cpu requested 8, allocated 0, quota 1"
            }
            assert result.pending[0].status.reason_code == "InsufficientCPUQuota"


def test_a_queues_own_card_unlimited_cpu_memory_frees_its_own_limits_only() -> None:
    """The Queue field: team-a's CPU limit stops no card pod, team-b's (no flag) does, and
    a parent's limit still holds team-a's card pods."""
    quota = f'{{"{A100}": 4}}'
    free = queue_from_annotation(
        QueueSpec("team-a", limit={"cpu": 1000}, card_unlimited_cpu_memory=True), quota
    )
    held = queue_from_annotation(QueueSpec("team-b", limit={"cpu": 1000}), quota)
    snap = Snap([_node("n1", A100)], queues=[free, held])
    snap.pending(card(make_pod("a-big").gpus(1).cpu(8000), A100), queue="team-a")
    snap.pending(make_pod("a-plain").cpu(8000), queue="team-a")
    snap.pending(card(make_pod("b-big").gpus(1).cpu(8000), A100), queue="team-b")
    result = snap.run()
    assert binds(result) == [("a-big", "n1")]
    assert pending(result) == {
        "a-plain": "queue team-a: cpu requested 8, allocated 8, quota 1",
        "b-big": "queue team-b: cpu requested 8, allocated 0, quota 1",
    }
    org = QueueSpec("org", limit={"cpu": 1000})
    child = queue_from_annotation(
        QueueSpec("team-a", parent="org", card_unlimited_cpu_memory=True), quota
    )
    snap = Snap([_node("n1", A100)], queues=[org, child])
    snap.pending(card(make_pod("a-big").gpus(1).cpu(8000), A100), queue="team-a")
    assert pending(snap.run()) == {"a-big": "queue org: cpu requested 8, allocated 0, quota 1"}


def test_card_quotas_hold_in_the_tree_and_are_reclaimable() -> None:
    org = queue_from_annotation(QueueSpec("org"), f'{{"{A100}": 4}}')
    a = QueueSpec("a", parent="org", deserved={A100: 2000}, limit={A100: 4000})
    b = QueueSpec("b", parent="org", deserved={A100: 2000}, limit={A100: 4000})
    snap = Snap([_node("n1", A100, 4), _node("n2", A100, 4)], queues=[org, a, b])
    snap.job("a-job", "a", min_member=1)
    for i in range(4):
        snap.running(card(make_pod(f"a-{i}").gpus(1), A100), node="n1", job="a-job", started=i)
    snap.job("b-job", "b", min_member=2)
    for i in range(2):
        snap.pending(card(make_pod(f"b-{i}").gpus(1), A100), job="b-job")
    result = snap.run()
    # The org quota (4) stops b from using the idle n2; b takes its deserved 2 back from a.
    assert binds(result) == []
    assert evicted(result) == ["a-2", "a-3"]
    assert nominated(result) == [("b-0", "n1"), ("b-1", "n1")]
    assert result.evictions[0].reason == "Reclaimed"
