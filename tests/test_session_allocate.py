"""The allocate action as a harness: a snapshot in, decisions and events out."""

from __future__ import annotations

from kgpu.actions.allocate import allocate, undo
from kgpu.config import load_profile
from kgpu.plugins.registry import build_scheduler
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod


def test_session_places_by_priority_and_reports_the_rest() -> None:
    state = ClusterState([make_node("a").gpus(4, "A100").build()])
    pods = [
        make_pod("low").gpus(2).build(),
        make_pod("high").gpus(4).priority(100).build(),
        make_pod("share").share(500).build(),
    ]
    result = allocate(state, build_scheduler(load_profile("bestfit")), pods)
    assert [(b.pod, b.node, b.gpus) for b in result.binds] == [("default/high", "a", (0, 1, 2, 3))]
    assert [p.pod for p in result.pending] == ["default/low", "default/share"]
    assert result.pending[0].message == "0/1 nodes are available: 1 insufficient GPU."
    assert result.pending[1].message == (
        "0/1 nodes are available: 1 node(s) had no single GPU with enough free share."
    )
    assert [(e.pod, e.type, e.reason) for e in result.events] == [
        ("default/high", "Normal", "Scheduled"),
        ("default/low", "Warning", "FailedScheduling"),
        ("default/share", "Warning", "FailedScheduling"),
    ]
    assert result.events[0].message == "Successfully assigned default/high to a (GPUs 0,1,2,3)"


def test_undo_releases_exactly_what_the_bind_reserved() -> None:
    state = ClusterState([make_node("a").gpus(2).build()])
    result = allocate(
        state, build_scheduler(load_profile("fgd")), [make_pod("p").share(300).build()]
    )
    undo(state, result.binds[0])
    assert state.used_gpu_milli == 0 and state.allocations == {}
    state.check_invariants()
