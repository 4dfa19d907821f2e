"""Preemption inside a queue and reclaim across queues, snapshot in, evictions out."""

from __future__ import annotations

import pytest

from kgpu.actions.session_runner import ACTIONS, SessionConfig, open_session
from kgpu.actions.victim_pool import VictimPool
from kgpu.config import load_profile
from kgpu.framework.session import Session
from kgpu.model.decision import EvictionKind
from kgpu.model.gpu import GpuRequest
from kgpu.model.node import NodeName
from kgpu.model.pod import PodKey
from kgpu.model.queue import QueueSpec
from kgpu.plugins.registry import build_scheduler
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, evicted, nominated, pending

G = 1000


def _gpus(n: int) -> dict[str, int]:
    return {"gpu": n * G}


# ------------------------------------------------------------------------------ preempt


def test_preemption_takes_the_fewest_lowest_priority_victims_old_enough() -> None:
    snap = Snap([make_node("a").gpus(4).build()], queues=[QueueSpec("q", min_runtime_s=60)])
    for name, prio, gpus, started in (
        ("low-big", 0, 2, 0.0),
        ("low-young", 0, 1, 990.0),  # ran 10 s of its 60 s min-runtime: protected
        ("mid", 5, 1, 0.0),
    ):
        snap.job(name, "q", priority=prio)
        snap.running(make_pod(name).gpus(gpus), node="a", job=name, started=started)
    snap.job("high", "q", priority=10)
    snap.pending(make_pod("high").gpus(2), job="high")
    result = snap.run()
    assert binds(result) == []
    assert evicted(result) == ["low-big"]
    assert nominated(result) == [("high", "a")]
    assert result.evictions[0].message == "preempted by default/high (priority 10) in queue q"
    # The snapshot is left as it was: the edge evicts, and the pod binds in a later session.
    assert set(snap.state.allocations) == {"default/low-big", "default/low-young", "default/mid"}


def test_preemption_prefers_the_node_needing_fewer_victims() -> None:
    snap = Snap([make_node("a").gpus(2).build(), make_node("b").gpus(2).build()], [QueueSpec("q")])
    for name, node, prio, gpus in (("a1", "a", 0, 1), ("a2", "a", 0, 1), ("b1", "b", 1, 2)):
        snap.job(name, "q", priority=prio)
        snap.running(make_pod(name).gpus(gpus), node=node, job=name)
    snap.job("high", "q", priority=10)
    snap.pending(make_pod("high").gpus(2), job="high")
    result = snap.run()
    assert evicted(result) == ["b1"] and nominated(result) == [("high", "b")]


@pytest.mark.parametrize("barred", ["selector", "taint", "cordon"])
def test_preemption_frees_only_a_node_the_pod_may_go_to(barred: str) -> None:
    """The node needing fewer victims is one the pod's selector, the node's taint or a
    cordon keeps it off: the victims come from the other node."""
    off = make_node("a").gpus(2).label("zone", "x")
    if barred == "taint":
        off = off.taint("dedicated", "other")
    elif barred == "cordon":
        off = off.cordoned()
    snap = Snap([off.build(), make_node("b").gpus(2).label("zone", "y").build()], [QueueSpec("q")])
    for name, node, gpus in (("a1", "a", 2), ("b1", "b", 1), ("b2", "b", 1)):
        snap.job(name, "q", priority=0)
        snap.running(make_pod(name).gpus(gpus), node=node, job=name)
    snap.job("high", "q", priority=10)
    high = make_pod("high").gpus(2)
    snap.pending(high.selector("zone", "y") if barred == "selector" else high, job="high")
    result = snap.run()
    assert evicted(result) == ["b1", "b2"] and nominated(result) == [("high", "b")]


