"""The defragmentation planner: each move rule, fewest moves, moves only when the moved pod
has somewhere to go, the reasons it gives, and the state left as it was found."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from kgpu.actions.defrag_planner import Gang, Plan, apply_step, plan_moves
from kgpu.actions.defrag_rules import PREEMPTIBLE_ANNOTATION, MoveFacts, RunningPod
from kgpu.config import load_profile
from kgpu.framework.defrag_config import Defragmentation
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodKey, PodSpec
from kgpu.plugins.registry import build_scheduler
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod

NOW = 10_000.0
ON = Defragmentation.model_validate({"enabled": True, "minRuntimeSeconds": 0})


def _pod(name: str, milli: int = 1000, count: int = 1, cpu: int = 1000) -> PodSpec:
    builder = make_pod(name).cpu(cpu)
    return (builder.share(milli) if milli < 1000 else builder.gpus(count)).build()


@dataclass
class World:
    """A cluster with pods placed on given GPUs, their rule facts, and a scheduler."""

    nodes: list[NodeInfo]
    placed: list[tuple[RunningPod, int, tuple[int, ...]]]
    job_min: dict[str, int] = field(default_factory=dict)
    job_running: dict[str, int] = field(default_factory=dict)
    budget_allowed: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = ClusterState(self.nodes)
        for running, node, gpus in self.placed:
            self.state.allocate(running.pod, node, gpus)
        self.scheduler = build_scheduler(load_profile("bestfit"))

    def facts(self) -> MoveFacts:
        def on_node(n: int) -> Sequence[RunningPod]:
            return [r for r, node, _ in self.placed if node == n]

        return MoveFacts(NOW, on_node, self.job_min, self.job_running, self.budget_allowed)

    def plan(self, *pending: PodSpec | Gang, config: Defragmentation = ON) -> Plan:
        before = dict(self.state.allocations)
        plan = plan_moves(self.state, pending, self.facts(), self.scheduler.placement, config)
        assert self.state.allocations == before  # trials are undone
        return plan


def _running(pod: PodSpec, ran: float = 3600.0, **kw: object) -> RunningPod:
    return RunningPod(pod, NOW - ran, **kw)  # type: ignore[arg-type]


def _two_nodes(x: RunningPod, b_cpu: int = 64_000) -> World:
    """Node a: x on its only GPU (500 milli). Node b: w (400 milli, never moved). A pod
    asking one whole GPU fits nowhere while 1,100 milli sit idle; moving x to b makes
    room on a."""
    w = _pod("w", 400)
    w = replace(w, annotations={PREEMPTIBLE_ANNOTATION: "false"})
    nodes = [make_node("a").gpus(1).build(), make_node("b").gpus(1).cpu(b_cpu).build()]
    return World(nodes, [(x, 0, (0,)), (_running(w), 1, (0,))])


def test_one_move_makes_room_and_says_why() -> None:
    world = _two_nodes(_running(_pod("x", 500)))
    plan = world.plan(_pod("y"))
    assert plan.moves == 1 and not plan.unplanned
    (step,) = plan.steps
    (move,) = step.moves
    assert (step.node, step.gpus, move.pod.key, move.source, move.target) == (
        0,
        (0,),
        "default/x",
        0,
        1,
    )
    assert move.reason == (
        "moves pod default/x off node a: frees GPU 0 (500 milli) so that pending pod "
        "default/y (1 GPU) fits on GPU 0 there; placed again on node b GPU 0; "
        "preemptible at priority 0 < 100; priority 0 <= 0; ran 1h >= min-runtime 0s; "
        "no PodDisruptionBudget selects it"
    )
    apply_step(world.state, step)
    assert world.state.allocation(step.pending.key) is not None
    assert world.state.node_gpus_free(0) == [0] and world.state.node_gpus_free(1) == [100]


@pytest.mark.parametrize(
    ("x", "rule"),
    [
        (
            _running(replace(_pod("x", 500), annotations={PREEMPTIBLE_ANNOTATION: "false"})),
            "preemptibility",
        ),
        (_running(make_pod("x").share(500).priority(100).build()), "preemptibility"),
        (_running(make_pod("x").share(500).priority(1).build()), "priority"),
        (_running(_pod("x", 500), ran=60.0, min_runtime_s=600.0), "min-runtime"),
        (_running(_pod("x", 500), budgets=("default/pdb",)), "disruption budget"),
        (_running(_pod("x", 500), job="default/j"), "gang minimum"),
    ],
    ids=["annotation-false", "priority-not-below-100", "higher-priority", "young", "pdb", "gang"],
)
def test_each_rule_refuses_the_only_move(x: RunningPod, rule: str) -> None:
    world = _two_nodes(x)
    world.job_min, world.job_running = {"default/j": 2}, {"default/j": 2}
    world.budget_allowed = {"default/pdb": 0}
    plan = world.plan(_pod("y"))
    assert not plan.steps
    # w, on node b, is never movable: its refusal is counted too.
    refused = Counter([rule, "preemptibility"])
    counts = ", ".join(f"{r} {n}" for r, n in sorted(refused.items()))
    assert plan.unplanned[PodKey("default/y")] == (
        f"no node near fitting holds a movable pod (pods refused: {counts})"
    )


@pytest.mark.parametrize(
    "x",
    [
        _running(replace(_pod("x", 500), annotations={PREEMPTIBLE_ANNOTATION: "true"})),
        _running(make_pod("x").share(500).priority(100).build()),  # equal to the pending pod's
        _running(_pod("x", 500), ran=601.0, min_runtime_s=600.0),
        _running(_pod("x", 500), budgets=("default/pdb",)),
        _running(_pod("x", 500), job="default/j"),
    ],
    ids=["annotation-true", "equal-priority", "past-min-runtime", "pdb-allows", "gang-keeps"],
)
def test_each_rule_allows_when_its_condition_holds(x: RunningPod) -> None:
    world = _two_nodes(x)
    world.job_min, world.job_running = {"default/j": 2}, {"default/j": 3}
    world.budget_allowed = {"default/pdb": 1}
    config = ON.model_copy(update={"preemptible_below_priority": 1000})
    plan = world.plan(make_pod("y").gpus(1).priority(100).build(), config=config)
    assert plan.moves == 1, plan.unplanned


def test_a_budget_is_shared_by_the_moves_of_one_plan() -> None:
    """Two pods under one budget must both move for the pending pod: a budget allowing one
    disruption refuses, one allowing two lets both go."""
    pods = [_running(_pod(n, 300), budgets=("default/pdb",)) for n in ("x1", "x2")]
    nodes = [make_node("a").gpus(1).build(), make_node("b").gpus(1).build()]
    world = World(nodes, [(pods[0], 0, (0,)), (pods[1], 0, (0,))])
    world.budget_allowed = {"default/pdb": 1}
    assert not world.plan(_pod("y")).steps
    world.budget_allowed = {"default/pdb": 2}
    plan = world.plan(_pod("y"))
    assert plan.moves == 2
    reasons = [m.reason for m in plan.steps[0].moves]
    assert "PodDisruptionBudget default/pdb allows 2 more disruption(s)" in reasons[0]
    assert "PodDisruptionBudget default/pdb allows 1 more disruption(s)" in reasons[1]


def test_a_gang_is_never_taken_below_its_minimum_by_two_moves() -> None:
    pods = [_running(_pod(n, 300), job="default/j") for n in ("x1", "x2")]
    nodes = [make_node("a").gpus(1).build(), make_node("b").gpus(1).build()]
    world = World(nodes, [(pods[0], 0, (0,)), (pods[1], 0, (0,))])
    world.job_min, world.job_running = {"default/j": 1}, {"default/j": 2}
    assert not world.plan(_pod("y")).steps  # each alone may go, not both
    world.job_running = {"default/j": 3}  # a third pod runs elsewhere
    assert world.plan(_pod("y")).moves == 2


def test_a_pod_selected_by_two_budgets_never_moves() -> None:
    x = _running(_pod("x", 500), budgets=("default/a", "default/b"))
    world = _two_nodes(x)
    world.budget_allowed = {"default/a": 5, "default/b": 5}
    assert "disruption budget 1" in world.plan(_pod("y")).unplanned[PodKey("default/y")]


def test_fewest_moves_then_least_gpu_moved() -> None:
    """Node a needs two moves (two 300-milli pods on each GPU); node b one: v (400) or z
    (500), either placed again elsewhere. The plan moves v alone."""
    a = [_running(_pod(f"x{i}", 300)) for i in range(4)]
    z, v = _running(_pod("z", 500)), _running(_pod("v", 400))
    nodes = [make_node("a").gpus(2).build(), make_node("b").gpus(2).build()]
    placed = [(a[0], 0, (0,)), (a[1], 0, (0,)), (a[2], 0, (1,)), (a[3], 0, (1,))]
    world = World(nodes, [*placed, (z, 1, (0,)), (v, 1, (1,))])
    plan = world.plan(_pod("y"))
    (step,) = plan.steps
    assert step.node == 1 and [m.pod.key for m in step.moves] == ["default/v"]


def test_no_move_when_the_moved_pod_fits_nowhere_else() -> None:
    """x asks 30 CPUs; node b has 8: moving x would only evict it."""
    world = _two_nodes(_running(_pod("x", 500, cpu=30_000)), b_cpu=8_000)
    plan = world.plan(_pod("y"))
    assert not plan.steps
    assert plan.unplanned[PodKey("default/y")] == (
        "no set of at most 2 moves on the 1 nodes examined lets it fit with every moved "
        "pod placed again"
    )
    roomy = _two_nodes(_running(_pod("x", 500, cpu=30_000)), b_cpu=64_000)
    assert roomy.plan(_pod("y")).moves == 1


def test_no_move_when_the_cluster_is_full_not_fragmented() -> None:
    world = _two_nodes(_running(_pod("x", 700)))  # 300 + 600 idle < 1,000
    assert world.plan(_pod("y")).unplanned[PodKey("default/y")] == (
        "900 milli-GPU idle on the schedulable nodes, it asks 1000: no move makes "
        "room that is not there"
    )


def test_a_move_may_go_to_a_node_the_waiting_pod_cannot_use() -> None:
    """y asks one A100; the only A100 (node a) has 500 milli idle next to x, which may run
    on any GPU. Node b's idle T4 is of no use to y, but x can go there: one move."""
    nodes = [make_node("a").gpus(1).build(), make_node("b").gpus(1, model="T4").build()]
    world = World(nodes, [(_running(_pod("x", 500)), 0, (0,))])
    plan = world.plan(make_pod("y").gpus(1, "A100").build())
    (step,) = plan.steps
    (move,) = step.moves
    assert (step.node, move.pod.key, move.source, move.target) == (0, "default/x", 0, 1)


