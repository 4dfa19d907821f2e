"""Fractional GPU requests in fair shares and quotas: a share counts as that share of a GPU,
a memory-only request (KAI's gpu-memory) as its fraction of the GPU's memory, an MPS
replica and a MIG instance as their share of a GPU."""

from __future__ import annotations

from kgpu.actions.session_runner import SessionConfig, open_session
from kgpu.config import load_profile
from kgpu.model.decision import EvictionKind
from kgpu.model.gpu import GpuRequest, mig_instances, mps_replicas
from kgpu.model.queue import QueueSpec
from kgpu.plugins.registry import build_scheduler
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, evicted, nominated, pending

GIB = 1024


def memory_only(mib: int, *models: str) -> GpuRequest:
    return GpuRequest(count=1, memory_mib=mib, models=models)


def test_running_pods_count_their_share_of_the_gpu_they_hold() -> None:
    snap = Snap(
        [
            make_node("big").gpus(2, "A100", 80 * GIB).build(),
            make_node("small").gpus(2, "L40S", 40 * GIB).build(),
            make_node("mps").gpus(1, "A100", 80 * GIB).replicas(4).build(),
            make_node("mig").mig_slices("1g.10gb", 7).build(),
        ],
        [QueueSpec("mem")],
    )
    for name, node, gpu in (
        ("on-80g", "big", memory_only(20 * GIB)),  # 20 of 80 GiB: 250
        ("on-40g", "small", memory_only(20 * GIB)),  # 20 of 40 GiB: 500
        ("replica", "mps", mps_replicas(1)),  # one replica of a GPU split 4 ways: 250
        ("slice", "mig", mig_instances("1g.10gb")),  # one compute slice of seven: 143
        ("half", "big", GpuRequest(1, 500)),  # a plain share: 500
    ):
        snap.running(make_pod(name).request(gpu), node=node, queue="mem")
    result = snap.run(actions=())
    assert result.allocated["mem"]["gpu"] == 250 + 500 + 250 + 143 + 500


def test_what_is_charged_on_placement_is_what_is_released() -> None:
    snap = Snap(
        [
            make_node("big").gpus(1, "A100", 80 * GIB).build(),
            make_node("small").gpus(1, "L40S", 40 * GIB).build(),
        ],
        [QueueSpec("mem")],
    )
    old = snap.running(make_pod("old").request(memory_only(20 * GIB)), node="big", queue="mem")
    new = snap.pending(make_pod("new").request(memory_only(20 * GIB)), queue="mem")
    config = SessionConfig(actions=(), plugins=("proportion",))
    session = open_session(snap.snapshot(), build_scheduler(load_profile("bestfit")), config)
    q = session.tree.index["mem"]
    before = dict(session.ledger.allocated[q])
    assert before["gpu"] == 250
    # Pending, it counts the most it could take: 500, on the 40 GiB GPU.
    assert session.vector(new, None)["gpu"] == 500
    statement = session.statement()
    statement.allocate(new, snap.state.index["small"], (0,), None)  # type: ignore[index]
    assert session.ledger.allocated[q]["gpu"] == 750
    statement.evict(old, EvictionKind.PREEMPTED, "")
    assert session.ledger.allocated[q]["gpu"] == 500
    statement.discard()
    assert session.ledger.allocated[q] == before
    statement.allocate(new, snap.state.index["big"], (0,), None)  # type: ignore[index]
    assert session.ledger.allocated[q]["gpu"] == 500  # 250 on the 80 GiB GPU
    statement.discard()
    assert session.ledger.allocated[q] == before