def test_each_running_pod_keeps_its_node_beside_it_through_trials() -> None:
    """The session keeps the node of each running pod beside it (``JobInfo.running_nodes``,
    read by the victim pools): trials that evict and put back, and evictions kept, leave
    the two lists in step, in the pods' order."""
    nodes = [make_node(n).gpus(4).build() for n in "abc"]
    snap = Snap(nodes, [QueueSpec("q"), QueueSpec("r", deserved={"gpu": 8 * G})])
    snap.job("gang", "q", min_member=3)
    for i, node in enumerate("abc"):
        snap.running(make_pod(f"gang-{i}").gpus(1), node=node, job="gang", started=float(i))
    snap.job("elastic", "q", min_member=1)
    for i, node in enumerate("cbab"):
        snap.running(make_pod(f"el-{i}").gpus(1), node=node, job="elastic", started=float(i))
    for i, node in enumerate("aabcc"):
        snap.job(f"solo-{i}", "q")
        snap.running(make_pod(f"solo-{i}").gpus(1), node=node, job=f"solo-{i}")
    for name, prio, queue, gpus in (("high", 9, "q", 2), ("back", 0, "r", 3), ("more", 0, "r", 2)):
        snap.job(name, queue, priority=prio)
        snap.pending(make_pod(name).gpus(gpus), job=name)
    session = open_session(
        snap.snapshot(), build_scheduler(load_profile("bestfit")), SessionConfig()
    )
    for name in ("enqueue", "allocate", "reclaim", "preempt"):
        ACTIONS[name]().execute(session)
        for job in session.jobs:
            held = [session.state.allocations[t.pod.key].node for t in job.running]
            assert job.running_nodes == held, (name, job.key)
    assert session.close().evictions  # trials were made, and some evictions kept


def test_a_trial_eviction_puts_back_exactly_what_the_pod_held() -> None:
    # "recorded" holds half the GPU's compute but, as its allocation was read back, only
    # 1,000 MiB of its memory, not the 40,960 MiB a fresh half share takes. Every node
    # tried is tried by evicting and putting back: put back afresh, the pod would seem to
    # hold 39,960 MiB more than it does, for the rest of the session.
    snap = Snap([make_node("a").gpus(1).build()], [QueueSpec("q")])
    snap.job("recorded", "q", priority=0)
    snap.running(make_pod("recorded").share(500), node="a", job="recorded", need=(500, 1000))
    snap.job("hog", "q", priority=20)
    snap.running(make_pod("hog").request(GpuRequest(1, memory_mib=40_000)), node="a", job="hog")
    snap.job("high", "q", priority=10)
    snap.pending(make_pod("high").share(300), job="high")
    result = snap.run()
    assert evicted(result) == ["recorded"] and nominated(result) == [("high", "a")]
    held = snap.state.allocations[PodKey("default/recorded")]
    assert (held.gpu_milli, held.gpu_memory) == (500, (1000,))


def test_no_preemption_of_equal_priority_or_across_queues() -> None:
    snap = Snap([make_node("a").gpus(2).build()], [QueueSpec("q"), QueueSpec("other")])
    snap.job("peer", "q", priority=5)
    snap.running(make_pod("peer").gpus(1), node="a", job="peer")
    snap.job("stranger", "other", priority=0)
    snap.running(make_pod("stranger").gpus(1), node="a", job="stranger")
    snap.job("new", "q", priority=5)
    snap.pending(make_pod("new").gpus(1), job="new")
    result = snap.run(actions=("allocate", "preempt"))
    assert result.evictions == [] and result.nominations == []
    assert pending(result) == {"new": "0/1 nodes are available: 1 insufficient GPU."}


