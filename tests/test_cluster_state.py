"""ClusterState: exact allocate and release, and refusals of impossible changes."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.model.card import PRODUCT_LABEL
from kgpu.model.gpu import GpuRequest
from kgpu.model.pod import PodKey, PodSpec
from kgpu.state.cluster import Allocation, AllocationError, ClusterState
from tests.builders import make_node, make_pod, state_arrays


def _cluster() -> ClusterState:
    return ClusterState(
        [
            make_node("a").gpus(8, "A100").build(),
            make_node("b").gpus(2, "T4").cpu(8000).build(),
            make_node("c").build(),
        ]
    )


def test_gpu_slots_past_a_nodes_count_hold_nothing() -> None:
    state = _cluster()
    assert state.max_gpus == 8
    assert state.node_gpus_free(1) == [1000, 1000]
    assert state.gpu_free[1].tolist() == [1000, 1000, 0, 0, 0, 0, 0, 0]
    assert state.total_gpu_milli == 10_000
    assert state.gpu_idle_count.tolist() == [8, 2, 0]


def test_allocate_then_release_restores_every_array() -> None:
    state = _cluster()
    before = state_arrays(state)
    share = make_pod("s").share(300).build()
    whole = make_pod("w").gpus(2).cpu(4000).build()
    state.allocate(share, 0, [3])
    state.allocate(whole, 1, [0, 1])
    assert state.node_gpus_free(0)[3] == 700
    assert state.gpu_max_free[1] == 0
    assert state.used_gpu_milli == 2300
    state.release(share.key)
    state.release(whole.key)
    for key, value in before.items():
        if key not in ("node_clock",):
            assert np.array_equal(getattr(state, key), value), key


@pytest.mark.parametrize(
    ("pod", "node", "gpus", "message"),
    [
        (make_pod("x").share(500).build(), 0, [], "needs 1 distinct GPUs, got ()"),
        (make_pod("x").gpus(2).build(), 0, [1, 1], "needs 2 distinct GPUs, got (1, 1)"),
        (make_pod("x").gpus(1).build(), 1, [5], "needs 1000 milli on GPU 5 of b"),
        (make_pod("x").cpu(9000).build(), 1, [], "does not fit node b"),
    ],
)
def test_impossible_allocations_are_refused_and_change_nothing(
    pod: PodSpec, node: int, gpus: list[int], message: str
) -> None:
    state = _cluster()
    with pytest.raises(AllocationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        state.allocate(pod, node, gpus)
    assert state.used_gpu_milli == 0
    assert state.allocations == {}
    state.check_invariants()


def test_a_pod_is_allocated_at_most_once_and_released_once() -> None:
    state = _cluster()
    pod = make_pod("once").gpus(1).build()
    state.allocate(pod, 0, [0])
    with pytest.raises(AllocationError, match="already allocated"):
        state.allocate(pod, 0, [1])
    state.release(pod.key)
    with pytest.raises(AllocationError, match="holds nothing"):
        state.release(pod.key)


@st.composite
def _operations(draw: st.DrawFn) -> list[tuple[str, int, int, int]]:
    ops = []
    for i in range(draw(st.integers(1, 60))):
        ops.append(
            (
                draw(st.sampled_from(["alloc", "alloc", "release"])),
                i,
                draw(st.sampled_from([100, 250, 500, 810, 1000])),
                draw(st.integers(1, 4)),
            )
        )
    return ops


@settings(max_examples=80, deadline=None)
@given(_operations(), st.integers(0, 2**32 - 1))
def test_random_allocate_release_sequences_keep_invariants(
    ops: list[tuple[str, int, int, int]], seed: int
) -> None:
    state = _cluster()
    initial = (state.gpu_free.copy(), state.cpu_free.copy(), state.mem_free.copy())
    rng = np.random.default_rng(seed)
    held: list[PodKey] = []
    for op, i, milli, count in ops:
        if op == "release" and held:
            state.release(held.pop(int(rng.integers(len(held)))))
        elif op == "alloc":
            gpu = GpuRequest(1, milli) if milli < 1000 else GpuRequest(count, 1000)
            pod = PodSpec(PodKey(f"t/{i}"), cpu_milli=500, memory_mib=256, gpu=gpu)
            node = int(rng.integers(2))
            free = state.gpu_free[node]
            fits = np.flatnonzero(free >= gpu.milli)[: gpu.count]
            if len(fits) == gpu.count and state.cpu_free[node] >= 500:
                state.allocate(pod, node, fits)
                held.append(pod.key)
        state.check_invariants()
        # No GPU is ever given more than its capacity, whatever the order of operations.
        assert (state.gpu_free >= 0).all()
    for key in held:
        state.release(key)
    assert np.array_equal(state.gpu_free, initial[0])
    assert np.array_equal(state.cpu_free, initial[1])
    assert np.array_equal(state.mem_free, initial[2])


def test_restore_puts_back_exactly_what_release_returned() -> None:
    state = ClusterState([make_node("n").gpus(2).build()])
    pod = make_pod("p").share(500).build()
    held = state.allocate(pod, 0, (1,), need=(500, 1000))
    assert state.release(pod.key) == held
    state.restore(held)
    assert state.allocations[pod.key] == held
    assert int(state.gpu_mem_free[0, 1]) == 81920 - 1000
    with pytest.raises(AllocationError, match="pod default/p is already allocated"):
        state.restore(held)


def test_an_allocation_is_a_value_compared_hashed_and_pickled_by_its_fields() -> None:
    state = ClusterState([make_node("n").gpus(2).build()])
    pod = make_pod("p").share(500).build()
    held = state.allocate(pod, 0, (1,), need=(500, 1000))
    again = pickle.loads(pickle.dumps(held))
    assert again == held and hash(again) == hash(held) and {held: 1}[again] == 1
    assert again.gpus == (1,) and again.gpu_memory == (1000,) and again.odd
    other_gpu = Allocation(
        held.pod, held.node, (0,), held.gpu_milli, held.cpu_milli, held.memory_mib,
        held.gpu_memory, held.odd,
    )  # fmt: skip
    assert other_gpu != held and other_gpu.mig_profile == -1 and other_gpu.rdma == ()
    assert repr(held).startswith("Allocation(pod='default/p', node=0, gpus=(1,), gpu_milli=500")


def test_restore_refuses_when_the_room_is_taken() -> None:
    state = ClusterState([make_node("n").gpus(1).build()])
    first = state.allocate(make_pod("first").share(600).build(), 0, (0,))
    state.release(first.pod)
    state.allocate(make_pod("second").share(500).build(), 0, (0,))
    with pytest.raises(AllocationError, match="pod default/first cannot be put back on n"):
        state.restore(first)
    assert "default/first" not in state.allocations
    assert int(state.gpu_free[0, 0]) == 500


def test_a_nodes_figures_read_one_by_one_are_the_arrays() -> None:
    state = _cluster()
    state.allocate(make_pod("s").share(300).build(), 0, [3])
    state.allocate(make_pod("w").gpus(2).cpu(4000).build(), 1, [0, 1])
    for n in range(len(state)):
        slots = int(state.max_pods[n] - state.pods[n])
        assert state.room(n) == (int(state.cpu_free[n]), int(state.mem_free[n]), slots)
        assert state.gpu_row(n) == state.gpu_free[n].tolist()
        assert state.gpu_summary(n) == (int(state.gpu_idle_count[n]), int(state.gpu_max_free[n]))
        assert state.stamp(n) == int(state.node_clock[n])


def test_restamp_gives_a_trials_nodes_their_clocks_back_but_never_the_clock() -> None:
    state = _cluster()
    held = state.allocate(make_pod("p").share(500).build(), 0, [0])
    before, clock = state.node_clock.copy(), state.clock
    stamps = {0: state.stamp(0)}
    state.restore(state.release(held.pod))
    assert state.stamp(0) > int(before[0])
    state.restamp(stamps)
    assert np.array_equal(state.node_clock, before)
    assert state.clock == clock + 2  # stamps seen mid-trial are never seen again


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5), st.booleans()), max_size=300))
def test_the_nodes_changed_since_a_clock_are_those_whose_stamp_is_later(
    steps: list[tuple[int, int, bool]],
) -> None:
    """``changed_since`` reads the latest ticks: the same nodes as comparing every stamp,
    trials put back with ``restamp`` included, or None once too many ticks went by."""
    state = ClusterState([make_node(f"n{i}").gpus(2).build() for i in range(6)])
    seen = [0]
    for i, (node, back, trial) in enumerate(steps):
        pod = make_pod(f"p{i}").cpu(1).build()
        if trial:
            stamps = {node: state.stamp(node)}
            state.release(state.allocate(pod, node).pod)
            state.restamp(stamps)
        else:
            state.allocate(pod, node)
        seen.append(state.clock)
        since = seen[max(0, len(seen) - 1 - back * 7)]
        found = state.changed_since(since, 16)
        if found is None:
            assert state.clock - since > 16
        else:
            assert found == np.flatnonzero(state.node_clock > since).tolist()


def test_changes_older_than_the_kept_ticks_are_not_told() -> None:
    state = ClusterState([make_node("n").gpus(1).build()])
    for i in range(5000):
        state.release(state.allocate(make_pod(f"p{i}").build(), 0).pod)
    assert state.changed_since(0, 100_000) is None
    assert state.changed_since(state.clock - 3, 100_000) == [0]


def test_the_nodes_a_model_works_out_again_are_those_whose_clock_moved() -> None:
    """``moved``: of a few nodes asked, those whose clock moved since ``seen``; asked of
    most of the cluster, every node whose clock moved, asked or not."""
    state = ClusterState([make_node(f"n{i}").gpus(2).build() for i in range(16)])
    seen = state.node_clock.copy()
    state.allocate(make_pod("a").cpu(1).build(), 1)
    state.allocate(make_pod("b").cpu(1).build(), 6)
    changed, clocks = state.moved(seen, np.array([0, 1], dtype=np.int64))
    assert changed.tolist() == [1] and clocks.tolist() == [1]
    changed, clocks = state.moved(seen, np.array([0, 2], dtype=np.int64))
    assert changed.tolist() == [] and clocks.tolist() == []
    changed, clocks = state.moved(seen, np.arange(5, dtype=np.int64))
    assert changed.tolist() == [1, 6] and clocks.tolist() == [1, 2]


def test_the_cards_nodes_offer_are_those_of_the_schedulable_ones_worked_out_once() -> None:
    a100 = make_node("a").gpus(8, "A100").label(PRODUCT_LABEL, "NVIDIA-A100-80GB")
    state = ClusterState(
        [
            a100.build(),
            make_node("t").gpus(2, "T4").label(PRODUCT_LABEL, "Tesla-T4").build(),
            replace(a100, name="cordoned").cordoned().build(),
            make_node("c").build(),
        ]
    )
    assert state.offered_cards() == {"NVIDIA-A100-80GB": 8000, "Tesla-T4": 2000}
    assert state.offered_cards() is state.offered_cards()
