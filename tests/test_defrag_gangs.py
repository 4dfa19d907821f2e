"""The defragmentation planner for a gang: room for as many of its pods as it needs to
start, or no move at all; its pods that fit now take their room first; the round's move
budget counts the gang's moves together."""

from __future__ import annotations

from dataclasses import replace

from kgpu.actions.defrag_planner import Gang, Plan, apply_step
from kgpu.actions.defrag_rules import PREEMPTIBLE_ANNOTATION
from tests.builders import make_node, make_pod
from tests.test_defrag_planner import ON, World, _pod, _running


def _world(idle_nodes: int = 0) -> World:
    """Nodes a and b: a movable 300-milli pod on their only GPU (x0, x1); c and d: a pod
    of 500 milli that stays (w0, w1); then ``idle_nodes`` nodes with one idle GPU. Each of
    x0 and x1 can go next to a w, and the GPU it leaves takes a whole-GPU pod."""
    names = ["a", "b", "c", "d", *(f"e{i}" for i in range(idle_nodes))]
    nodes = [make_node(n).gpus(1).build() for n in names]
    xs = [_running(_pod(f"x{i}", 300)) for i in range(2)]
    ws = [
        _running(replace(_pod(f"w{i}", 500), annotations={PREEMPTIBLE_ANNOTATION: "false"}))
        for i in range(2)
    ]
    return World(nodes, [(xs[0], 0, (0,)), (xs[1], 1, (0,)), (ws[0], 2, (0,)), (ws[1], 3, (0,))])


def _steps(plan: Plan) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """Each step's waiting pod, its node, and each move's pod and target node."""
    return [(s.pending.key, s.node, [(m.pod.key, m.target) for m in s.moves]) for s in plan.steps]


def _gang(world: World, size: int, need: int, running: int = 0) -> Gang:
    """A gang of ``size`` waiting pods asking one GPU each, ``running`` more running, that
    needs ``need`` more to start (its minMember, as the facts say)."""
    world.job_min["default/g"], world.job_running["default/g"] = need + running, running
    return Gang("default/g", tuple(_pod(f"g{i}") for i in range(size)))


def test_a_gang_gets_room_for_every_pod_it_needs() -> None:
    world = _world()
    plan = world.plan(_gang(world, 2, 2))
    assert not plan.unplanned
    assert _steps(plan) == [
        ("default/g0", 0, [("default/x0", 2)]),
        ("default/g1", 1, [("default/x1", 3)]),
    ]
    for step in plan.steps:
        apply_step(world.state, step)
    assert world.state.node_gpus_free(0) == [0] and world.state.node_gpus_free(1) == [0]


def test_room_for_some_of_a_gang_is_no_room_for_it() -> None:
    world = _world()
    plan = world.plan(_gang(world, 3, 3))
    assert not plan.steps
    assert plan.unplanned == {
        "default/g": "gang default/g: room for 2 of the 3 pods it needs; pod default/g2: "
        "no node near fitting holds a movable pod (pods refused: preemptibility 2)"
    }
    # Three pods wait, two start it: the third is not planned for.
    assert [s.pending.key for s in world.plan(_gang(world, 3, 2)).steps] == [
        "default/g0",
        "default/g1",
    ]


def test_a_gang_pod_that_fits_now_takes_its_room_without_a_move() -> None:
    world = _world(idle_nodes=1)
    plan = world.plan(_gang(world, 2, 2))
    (step,) = plan.steps  # g0 goes to e0 as it is; only g1 needs a move
    assert step.pending.key == "default/g1" and [m.pod.key for m in step.moves] == ["default/x0"]
    assert world.plan(_gang(world, 1, 1)).unplanned == {
        "default/g": "gang default/g: the 1 pod(s) it needs fit without moves; what holds "
        "it back is not room"
    }


def test_the_round_budget_counts_a_gang_s_moves_together() -> None:
    world = _world()
    one = ON.model_copy(update={"max_moves_per_round": 1})
    plan = world.plan(_gang(world, 2, 2), config=one)
    assert not plan.steps
    assert plan.unplanned == {
        "default/g": "gang default/g: room for 1 of the 2 pods it needs; pod default/g1: "
        "the round's moves are spent"
    }
    # What the gang could not use is left for the pod after it.
    after = world.plan(_gang(world, 2, 2), _pod("y"), config=one)
    assert [s.pending.key for s in after.steps] == ["default/y"]


def test_the_pods_moved_for_a_gang_are_placed_again_once_it_is_in() -> None:
    """x0 and x1 (300 milli each) on nodes a and b; c holds a 100-milli pod that stays.
    Placed again at once, x0 would go to the tightest room, next to x1 on b, and b could
    not be freed for the gang's second pod; placed again once both gang pods are in, x0
    and x1 go to c."""
    names = ["a", "b", "c"]
    nodes = [make_node(n).gpus(1).build() for n in names]
    xs = [_running(_pod(f"x{i}", 300)) for i in range(2)]
    w = _running(replace(_pod("w", 100), annotations={PREEMPTIBLE_ANNOTATION: "false"}))
    world = World(nodes, [(xs[0], 0, (0,)), (xs[1], 1, (0,)), (w, 2, (0,))])
    plan = world.plan(_gang(world, 2, 2))
    assert _steps(plan) == [
        ("default/g0", 0, [("default/x0", 2)]),
        ("default/g1", 1, [("default/x1", 2)]),
    ]


def test_the_state_comes_back_whole_after_a_gang_s_plan() -> None:
    """Shares of 350 milli of an A100, for a gang of two. a holds x0 (500) beside a pod
    that stays (400); b holds x1 (800); c is a T4, of no use to the gang. Moving x0 lets
    g0 onto a, moving x1 lets g1 onto b; placed again, x0 goes next to g1 on b, where x1
    was, and x1 to c. Undoing g1's trial before x0 has left b could not put x1 back."""
    nodes = [make_node("a").gpus(1).build(), make_node("b").gpus(1).build()]
    nodes.append(make_node("c").gpus(1, model="T4").build())
    x0, x1 = _running(_pod("x0", 500)), _running(_pod("x1", 800))
    w = _running(replace(_pod("w", 400), annotations={PREEMPTIBLE_ANNOTATION: "false"}))
    world = World(nodes, [(x0, 0, (0,)), (w, 0, (0,)), (x1, 1, (0,))])
    members = tuple(make_pod(f"g{i}").share(350, "A100").build() for i in range(2))
    world.job_min = {"default/g": 2}
    plan = world.plan(Gang("default/g", members))  # World.plan checks the state
    assert _steps(plan) == [
        ("default/g0", 0, [("default/x0", 1)]),
        ("default/g1", 1, [("default/x1", 2)]),
    ]


def test_a_gang_whose_minimum_runs_needs_no_move() -> None:
    world = _world()
    assert world.plan(_gang(world, 2, 0, running=2)).unplanned == {
        "default/g": "gang default/g: its minimum is running; its extra pods get no moves"
    }