def test_a_gang_victim_goes_whole_and_extras_go_first() -> None:
    snap = Snap([make_node("a").gpus(4).build()], [QueueSpec("q")])
    snap.job("gang", "q", min_member=2, priority=0)
    for i in range(2):
        snap.running(make_pod(f"gang-{i}").gpus(1), node="a", job="gang")
    snap.job("elastic", "q", min_member=1, priority=0)
    for i in range(2):
        snap.running(make_pod(f"el-{i}").gpus(1), node="a", job="elastic", started=float(i))
    snap.job("high", "q", priority=9)
    snap.pending(make_pod("high").gpus(1), job="high")
    result = snap.run()
    assert evicted(result) == ["el-1"]  # the elastic job's youngest extra
    snap2 = Snap([make_node("a").gpus(2).build()], [QueueSpec("q")])
    snap2.job("gang", "q", min_member=2)
    for i in range(2):
        snap2.running(make_pod(f"gang-{i}").gpus(1), node="a", job="gang")
    snap2.job("high", "q", priority=9)
    snap2.pending(make_pod("high").gpus(1), job="high")
    assert evicted(snap2.run()) == ["gang-0", "gang-1"]  # half a gang is no use to anyone


def test_victim_units_made_later_in_a_session_see_what_it_committed() -> None:
    # Reclaim's pool and each queue's pool in preempt share the units worked out for a job
    # until the job's pods change: pods placed make extras, pods evicted are gone.
    snap = Snap([make_node("a").gpus(8).build()], [QueueSpec("q")])
    snap.job("elastic", "q", min_member=1)
    for i in range(3):
        snap.running(make_pod(f"el-{i}").gpus(1), node="a", job="elastic", started=float(i))
    snap.job("solo", "q", min_member=1)
    snap.running(make_pod("solo-0").gpus(1), node="a", job="solo", started=5.0)
    more = snap.pending(make_pod("solo-1").gpus(1), job="solo")
    config = SessionConfig()
    session = open_session(snap.snapshot(), build_scheduler(load_profile("bestfit")), config)

    def units(session: Session) -> list[list[str]]:
        pool = VictimPool(session, session.jobs)
        return [[t.pod.key.removeprefix("default/") for t in u.tasks(session)] for u in pool.units]

    assert units(session) == [["el-2"], ["el-1"], ["solo-0"], ["el-0", "el-1", "el-2"]]
    statement = session.statement()
    statement.evict(
        session.job_of["default/el-2"].running[-1], EvictionKind.PREEMPTED, "for the test"
    )
    statement.allocate(more, 0, (7,), None)
    statement.commit()
    assert units(session) == [["solo-0"], ["el-1"], ["solo-0"], ["el-0", "el-1"]]


def test_a_gang_comes_as_its_youngest_pod_once_every_pod_is_old_enough() -> None:
    # Gangs without extras, in victim order: by their youngest pod (the latest start; the
    # least pod name among pods started together), youngest first; a gang one of whose
    # pods is younger than the queue's min-runtime is no victim at all.
    snap = Snap(
        [make_node("a").gpus(8).build(), make_node("b").gpus(8).build()],
        [QueueSpec("q", min_runtime_s=60)],
    )
    for job, pods in (
        ("old", (("old-0", "a", 0.0), ("old-1", "b", 100.0), ("old-2", "a", 10.0))),
        ("new", (("new-0", "a", 500.0), ("new-1", "a", 50.0))),
        ("young", (("young-0", "b", 0.0), ("young-1", "b", 980.0))),  # ran 20 s of 60
        ("tied-t", (("t-1", "b", 200.0), ("r-0", "b", 200.0))),  # as r-0, before s-0
        ("tied-s", (("s-1", "b", 200.0), ("s-0", "b", 200.0))),
    ):
        snap.job(job, "q", min_member=len(pods))
        for name, node, started in pods:
            snap.running(make_pod(name).gpus(1), node=node, job=job, started=started)
    session = open_session(
        snap.snapshot(), build_scheduler(load_profile("bestfit")), SessionConfig()
    )
    pool = VictimPool(session, session.jobs)
    assert [u.job.key.removeprefix("default/") for u in pool.units] == [
        "new",
        "tied-t",
        "tied-s",
        "old",
    ]
    a, b = (session.state.index[NodeName(n)] for n in ("a", "b"))
    assert [u.nodes for u in pool.units] == [(a,), (b,), (b,), tuple(sorted((a, b)))]
    assert [u.job.key for u in pool.on(b)] == ["default/tied-t", "default/tied-s", "default/old"]


