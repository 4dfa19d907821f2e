"""One scheduling cycle: filters, the aggregated reasons, scores, ties and the GPU choice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kgpu.config import load_profile
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FloatArray, IntArray, Verdicts
from kgpu.framework.scheduler import Outcome, Placement, Scheduler, Unschedulable
from kgpu.framework.status import Code
from kgpu.model.gpu import GpuRequest
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodKey, PodSpec
from kgpu.plugins import names
from kgpu.plugins.node.best_fit import BestFit
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import typical_pods
from tests.builders import make_node, make_pod


def _scheduler(policy: str = "bestfit", pods: list[PodSpec] | None = None) -> Scheduler:
    context = PluginContext(seed=1, typical_pods=typical_pods(pods or []))
    return build_scheduler(load_profile(policy), context)


def test_pending_pod_gets_kube_scheduler_style_aggregate() -> None:
    state = ClusterState(
        [
            make_node("cpu-only").build(),
            make_node("t4").gpus(2, "T4").build(),
            make_node("small").gpus(8, "A100").cpu(2000).build(),
            make_node("busy").gpus(8, "A100").build(),
            make_node("cordoned").gpus(8, "A100").cordoned().build(),
        ]
    )
    state.allocate(make_pod("hog").gpus(8).build(), 3, range(8))
    outcome = _scheduler().schedule(state, make_pod("want").gpus(4, "A100").cpu(4000).build())
    assert isinstance(outcome, Unschedulable)
    assert outcome.status.code == Code.UNSCHEDULABLE
    assert outcome.message == (
        "0/5 nodes are available: 1 insufficient GPU, 1 insufficient cpu, "
        "1 node(s) had a GPU model the pod does not allow, 1 node(s) had no GPU, "
        "1 node(s) were unschedulable."
    )


def test_selector_and_taints_filter_nodes() -> None:
    state = ClusterState(
        [
            make_node("tainted").gpus(8).taint("dedicated", "ml").label("zone", "a").build(),
            make_node("plain").gpus(8).label("zone", "b").build(),
        ]
    )
    sched = _scheduler()
    pod = make_pod("p").gpus(1).selector("zone", "a").build()
    outcome = sched.schedule(state, pod)
    assert isinstance(outcome, Unschedulable)
    assert outcome.message == (
        "0/2 nodes are available: 1 node(s) didn't match node selector, "
        "1 node(s) had untolerated taint."
    )
    tolerating = make_pod("q").gpus(1).selector("zone", "a").tolerate("dedicated", "ml").build()
    placed = sched.schedule(state, tolerating)
    assert isinstance(placed, Placement)
    assert state.nodes[placed.node].name == "tainted"


def test_a_new_shape_that_goes_where_an_earlier_one_could_keeps_its_static_reasons() -> None:
    state = ClusterState(
        [
            make_node("tainted").gpus(8).taint("dedicated", "ml").build(),
            make_node("cordoned").gpus(8).cordoned().build(),
            make_node("small").gpus(1).cpu(1000).build(),
        ]
    )
    sched = _scheduler()
    first = sched.schedule(state, make_pod("a").gpus(2).cpu(500).build())
    # Another shape, the same selector and tolerations: the static verdicts come from the
    # first, the changing filters still judge the small node for this pod's own request.
    second = sched.schedule(state, make_pod("b").gpus(1).cpu(2000).build())
    assert isinstance(first, Unschedulable) and isinstance(second, Unschedulable)
    assert first.message == (
        "0/3 nodes are available: 1 insufficient GPU, 1 node(s) had untolerated taint, "
        "1 node(s) were unschedulable."
    )
    assert second.message == first.message.replace("insufficient GPU", "insufficient cpu")
    assert len(sched.cache.statics) == 1


def test_the_shape_cache_keeps_within_its_bytes() -> None:
    state = ClusterState([make_node(f"n{i}").gpus(8).build() for i in range(100)])
    sched = _scheduler()
    sched.cache.max_bytes = 10_000  # an entry at 100 nodes holds about 1,800 bytes
    for cpu in range(1, 30):
        assert isinstance(sched.schedule(state, make_pod(f"p{cpu}").cpu(cpu).build()), Placement)
    held = [
        e.feasible.nbytes + e.reason_idx.nbytes + e.static_ok.nbytes
        for e in sched.cache.entries.values()
    ]
    assert 1 < len(held) < 29
    assert (
        sum(held) + sum(a.nbytes for e in sched.cache.entries.values() for a in e.scores.values())
        <= 10_000
    )


def test_ties_go_to_the_lowest_rank() -> None:
    state = ClusterState([make_node(f"n{i}").gpus(8).build() for i in range(4)])
    sched = _scheduler("gpuclustering")
    pod = make_pod("p").gpus(1).build()
    placed = sched.schedule(state, pod)
    assert isinstance(placed, Placement) and placed.node == 0
    sched.set_tie_rank(np.array([3, 2, 0, 1]))
    placed = sched.schedule(state, pod)
    assert isinstance(placed, Placement) and placed.node == 2


def test_share_goes_to_the_tightest_gpu_and_whole_gpus_to_the_lowest_idle() -> None:
    state = ClusterState([make_node("a").gpus(4).build()])
    state.allocate(make_pod("x").share(600).build(), 0, [1])
    state.allocate(make_pod("y").share(300).build(), 0, [2])
    sched = _scheduler("bestfit")
    share = sched.schedule(state, make_pod("s").share(350).build())
    assert isinstance(share, Placement) and share.gpus == (1,)
    whole = sched.schedule(state, make_pod("w").gpus(2).build())
    assert isinstance(whole, Placement) and whole.gpus == (0, 3)


_SHAPES = [GpuRequest(1, m) for m in (200, 500, 810)] + [GpuRequest(k, 1000) for k in (1, 2, 4)]


def _arrival_pods(arrivals: Sequence[tuple[int, ...]], shapes: list[GpuRequest]) -> list[PodSpec]:
    """A pod for each arrival: its shape's GPU request, its CPU in cores, 1 GiB."""
    return [
        PodSpec(PodKey(f"t/{i}"), cpu_milli=a[1] * 1000, memory_mib=1024, gpu=shapes[a[0]])
        for i, a in enumerate(arrivals)
    ]


