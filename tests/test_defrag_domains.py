"""Defragmentation for a gang that requires a topology domain: the planner makes room in
one domain at a time, the first where moves start the gang; which domains it tries, and
in what order; a waiting pod's node selector bounds the nodes examined."""

from __future__ import annotations

from dataclasses import replace

from kgpu.actions.defrag_domains import MAX_DOMAINS, gang_domains
from kgpu.actions.defrag_planner import Domain, Gang
from kgpu.actions.defrag_rules import PREEMPTIBLE_ANNOTATION, RunningPod
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState
from kgpu.state.topology_domains import TopologyDomains
from tests.builders import make_node
from tests.test_defrag_gangs import _steps
from tests.test_defrag_planner import ON, World, _pod, _running

RACK = "example.com/rack"
LEVELS = (("rack", RACK),)
R1, R2 = Domain("rack r1", ((RACK, "r1"),)), Domain("rack r2", ((RACK, "r2"),))


def _stays(name: str) -> PodSpec:
    return replace(_pod(name, 500), annotations={PREEMPTIBLE_ANNOTATION: "false"})


def _racks() -> World:
    """One GPU per node. Rack r1: a holds x0 (300 milli, movable), b holds w0 (500, stays).
    Rack r2: c and d hold x1 and x2 (movable). e and f, in no rack, hold w1 and w2: a moved
    x fits beside any w."""
    racks = {"a": "r1", "b": "r1", "c": "r2", "d": "r2"}
    nodes = []
    for name in "abcdef":
        node = make_node(name).gpus(1)
        nodes.append((node.label(RACK, racks[name]) if name in racks else node).build())
    placed: list[tuple[RunningPod, int, tuple[int, ...]]] = [
        (_running(_pod("x0", 300)), 0, (0,)),
        (_running(_stays("w0")), 1, (0,)),
        (_running(_pod("x1", 300)), 2, (0,)),
        (_running(_pod("x2", 300)), 3, (0,)),
        (_running(_stays("w1")), 4, (0,)),
        (_running(_stays("w2")), 5, (0,)),
    ]
    return World(nodes, placed, job_min={"default/g": 2})


def _gang(*domains: Domain) -> Gang:
    return Gang("default/g", (_pod("g0"), _pod("g1")), domains)


def test_a_gang_gets_its_room_in_one_domain() -> None:
    world = _racks()
    # Anywhere, room is made pod by pod, nearest first: on a (r1) and c (r2).
    assert _steps(world.plan(_gang())) == [
        ("default/g0", 0, [("default/x0", 1)]),
        ("default/g1", 2, [("default/x1", 4)]),
    ]
    # In r1 w0 holds b; in r2 both of its nodes are freed, and the pods moved leave it.
    plan = world.plan(_gang(R1, R2))
    assert not plan.unplanned
    assert _steps(plan) == [
        ("default/g0", 2, [("default/x1", 1)]),
        ("default/g1", 3, [("default/x2", 4)]),
    ]
    assert [dict(s.pending.node_selector) for s in plan.steps] == [{RACK: "r2"}] * 2


def test_no_domain_moves_can_free_is_said_domain_by_domain() -> None:
    world = _racks()
    world.placed[3] = (_running(_stays("x2")), 3, (0,))  # d is held in r2 too
    world = World(world.nodes, world.placed, job_min={"default/g": 2})
    plan = world.plan(_gang(R1, R2))
    assert not plan.steps
    short = (
        "room for 1 of the 2 pods it needs; pod default/g1: no node near fitting holds a "
        "movable pod (pods refused: preemptibility 1)"
    )
    assert plan.unplanned == {
        "default/g": "gang default/g: moves start it in none of the domains it may use: "
        f"rack r1: {short}; rack r2: {short}"
    }


def test_a_pod_s_node_selector_bounds_the_nodes_examined() -> None:
    """One node examined: the nearest that the pod may use (c), not the nearest (a)."""
    world = _racks()
    pod = replace(_pod("y"), node_selector=((RACK, "r2"),))
    plan = world.plan(pod, config=ON.model_copy(update={"max_nodes_per_pod": 1}))
    assert _steps(plan) == [("default/y", 2, [("default/x1", 1)])]


def _cluster(racks: dict[str, int], gpus: int = 2) -> ClusterState:
    """``racks[name]`` nodes of ``gpus`` GPUs in each rack, named rack-i; one node in none."""
    nodes = [
        make_node(f"{rack}-{i}").gpus(gpus).label(RACK, rack).build()
        for rack, count in racks.items()
        for i in range(count)
    ]
    return ClusterState([*nodes, make_node("loose").gpus(8).build()])


def test_the_domains_tried_are_those_big_enough_the_most_idle_first() -> None:
    state = _cluster({"r1": 1, "r2": 2, "r3": 2, "r4": 3, "r5": 2, "r6": 2, "r7": 2})
    state.allocate(_pod("busy"), 1, (0,))  # r2 has 3 GPUs idle, r3 to r7 4 or more
    domains = TopologyDomains(state, LEVELS)
    needed = [_pod("g0", count=2), _pod("g1", count=2)]
    found = gang_domains(domains, 0, needed, [])
    assert isinstance(found, tuple)
    # r1 (2 GPUs) cannot hold 4; r4 has the most idle; then by name; MAX_DOMAINS of them.
    assert [d.name for d in found] == ["rack r4", "rack r3", "rack r5", "rack r6"]
    assert len(found) == MAX_DOMAINS
    assert found[0].selector == ((RACK, "r4"),)
    assert gang_domains(domains, 0, [_pod("g", count=8)], []) == (
        "no rack has 8000 milli-GPU on nodes that take pods"
    )


def test_a_gang_with_pods_running_is_planned_in_their_domain_only() -> None:
    state = _cluster({"r1": 2, "r2": 2})
    domains = TopologyDomains(state, LEVELS)
    needed = [_pod("g1", count=2)]
    assert gang_domains(domains, 0, needed, [2, 3]) == (Domain("rack r2", ((RACK, "r2"),)),)
    assert gang_domains(domains, 0, needed, [0, 2]) == (
        "its running pods are on nodes of more than one rack, or of none"
    )
    assert gang_domains(domains, 0, needed, [4]) == (
        "its running pods are on nodes of more than one rack, or of none"
    )


def test_a_level_no_node_has_holds_no_gang() -> None:
    state = ClusterState([make_node("a").gpus(2).build()])
    found = gang_domains(TopologyDomains(state, LEVELS), 0, [_pod("g")], [])
    assert found == f"no node has the label {RACK} of level rack"
