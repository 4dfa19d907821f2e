"""Which queue is served next, as allocate shows it: by the order its binds come in.

A job that fails before placing anything changes no queue's account; its queue keeps its
place (the picker does not re-key it) and leaves only once it has no work left.
"""

from __future__ import annotations

from kgpu.model.queue import QueueSpec
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, pending

G = 1000


def _two_queues() -> Snap:
    return Snap(
        [make_node("n").gpus(2).build()],
        [QueueSpec("a", deserved={"gpu": G}), QueueSpec("b", deserved={"gpu": G})],
    )


def test_a_queue_whose_job_places_nothing_is_served_again_first() -> None:
    snap = _two_queues()
    # Tried first in queue a (higher priority), and fits no node: a keeps its turn.
    snap.pending(make_pod("stuck").gpus(1).selector("zone", "nowhere").priority(10), queue="a")
    snap.pending(make_pod("a1").gpus(1), queue="a")
    snap.pending(make_pod("a2").gpus(1), queue="a")
    snap.pending(make_pod("b1").gpus(1), queue="b")
    result = snap.run(actions=("enqueue", "allocate"))
    # a (first by name among equals) places a1, then b is the less served, then a2 finds
    # no room left.
    assert binds(result) == [("a1", "n"), ("b1", "n")]
    assert set(pending(result)) == {"stuck", "a2"}
    assert pending(result)["a2"] == "0/1 nodes are available: 1 insufficient GPU."


def test_a_queue_left_without_work_after_a_failure_gives_way() -> None:
    snap = _two_queues()
    snap.pending(make_pod("stuck").gpus(1).selector("zone", "nowhere"), queue="a")
    snap.pending(make_pod("b1").gpus(1), queue="b")
    snap.pending(make_pod("b2").gpus(1), queue="b")
    result = snap.run(actions=("enqueue", "allocate"))
    assert binds(result) == [("b1", "n"), ("b2", "n")]
    assert list(pending(result)) == ["stuck"]