@pytest.mark.parametrize(
    ("asks", "victims", "nominations", "waits"),
    [
        # The extra el-1 is also in its job's gang: counted once, the two pods and the
        # free room make exactly 8 cores, so both go; 9 cores are not there to be freed.
        (8000, ["el-0", "el-1"], [("high", "a")], {}),
        (9000, [], [], {"high": "0/1 nodes are available: 1 insufficient cpu."}),
    ],
)
def test_a_pod_both_an_extra_and_in_its_gang_frees_its_room_once(
    asks: int, victims: list[str], nominations: list[tuple[str, str]], waits: dict[str, str]
) -> None:
    snap = Snap([make_node("a").cpu(8000).build()], [QueueSpec("q")])
    snap.job("elastic", "q", min_member=1)
    for i in range(2):
        snap.running(make_pod(f"el-{i}").cpu(3000), node="a", job="elastic", started=float(i))
    snap.job("high", "q", priority=9)
    snap.pending(make_pod("high").cpu(asks), job="high")
    result = snap.run()
    assert evicted(result) == victims
    assert nominated(result) == nominations
    assert pending(result) == waits


def test_a_gpu_held_by_an_extra_that_is_in_its_gang_too_counts_as_freeable_once() -> None:
    """Counted once for the extra and once for the gang, GPU 1 looked 2000 milli free and
    never wholly free: a pod asking both GPUs stayed pending, "insufficient GPU"."""
    snap = Snap([make_node("a").gpus(2).build()], [QueueSpec("q")])
    snap.job("elastic", "q", min_member=1)
    for i in range(2):
        snap.running(make_pod(f"el-{i}").gpus(1), node="a", job="elastic", started=float(i))
    snap.job("high", "q", priority=9)
    snap.pending(make_pod("high").gpus(2), job="high")
    result = snap.run()
    assert evicted(result) == ["el-0", "el-1"]
    assert nominated(result) == [("high", "a")]


# ------------------------------------------------------------------------------ reclaim


def test_a_queue_below_its_fair_share_takes_back_what_was_borrowed() -> None:
    snap = Snap(
        [make_node("a").gpus(8).build()],
        [QueueSpec("a", deserved=_gpus(4)), QueueSpec("b", deserved=_gpus(4))],
    )
    snap.job("borrower", "a", min_member=1)
    for i in range(8):
        snap.running(make_pod(f"a-{i}").gpus(1), node="a", job="borrower", started=float(i))
    snap.job("owner", "b", min_member=2)
    for i in range(2):
        snap.pending(make_pod(f"b-{i}").gpus(1), job="owner")
    result = snap.run()
    assert result.fair["a"]["gpu"] == 6000 and result.fair["b"]["gpu"] == 2000
    assert evicted(result) == ["a-6", "a-7"]  # the youngest extras
    assert nominated(result) == [("b-0", "a"), ("b-1", "a")]
    assert {e.reason for e in result.evictions} == {"Reclaimed"}
    assert result.evictions[0].message == "reclaimed by queue b for default/owner"


def test_a_verdict_reached_during_a_trial_does_not_outlive_it() -> None:
    # Node a is tried first (its units are the youngest): with a2 tentatively evicted, v
    # sits at its fair share, so a1 may not go too, and two GPUs cannot be freed there.
    # The trial is undone; on node b, b1 alone frees enough, and v is over its share again.
    snap = Snap(
        [make_node("a").gpus(2).build(), make_node("b").gpus(2).build()],
        [QueueSpec("r", deserved=_gpus(2)), QueueSpec("v", deserved=_gpus(2))],
    )
    for name, node, started in (("a2", "a", 30.0), ("a1", "a", 20.0), ("b1", "b", 10.0)):
        snap.job(name, "v")
        snap.running(make_pod(name).gpus(1), node=node, job=name, started=started)
    snap.job("taker", "r")
    snap.pending(make_pod("taker").gpus(2), job="taker")
    result = snap.run()
    assert result.fair["v"]["gpu"] == 2000
    assert evicted(result) == ["b1"] and nominated(result) == [("taker", "b")]