def test_two_queues_memory_only_pods_count_their_memory_fraction_in_fair_share_and_quota() -> None:
    # 4 GPUs of 80 GiB. infer asks 8 pods of 20 GiB each (250 milli each, 2 GPUs in all)
    # but may hold 0.75 GPU; train holds 3 GPUs and asks 2 more.
    snap = Snap(
        [make_node("a").gpus(4, "A100", 80 * GIB).build()],
        [
            QueueSpec("infer", deserved={"gpu": 500}, limit={"gpu": 750}),
            QueueSpec("train", deserved={"gpu": 3000}),
        ],
    )
    for i in range(3):
        snap.running(make_pod(f"train-{i}").gpus(1), node="a", queue="train")
    for i in range(2):
        snap.pending(make_pod(f"train-new-{i}").gpus(1), queue="train")
    for i in range(8):
        snap.pending(make_pod(f"infer-{i}").request(memory_only(20 * GIB)), queue="infer")
    result = snap.run()
    # infer wants min(8 × 250, limit 750) = 750: its deserved 500, and half of the 500 that
    # no quota claims (weights 1:1); train takes the rest, 3250.
    assert result.fair["infer"]["gpu"] == 750 and result.fair["train"]["gpu"] == 3250
    assert binds(result) == [("infer-0", "a"), ("infer-1", "a"), ("infer-2", "a")]
    assert result.allocated["infer"]["gpu"] == 750
    waiting = pending(result)
    refusal = "queue infer: gpu requested 0.25, allocated 0.75, quota 0.75"
    assert all(waiting[f"infer-{i}"] == refusal for i in range(3, 8))
    assert [(e.kind, e.reason) for e in result.events if e.pod == "default/infer-3"] == [
        ("PodGroup", "InsufficientScalarQuota"),  # turned down at enqueue
        ("Pod", "FailedScheduling"),
    ]
    # The GPU that infer shares holds 60 of its 80 GiB: no whole GPU is left for train,
    # which is within its fair share and has nothing to take back.
    assert waiting["train-new-0"].startswith("0/1 nodes are available")
    assert result.evictions == []


def test_a_memory_only_gang_reclaims_by_its_memory_fraction() -> None:
    def scenario(pods: int) -> Snap:
        snap = Snap(
            [make_node("a").gpus(4, "A100", 80 * GIB).build()],
            [
                QueueSpec("infer", deserved={"gpu": 1000}),
                QueueSpec("train", deserved={"gpu": 3000}),
            ],
        )
        snap.job("train", "train")
        for i in range(4):
            snap.running(make_pod(f"train-{i}").gpus(1), node="a", job="train", started=float(i))
        snap.job("serve", "infer", min_member=pods)
        for i in range(pods):
            snap.pending(make_pod(f"serve-{i}").request(memory_only(20 * GIB)), job="serve")
        return snap

    # 4 pods of 20 GiB are 1000 milli: infer's fair share, so one GPU comes back to it.
    result = scenario(4).run()
    assert result.fair["infer"]["gpu"] == 1000 and result.fair["train"]["gpu"] == 3000
    assert evicted(result) == ["train-3"]
    assert nominated(result) == [(f"serve-{i}", "a") for i in range(4)]
    # 5 such pods are 1250 milli, past infer's fair share (its deserved 1000: train wants
    # all it has): nothing is taken back.
    result = scenario(5).run()
    assert result.fair["infer"]["gpu"] == 1000
    assert result.evictions == [] and result.nominations == []


def test_a_pending_memory_only_pod_counts_the_largest_share_it_could_take() -> None:
    def scenario(*models: str) -> Snap:
        snap = Snap(
            [
                make_node("big").gpus(1, "A100", 80 * GIB).build(),
                make_node("small").gpus(1, "L40S", 40 * GIB).build(),
            ],
            [QueueSpec("q", limit={"gpu": 400})],
        )
        snap.pending(make_pod("p").request(memory_only(20 * GIB, *models)), queue="q")
        return snap

    # Either GPU could serve it: on the 40 GiB one it would take 500, past the limit.
    assert pending(scenario().run()) == {"p": "queue q: gpu requested 0.5, allocated 0, quota 0.4"}
    # Held to the A100s it can take only 250.
    assert binds(scenario("A100").run()) == [("p", "big")]
