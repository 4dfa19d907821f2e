"""Topology-aware gangs in a session: required and preferred levels, refusals, extras."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kgpu.actions.session_runner import SessionConfig, run_session
from kgpu.config import load_profile
from kgpu.framework.session_result import SessionResult
from kgpu.framework.status import Code
from kgpu.framework.topology_config import Topology
from kgpu.model.node import NodeInfo
from kgpu.model.queue import QueueSpec
from kgpu.plugins.registry import build_scheduler
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, pending, with_annotations

BLOCK, RACK = "example.com/block", "example.com/rack"
LEVELS = Topology.model_validate(
    {"levels": [{"name": "block", "nodeLabel": BLOCK}, {"name": "rack", "nodeLabel": RACK}]}
)


def node(name: str, block: str, rack: str, gpus: int = 8) -> NodeInfo:
    return make_node(name).gpus(gpus).label(BLOCK, block).label(RACK, rack).build()


def cluster(*racks: tuple[str, str, int]) -> list[NodeInfo]:
    """Nodes of 8 GPUs: (block, rack, how many) each, named rack-i."""
    return [node(f"{rack}-{i}", block, rack) for block, rack, count in racks for i in range(count)]


def gang(
    snap: Snap, name: str, pods: int, annotations: Mapping[str, str] | None = None, gpus: int = 8
) -> None:
    snap.job(name, "q", min_member=pods, created=len(snap.jobs))
    for i in range(pods):
        pod = with_annotations(make_pod(f"{name}-{i}").gpus(gpus), **(annotations or {}))
        snap.pending(pod, job=name)


def run(
    snap: Snap,
    actions: Sequence[str] = ("allocate",),
    topology: Topology = LEVELS,
    policy: str = "bestfit",
) -> SessionResult:
    config = SessionConfig(actions=tuple(actions), topology=topology)
    result = run_session(snap.snapshot(), build_scheduler(load_profile(policy)), config)
    snap.state.check_invariants()
    return result


def racks_of(result: SessionResult, job: str) -> list[str]:
    return sorted({node.rsplit("-", 1)[0] for pod, node in binds(result) if pod.startswith(job)})


REQ_RACK = {"kgpu.io/topology-required": "rack"}


def test_a_required_rack_goes_to_the_tightest_rack_that_holds_the_whole_gang() -> None:
    snap = Snap(cluster(("b1", "r1", 4), ("b1", "r2", 2), ("b2", "r3", 3)), [QueueSpec("q")])
    gang(snap, "two", 2, REQ_RACK)
    gang(snap, "three", 3, REQ_RACK)
    result = run(snap)
    # r2 (16 GPUs) is the tightest for 2 pods; then r3 (24) for 3; r1 stays whole.
    assert racks_of(result, "two") == ["r2"]
    assert racks_of(result, "three") == ["r3"]
    assert pending(result) == {}


def test_best_fit_counts_what_is_free_not_what_a_rack_has() -> None:
    snap = Snap(cluster(("b1", "r1", 2), ("b1", "r2", 3)), [QueueSpec("q")])
    snap.running(make_pod("old").gpus(8), node="r2-0")
    snap.running(make_pod("old2").gpus(4), node="r2-1")
    gang(snap, "g", 2, REQ_RACK, gpus=4)
    result = run(snap)
    # r2 has 12 GPUs free, r1 16: r2 is the tighter fit.
    assert racks_of(result, "g") == ["r2"]


def test_a_gang_no_rack_can_hold_waits_and_names_the_level_and_the_nearest_rack() -> None:
    snap = Snap(cluster(("b1", "r1", 2), ("b1", "r2", 3), ("b2", "r3", 2)), [QueueSpec("q")])
    gang(snap, "big", 4, REQ_RACK)
    result = run(snap)
    assert result.binds == []
    assert set(snap.state.allocations) == set()
    text = pending(result)["big-0"]
    assert text.startswith(
        "topology: no rack has room for all 4 pods of gang default/big (required level rack); "
        "nearest rack r2 holds 3 of 4: "
    )
    assert "insufficient GPU" in text
    assert {p.status.code for p in result.pending} == {Code.UNSCHEDULABLE}
    assert {p.status.reason_code for p in result.pending} == {"NoTopologyDomain"}


def test_the_nearest_rack_is_the_one_that_held_most_when_all_had_room_on_paper() -> None:
    # 3 pods of 5 GPUs (15): r1 has 16 free in four halves, r2 20 (8 + 8 + 4). Both pass the
    # first test of room; r1, the tighter, is tried first and holds none, r2 holds 2.
    snap = Snap(cluster(("b1", "r1", 4), ("b1", "r2", 3)), [QueueSpec("q")])
    for i in range(4):
        snap.running(make_pod(f"half-{i}").gpus(4), node=f"r1-{i}")
    snap.running(make_pod("r2-half").gpus(4), node="r2-2")
    gang(snap, "g", 3, REQ_RACK, gpus=5)
    result = run(snap)
    assert result.binds == []
    assert "; nearest rack r2 holds 2 of 3: 0/7 nodes are available" in pending(result)["g-0"]


def test_racks_of_the_same_name_in_two_blocks_are_two_racks() -> None:
    snap = Snap([node("x", "b1", "r1"), node("y", "b2", "r1")], [QueueSpec("q")])
    gang(snap, "g", 2, REQ_RACK)
    result = run(snap)
    assert result.binds == []
    assert "nearest rack b1/r1 holds 1 of 2" in pending(result)["g-0"]


def test_nodes_without_the_label_are_in_no_domain() -> None:
    nodes = [*cluster(("b1", "r1", 1)), make_node("bare").gpus(8).build()]
    snap = Snap(nodes, [QueueSpec("q")])
    gang(snap, "g", 2, REQ_RACK)
    gang(snap, "plain", 1)
    result = run(snap)
    assert binds(result) == [("plain-0", "r1-0")]
    assert "nearest rack r1 holds 1 of 2" in pending(result)["g-0"]


def test_a_level_no_node_carries_is_said_so() -> None:
    snap = Snap([make_node("bare").gpus(8).build()], [QueueSpec("q")])
    gang(snap, "g", 1, REQ_RACK)
    result = run(snap)
    assert pending(result)["g-0"] == (
        "topology: no node has the label example.com/rack of level rack, so no rack can "
        "hold gang default/g (required level rack)"
    )


def test_a_required_block_may_span_racks_of_one_block_only() -> None:
    snap = Snap(cluster(("b1", "r1", 2), ("b1", "r2", 2), ("b2", "r3", 3)), [QueueSpec("q")])
    gang(snap, "g", 4, {"kgpu.io/topology-required": "block"})
    result = run(snap)
    assert racks_of(result, "g") == ["r1", "r2"]


def test_kueue_and_kai_annotations_name_levels_by_node_label() -> None:
    for key in (
        "kueue.x-k8s.io/podset-required-topology",
        "kai.scheduler/topology-required-placement",
    ):
        snap = Snap(cluster(("b1", "r1", 4), ("b1", "r2", 2)), [QueueSpec("q")])
        gang(snap, "g", 2, {key: RACK, "kai.scheduler/topology": "cluster-topology"})
        assert racks_of(run(snap), "g") == ["r2"]


def test_a_preferred_rack_packs_one_rack_when_one_has_room() -> None:
    snap = Snap(cluster(("b1", "r1", 4), ("b1", "r2", 2)), [QueueSpec("q")])
    gang(snap, "g", 2, {"kgpu.io/topology-preferred": "rack"})
    assert racks_of(run(snap), "g") == ["r2"]


def test_a_preferred_rack_goes_up_to_a_block_and_fills_its_fewest_racks() -> None:
    # No rack holds 5; block b2 does, in racks of 3, 2 and 1 nodes: fill r4 then r5.
    snap = Snap(
        cluster(
            ("b1", "r1", 2), ("b1", "r2", 2), ("b2", "r4", 3), ("b2", "r5", 2), ("b2", "r6", 1)
        ),
        [QueueSpec("q")],
    )
    gang(snap, "g", 5, {"kueue.x-k8s.io/podset-preferred-topology": RACK})
    assert racks_of(run(snap), "g") == ["r4", "r5"]


def test_a_preferred_rack_spreads_over_the_fewest_domains_when_no_block_has_room() -> None:
    snap = Snap(cluster(("b1", "r1", 3), ("b1", "r2", 1), ("b2", "r3", 2)), [QueueSpec("q")])
    gang(snap, "g", 5, {"kgpu.io/topology-preferred": "rack"})
    result = run(snap)
    # The roomier block b1 first (r1, then r2), then b2.
    assert racks_of(result, "g") == ["r1", "r2", "r3"]
    assert len(result.binds) == 5


def test_a_preferred_level_under_a_required_one_never_spans_past_it() -> None:
    snap = Snap(cluster(("b1", "r1", 3), ("b1", "r2", 1), ("b2", "r3", 2)), [QueueSpec("q")])
    gang(
        snap,
        "g",
        5,
        {"kgpu.io/topology-preferred": "rack", "kgpu.io/topology-required": "block"},
    )
    result = run(snap)
    assert result.binds == []
    assert pending(result)["g-0"].startswith(
        "topology: no block has room for all 5 pods of gang default/g (preferred level rack, "
        "required level block); nearest block b1 holds 4 of 5"
    )


def test_a_gang_with_a_running_pod_joins_its_rack_only() -> None:
    snap = Snap(cluster(("b1", "r1", 4), ("b1", "r2", 2)), [QueueSpec("q")])
    snap.job("g", "q", min_member=3)
    snap.running(with_annotations(make_pod("g-0").gpus(8), **REQ_RACK), node="r1-0", job="g")
    for i in (1, 2):
        snap.pending(with_annotations(make_pod(f"g-{i}").gpus(8), **REQ_RACK), job="g")
    result = run(snap)
    assert sorted(n for _, n in binds(result))[0].startswith("r1")
    assert racks_of(result, "g") == ["r1"]


def test_extras_of_a_ready_elastic_gang_stay_in_its_rack() -> None:
    snap = Snap(cluster(("b1", "r1", 2), ("b1", "r2", 3)), [QueueSpec("q")])
    snap.job("e", "q", min_member=2, max_member=4)
    for i in range(4):
        snap.pending(with_annotations(make_pod(f"e-{i}").gpus(8), **REQ_RACK), job="e")
    result = run(snap)
    assert racks_of(result, "e") == ["r1"]
    assert len(result.binds) == 2
    assert "e-2" in pending(result)


def test_without_levels_in_the_profile_the_annotations_are_not_read() -> None:
    snap = Snap(cluster(("b1", "r1", 1), ("b1", "r2", 1)), [QueueSpec("q")])
    gang(snap, "g", 2, REQ_RACK)
    result = run(snap, topology=Topology())
    assert racks_of(result, "g") == ["r1", "r2"]


def test_a_gang_with_a_required_level_does_not_preempt() -> None:
    snap = Snap(cluster(("b1", "r1", 1)), [QueueSpec("q")])
    snap.job("low", "q", priority=0)
    snap.running(make_pod("low-0").gpus(8), node="r1-0", job="low")
    snap.job("high", "q", priority=10)
    snap.pending(with_annotations(make_pod("high-0").gpus(8), **REQ_RACK), job="high")
    result = run(snap, actions=("allocate", "preempt"))
    assert result.evictions == []
    assert pending(result)["high-0"].startswith("topology: no rack has room for its pod")
    snap2 = Snap(cluster(("b1", "r1", 1)), [QueueSpec("q")])
    snap2.job("low", "q", priority=0)
    snap2.running(make_pod("low-0").gpus(8), node="r1-0", job="low")
    snap2.job("high", "q", priority=10)
    snap2.pending(make_pod("high-0").gpus(8), job="high")
    assert [e.pod for e in run(snap2, actions=("allocate", "preempt")).evictions] == [
        "default/low-0"
    ]