def _mixed_nodes(cpu_milli: int | None = None) -> list[NodeInfo]:
    """Seven nodes of 4 or 8 GPUs, A100 or T4 (with ``cpu_milli`` cores where given)."""
    nodes = []
    for i in range(7):
        node = make_node(f"n{i}")
        if cpu_milli is not None:
            node = node.cpu(cpu_milli)
        nodes.append(node.gpus(8 if i % 2 else 4, "A100" if i % 3 else "T4").build())
    return nodes


def _take(
    state: ClusterState, pod: PodSpec, outcome: Outcome
) -> tuple[int, tuple[int, ...], float] | str:
    """Allocate ``pod`` where ``outcome`` placed it; what a run notes of the cycle: the
    placement (node, GPUs, score), or why the pod was not placed."""
    if isinstance(outcome, Placement):
        state.allocate(pod, outcome.node, outcome.gpus)
        return (outcome.node, outcome.gpus, outcome.score)
    return outcome.message


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 16)), min_size=5, max_size=120))
def test_cached_cycles_decide_exactly_as_uncached_ones(arrivals: list[tuple[int, int]]) -> None:
    """Keeping verdicts and scores per shape must never change a decision."""
    pods = _arrival_pods(arrivals, _SHAPES)
    nodes = _mixed_nodes()
    for policy in ("fgd", "bestfit", "gpupacking", "kgpu"):
        decisions = []
        for use_cache in (True, False):
            state = ClusterState(nodes)
            sched = _scheduler(policy, pods)
            sched.use_cache = use_cache
            run: list[tuple[int, object]] = []
            for pod in pods:
                outcome = sched.schedule(state, pod)
                if isinstance(outcome, Placement):
                    state.allocate(pod, outcome.node, outcome.gpus)
                    run.append((outcome.node, outcome.gpus))
                else:
                    run.append((-1, outcome.message))
            decisions.append(run)
        assert decisions[0] == decisions[1], policy


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 4), st.integers(0, 3)),
        min_size=5,
        max_size=150,
    ),
    st.sampled_from(["bestfit", "kgpu"]),
)
# Runs of one shape (rankings are made a few picks into a run), then every change.
@example([(0, 1, 0)] * 4 + [(0, 2, 1), (0, 1, 2), (0, 1, 3), (0, 3, 1)] * 3, "kgpu")
@example([(3, 1, 0)] * 4 + [(3, 2, 2), (3, 1, 1), (3, 1, 3), (4, 1, 0)] * 3, "bestfit")
def test_cycles_that_keep_a_shapes_ranking_decide_as_uncached_ones_as_pods_come_and_go(
    arrivals: list[tuple[int, int, int]], policy: str
) -> None:
    """A shape picked in a run keeps its feasible nodes ranked (``BestNodes``); pods leaving
    (scores falling, nodes feasible again), a trial put back (``restamp``) and new tie-break
    ranks must leave every choice as a cycle that keeps nothing makes it."""
    pods = _arrival_pods(arrivals, _SHAPES)
    nodes = _mixed_nodes(64_000)
    decisions = []
    for use_cache in (True, False):
        state = ClusterState(nodes)
        sched = _scheduler(policy, pods)
        sched.use_cache = use_cache
        held: list[PodKey] = []
        run: list[tuple[int, object, float] | str] = []
        for i, (pod, (_, _, then)) in enumerate(zip(pods, arrivals, strict=True)):
            outcome = sched.schedule(state, pod)
            run.append(noted := _take(state, pod, outcome))
            if not isinstance(noted, str):
                held.append(pod.key)
            if then == 1 and held:  # a pod leaves
                state.release(held.pop(i % len(held)))
            elif then == 2 and held:  # a trial: a pod out and back, its node's clock back
                key = held[i % len(held)]
                node = state.allocations[key].node
                stamps = {node: state.stamp(node)}
                state.restore(state.release(key))
                state.restamp(stamps)
            elif then == 3 and i % 4 == 0:
                sched.set_tie_rank(np.roll(np.arange(len(nodes)), i))
        decisions.append(run)
    assert decisions[0] == decisions[1]