def test_reclaim_stops_at_the_reclaimers_fair_share() -> None:
    snap = Snap(
        [make_node("a").gpus(8).build()],
        [QueueSpec("a", deserved=_gpus(6)), QueueSpec("b", deserved=_gpus(2))],
    )
    snap.job("borrower", "a")
    for i in range(8):
        snap.running(make_pod(f"a-{i}").gpus(1), node="a", job="borrower")
    snap.job("owner", "b", min_member=4)
    for i in range(4):
        snap.pending(make_pod(f"b-{i}").gpus(1), job="owner")
    result = snap.run()
    assert result.fair["b"]["gpu"] == 2000
    assert result.evictions == []  # 4 GPUs would take b past its fair share of 2


def test_reclaim_never_takes_a_queue_below_its_deserved_share() -> None:
    # Quotas ask 12 of 8 GPUs: fair shares are scaled to 4 and 4, but a keeps its 6.
    snap = Snap(
        [make_node("a").gpus(8).build()],
        [QueueSpec("a", deserved=_gpus(6)), QueueSpec("b", deserved=_gpus(6))],
    )
    snap.job("borrower", "a")
    for i in range(7):
        snap.running(make_pod(f"a-{i}").gpus(1), node="a", job="borrower", started=float(i))
    snap.running(make_pod("b-old").gpus(1), node="a", queue="b")
    for i in range(7):
        snap.pending(make_pod(f"b-{i}").gpus(1), queue="b")
    result = snap.run()
    assert result.fair["a"]["gpu"] == 4000 and result.fair["b"]["gpu"] == 4000
    assert evicted(result) == ["a-6"]
    assert nominated(result) == [("b-0", "a")]


def test_victims_come_from_the_most_over_served_queue_first() -> None:
    # b holds less than a but more over its fair share (5 of 4 against 7 of 6): b gives first.
    nodes = [make_node(f"n{i}").gpus(4).build() for i in range(3)]
    snap = Snap(
        nodes,
        [
            QueueSpec("a", deserved=_gpus(3), over_quota_weight={"gpu": 3}),
            QueueSpec("b", deserved=_gpus(3)),
            QueueSpec("c", deserved=_gpus(6)),
        ],
    )
    for i in range(7):
        snap.running(make_pod(f"a-{i}").gpus(1), node=f"n{i % 3}", queue="a", started=9.0 + i)
    for i in range(5):
        snap.running(make_pod(f"b-{i}").gpus(1), node=f"n{(i + 1) % 3}", queue="b", started=i)
    for i in range(2):
        snap.pending(make_pod(f"c-{i}").gpus(1), queue="c")
    result = snap.run()
    assert (result.fair["a"]["gpu"], result.fair["b"]["gpu"]) == (6000, 4000)
    assert [e.pod for e in result.evictions] == ["default/b-4", "default/a-6"]
    assert sorted(p for p, _ in nominated(result)) == ["c-0", "c-1"]


def test_siblings_reclaim_below_their_common_parent() -> None:
    snap = Snap(
        [make_node("a").gpus(8).build()],
        [
            QueueSpec("org", deserved=_gpus(4)),
            QueueSpec("x", parent="org", deserved=_gpus(2)),
            QueueSpec("y", parent="org", deserved=_gpus(2)),
            QueueSpec("z", deserved=_gpus(4)),
        ],
    )
    for i in range(6):
        snap.running(make_pod(f"x-{i}").gpus(1), node="a", queue="x", started=float(i))
    for i in range(2):
        snap.running(make_pod(f"z-{i}").gpus(1), node="a", queue="z")
    snap.job("y-job", "y", min_member=2)
    for i in range(2):
        snap.pending(make_pod(f"y-{i}").gpus(1), job="y-job")
    result = snap.run()
    assert (result.fair["org"]["gpu"], result.fair["x"]["gpu"], result.fair["y"]["gpu"]) == (
        6000,
        4000,
        2000,
    )
    assert evicted(result) == ["x-4", "x-5"]