def test_the_round_budget_caps_the_moves() -> None:
    """Two pending pods, each needing one move; a round of one move places the first."""
    nodes = [make_node(n).gpus(1).build() for n in ("a", "b", "c", "d")]
    xs = [_running(_pod(f"x{i}", 300)) for i in range(2)]
    ws = [
        _running(replace(_pod(f"w{i}", 500), annotations={PREEMPTIBLE_ANNOTATION: "false"}))
        for i in range(2)
    ]
    world = World(nodes, [(xs[0], 0, (0,)), (xs[1], 1, (0,)), (ws[0], 2, (0,)), (ws[1], 3, (0,))])
    both = world.plan(_pod("y1"), _pod("y2"))
    assert [len(s.moves) for s in both.steps] == [1, 1]
    one = world.plan(
        _pod("y1"), _pod("y2"), config=ON.model_copy(update={"max_moves_per_round": 1})
    )
    assert [s.pending.key for s in one.steps] == ["default/y1"]
    assert one.unplanned == {"default/y2": "the round's moves are spent"}


def test_the_plan_is_deterministic() -> None:
    def once() -> list[tuple[str, int, int]]:
        world = _two_nodes(_running(_pod("x", 500)))
        return [
            (m.pod.key, m.source, m.target) for s in world.plan(_pod("y")).steps for m in s.moves
        ]

    assert once() == once()