class _BestFitNormalisedEveryCycle:
    """Best-fit without ``normalize_keeps_best``: the framework then normalises and sums
    every cycle. (A wrapper, not a subclass: the compiled build's BestFit is a native class.)"""

    name = names.BEST_FIT
    cacheable = True

    def __init__(self) -> None:
        self._inner = BestFit()

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        return self._inner.score(cycle, pod, nodes)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return self._inner.normalize(scores)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(1, 16)), min_size=5, max_size=80),
    st.sampled_from([0.5, 1.0, 3.0]),
    st.booleans(),
)
def test_a_lone_score_that_keeps_its_best_decides_as_the_normalised_sum_does(
    arrivals: list[tuple[int, int]], weight: float, ranked: bool
) -> None:
    """Best-fit alone is read off its raw scores: the same nodes, GPUs and totals as
    normalising every feasible node and summing, ties and all-equal cycles included."""
    pods = _arrival_pods(arrivals, _SHAPES)
    # Nodes a few cores apart, the roomiest first: raw scores a point apart, and the best
    # node often behind one that is a point short.
    nodes = [
        make_node(f"n{i}").cpu((58 - 3 * i) * 1000).gpus(8 if i % 3 else 4).build()
        for i in range(6)
    ]
    runs = []
    for plugin in (BestFit(), _BestFitNormalisedEveryCycle()):
        base = _scheduler("bestfit")
        sched = Scheduler(base.pre_filters, base.filters, [(plugin, weight)], base.gpu_choice)
        if ranked:
            sched.set_tie_rank(np.array([4, 1, 5, 0, 3, 2]))
        state = ClusterState(nodes)
        run: list[tuple[int, tuple[int, ...], float] | str] = []
        for pod in pods:
            outcome = sched.schedule(state, pod)
            run.append(_take(state, pod, outcome))
        runs.append(run)
    assert runs[0] == runs[1]
    assert {r[2] for r in runs[0] if isinstance(r, tuple)} <= {0.0, 100.0 * weight}


class _ArraysOnly:
    """A filter or score as the framework sees it without its node-by-node methods
    (``NodeByNodeFilter``, ``NodeByNodeScore``): every cycle then builds arrays. (A
    wrapper, as above.)"""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.name = inner.name
        self.cacheable = getattr(inner, "cacheable", True)

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        verdicts: Verdicts = self._inner.filter(cycle, pod, nodes)
        return verdicts

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        scores: FloatArray = self._inner.score(cycle, pod, nodes)
        return scores

    def normalize(self, scores: FloatArray) -> FloatArray:
        normalised: FloatArray = self._inner.normalize(scores)
        return normalised


_MODELLED = [*_SHAPES, GpuRequest(), GpuRequest(1, 500, models=("T4",))]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(_MODELLED) - 1), st.integers(1, 24), st.booleans()),
        min_size=5,
        max_size=150,
    )
)
@example([(3, 8, False)] * 12 + [(6, 2, True), (7, 60, False), (7, 1, True)] * 4)
def test_cycles_that_judge_changed_nodes_one_by_one_decide_as_array_cycles_do(
    arrivals: list[tuple[int, int, bool]],
) -> None:
    """A shape seen before judges and scores the few nodes changed since one by one in
    Python: the same nodes, GPUs, scores and reasons (full nodes, no room, wrong model,
    pods leaving) as a scheduler whose plugins only answer with arrays. So does a trial's
    question whether the pod passes a node (``passes``)."""
    pods = _arrival_pods(arrivals, _MODELLED)
    nodes = _mixed_nodes(48_000)
    runs = []
    for arrays in (False, True):
        base = _scheduler("bestfit")
        wrap = _ArraysOnly if arrays else (lambda plugin: plugin)
        sched = Scheduler(
            base.pre_filters,
            [wrap(f) for f in base.filters],
            [(wrap(p), w) for p, w in base.scores],
            base.gpu_choice,
        )
        state = ClusterState(nodes)
        held: list[PodKey] = []
        run: list[tuple[int, tuple[int, ...], float] | str | list[bool]] = []
        for i, (pod, (_, _, leave)) in enumerate(zip(pods, arrivals, strict=True)):
            outcome = sched.schedule(state, pod)
            run.append([sched.passes(state, pod, n) for n in range(len(nodes))])
            run.append(noted := _take(state, pod, outcome))
            if not isinstance(noted, str):
                held.append(pod.key)
            if leave and held:
                state.release(held.pop(i % len(held)))
        runs.append(run)
    assert runs[0] == runs[1]


def test_unknown_policy_names_the_choices() -> None:
    from kgpu.config import ProfileError

    with pytest.raises(ProfileError, match="unknown policy 'tetris': expected one of random"):
        load_profile("tetris")