def test_young_pods_are_not_reclaimed() -> None:
    snap = Snap(
        [make_node("a").gpus(2).build()],
        [QueueSpec("a", deserved=_gpus(1), min_runtime_s=600), QueueSpec("b", deserved=_gpus(1))],
    )
    for i in range(2):
        snap.running(make_pod(f"a-{i}").gpus(1), node="a", queue="a", started=900.0)
    snap.pending(make_pod("b-0").gpus(1), queue="b")
    assert snap.run().evictions == []


def test_queues_to_reclaim_from_follow_what_the_reclaimer_still_needs() -> None:
    # r holds 2 of its fair 4 GPUs and its gang "grow" needs 2 more: v (5 of its fair 4)
    # may give. Once one pod of the gang is placed, r holds 3 and the gang needs 1 more,
    # so v still may; not while one of v's pods is out, and again once it is back.
    snap = Snap(
        [make_node("a").gpus(8).build()],
        [QueueSpec("r", deserved=_gpus(4)), QueueSpec("v", deserved=_gpus(4))],
    )
    snap.job("held", "r")
    snap.running(make_pod("held").gpus(2), node="a", job="held")
    for i in range(5):
        snap.running(make_pod(f"v-{i}").gpus(1), node="a", queue="v")
    snap.job("grow", "r", min_member=2)
    first = snap.pending(make_pod("grow-0").gpus(1), job="grow")
    snap.pending(make_pod("grow-1").gpus(1), job="grow")
    session = open_session(
        snap.snapshot(), build_scheduler(load_profile("bestfit")), SessionConfig()
    )
    grow, v = session.job_of["default/grow-0"], session.tree.index["v"]
    assert session.ledger.fair[v]["gpu"] == 4000
    assert session.callbacks.victim_queues(grow, {v}) == {v}
    statement = session.statement()
    statement.allocate(first, 0, (7,), None)
    statement.commit()
    assert session.callbacks.victim_queues(grow, {v}) == {v}  # 3 held + 1 needed: within its 4
    statement = session.statement()
    statement.evict(
        session.job_of["default/v-0"].running[0], EvictionKind.RECLAIMED, "for the test"
    )
    assert session.callbacks.victim_queues(grow, {v}) == set()  # v is down to its fair share
    statement.discard()
    assert session.callbacks.victim_queues(grow, {v}) == {v}


def test_a_pools_units_of_some_queues_come_in_victim_order_however_often_read() -> None:
    # Searches read a merge of some queues' units as far as they need, and later searches
    # for the same queues read it again: each reads every unit of those queues once, in
    # the pool's order, and none of another queue.
    snap = Snap([make_node("a").gpus(8).build()], [QueueSpec(q) for q in ("x", "y", "z")])
    for i, queue in enumerate(("x", "y", "z", "x", "z", "y", "x")):
        snap.job(f"j{i}", queue)
        snap.running(make_pod(f"j{i}").gpus(1), node="a", job=f"j{i}", started=float(i))
    session = open_session(
        snap.snapshot(), build_scheduler(load_profile("bestfit")), SessionConfig()
    )
    pool = VictimPool(session, session.jobs)
    named = {session.tree.name(u.job.queue): u.job.queue for u in pool.units}
    queues = {named["x"], named["z"]}

    def read(limit: int) -> list[str]:
        order, out = pool.order(queues), list[str]()
        while len(out) < limit and (unit := order.at(len(out))) is not None:
            out.append(unit.job.key)
        return out

    wanted = [u.job.key for u in pool.units if u.job.queue in queues]
    assert len(wanted) == 5 and len(pool.units) == 7
    assert read(2) == wanted[:2]  # a search that stopped early
    assert read(99) == wanted  # a later one reads on past it
    assert read(99) == wanted
    everything = pool.order(None)
    assert [everything.at(i) for i in range(8)] == [*pool.units, None]
