"""Sessions as a harness: gangs, elastic jobs, enqueue, backfill, order and bad input."""

from __future__ import annotations

from kgpu.framework.status import Code
from kgpu.model.queue import QueueSpec
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, card, pending

ALLOCATE = ("allocate",)


def test_a_gang_that_cannot_fit_whole_holds_nothing_and_others_go_ahead() -> None:
    snap = Snap([make_node("a").gpus(4).build()], queues=[QueueSpec("q")])
    snap.job("big", "q", min_member=3, created=0)
    snap.job("small", "q", created=1)
    for i in range(3):
        snap.pending(make_pod(f"big-{i}").gpus(2), job="big")
    snap.pending(make_pod("small-0").gpus(2), job="small")
    result = snap.run(actions=ALLOCATE)
    assert binds(result) == [("small-0", "a")]
    assert set(snap.state.allocations) == {"default/small-0"}
    assert pending(result) == {
        f"big-{i}": "0/1 nodes are available: 1 insufficient GPU. (gang default/big: 2 of 3 pods fit)"
        for i in range(3)
    }


def test_without_the_gang_plugin_pods_of_a_job_go_one_by_one() -> None:
    snap = Snap([make_node("a").gpus(4).build()], queues=[QueueSpec("q")])
    snap.job("big", "q", min_member=3)
    for i in range(3):
        snap.pending(make_pod(f"big-{i}").gpus(2), job="big")
    result = snap.run(actions=ALLOCATE, plugins=("proportion", "priority"))
    assert binds(result) == [("big-0", "a"), ("big-1", "a")]


def test_elastic_job_gets_its_minimum_as_a_gang_and_extras_after_other_gangs() -> None:
    snap = Snap([make_node("a").gpus(4).build()], queues=[QueueSpec("q")])
    snap.job("elastic", "q", min_member=1, max_member=3, created=0)
    snap.job("gang", "q", min_member=2, created=1)
    for i in range(4):
        snap.pending(make_pod(f"e-{i}").gpus(1), job="elastic")
    for i in range(2):
        snap.pending(make_pod(f"g-{i}").gpus(1), job="gang")
    result = snap.run(actions=ALLOCATE)
    assert binds(result) == [("e-0", "a"), ("g-0", "a"), ("g-1", "a"), ("e-1", "a")]
    assert pending(result) == {
        "e-2": "0/1 nodes are available: 1 insufficient GPU.",
        "e-3": "job default/elastic runs its maxMember of 3 pods",
    }


def test_a_job_with_fewer_pods_than_its_minimum_is_reported_not_tried() -> None:
    snap = Snap([make_node("a").gpus(4).build()], queues=[QueueSpec("q")])
    snap.job("short", "q", min_member=3)
    snap.pending(make_pod("s-0").gpus(1), job="short")
    result = snap.run(actions=ALLOCATE)
    assert result.binds == []
    assert result.pending[0].status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.pending[0].message == "job default/short has 1 pods, fewer than its minMember 3"


def test_higher_priority_then_earlier_creation_goes_first_inside_a_queue() -> None:
    snap = Snap([make_node("a").gpus(2).build()], queues=[QueueSpec("q")])
    snap.job("old-low", "q", priority=0, created=0)
    snap.job("new-high", "q", priority=10, created=5)
    snap.job("newer-high", "q", priority=10, created=6)
    snap.pending(make_pod("old-low").gpus(1), job="old-low")
    snap.pending(make_pod("new-high").gpus(1), job="new-high")
    snap.pending(make_pod("newer-high").gpus(1), job="newer-high")
    result = snap.run(actions=ALLOCATE)
    assert binds(result) == [("new-high", "a"), ("newer-high", "a")]


def test_enqueue_admits_jobs_within_the_queue_limit_counting_earlier_admissions() -> None:
    snap = Snap([make_node("a").gpus(8).build()], queues=[QueueSpec("q", limit={"gpu": 4000})])
    snap.job("first", "q", min_member=3, created=0)
    snap.job("second", "q", min_member=2, created=1)
    for i in range(3):
        snap.pending(make_pod(f"f-{i}").gpus(1), job="first")
    for i in range(2):
        snap.pending(make_pod(f"s-{i}").gpus(1), job="second")
    result = snap.run(actions=("enqueue", "allocate"))
    assert [b for b, _ in binds(result)] == ["f-0", "f-1", "f-2"]
    message = "queue q: gpu requested 2, allocated 3, quota 4"
    assert pending(result) == {"s-0": message, "s-1": message}
    group_events = [(e.pod, e.reason, e.message) for e in result.events if e.kind == "PodGroup"]
    assert group_events == [("default/second", "InsufficientScalarQuota", message)]


def test_enqueue_holds_a_job_to_its_min_resources_where_they_ask_more_than_its_pods() -> None:
    snap = Snap([make_node("a").gpus(8).build()], queues=[QueueSpec("q", limit={"gpu": 4000})])
    snap.job("reserved", "q", created=0, min_resources={"gpu": 3000, "cpu": 1})
    snap.job("first", "q", created=1)
    snap.job("second", "q", created=2)
    snap.pending(make_pod("r-0").gpus(1), job="reserved")
    snap.pending(make_pod("f-0").gpus(1), job="first")
    snap.pending(make_pod("s-0").gpus(1), job="second")
    result = snap.run(actions=("enqueue", "allocate"))
    # "reserved" is admitted holding 3 GPUs of the 4, so only one more job gets in.
    assert [b for b, _ in binds(result)] == ["r-0", "f-0"]
    assert pending(result) == {"s-0": "queue q: gpu requested 1, allocated 4, quota 4"}
    snap = Snap([make_node("a").gpus(8).build()], queues=[QueueSpec("q", limit={"gpu": 4000})])
    snap.job("too-big", "q", min_resources={"gpu": 5000})
    snap.pending(make_pod("t-0").gpus(1), job="too-big")
    assert pending(snap.run(actions=("enqueue", "allocate"))) == {
        "t-0": "queue q: gpu requested 5, allocated 0, quota 4"
    }


def test_backfill_places_pods_that_ask_for_nothing() -> None:
    snap = Snap([make_node("a").gpus(1).max_pod_count(2).build()], queues=[QueueSpec("q")])
    snap.pending(make_pod("gpu").gpus(1))
    snap.pending(make_pod("be-1").cpu(0).memory(0))
    snap.pending(make_pod("be-2").cpu(0).memory(0))
    result = snap.run(actions=("allocate", "backfill"))
    assert binds(result) == [("gpu", "a"), ("be-1", "a")]
    assert pending(result) == {"be-2": "0/1 nodes are available: 1 too many pods."}


def test_bad_queues_and_annotations_hold_only_their_own_jobs() -> None:
    snap = Snap([make_node("a").gpus(4).build()], queues=[QueueSpec("q"), QueueSpec("p")])
    snap.queues.append(QueueSpec("child", parent="p"))
    snap.job("lost", "nowhere")
    snap.job("parent", "p")
    snap.job("bad-card", "q")
    snap.job("good", "q")
    snap.pending(make_pod("lost").gpus(1), job="lost")
    snap.pending(make_pod("parent").gpus(1), job="parent")
    snap.pending(card(make_pod("bad-card").gpus(1), "A100||H100"), job="bad-card")
    snap.pending(make_pod("good").gpus(1), job="good")
    snap.pending(make_pod("orphan").gpus(1), job="no-such-group")
    result = snap.run()
    assert binds(result) == [("good", "a")]
    assert pending(result) == {
        "bad-card": 'Pod default/bad-card: annotation volcano.sh/card.name is "A100||H100", '
        'expected card names separated by "|", such as "A100|H100"',
        "lost": "queue nowhere does not exist or is invalid",
        "orphan": "PodGroup default/no-such-group does not exist",
        "parent": "queue p has child queues; jobs go to leaf queues",
    }


def test_pods_without_queue_or_job_run_in_the_default_queue() -> None:
    snap = Snap([make_node("a").gpus(2).build()])
    snap.pending(make_pod("p").gpus(1))
    result = snap.run()
    assert binds(result) == [("p", "a")]
    assert result.allocated["default"]["gpu"] == 1000


def test_a_jobs_pods_go_higher_priority_first_then_by_name_whatever_their_listing() -> None:
    snap = Snap([make_node("a").gpus(2).build()], queues=[QueueSpec("q")])
    snap.job("j", "q", max_member=3)
    snap.pending(make_pod("p-b").gpus(1).priority(0), job="j")
    snap.pending(make_pod("p-c").gpus(1).priority(5), job="j")
    snap.pending(make_pod("p-a").gpus(1).priority(0), job="j")
    result = snap.run(actions=ALLOCATE)
    assert binds(result) == [("p-c", "a"), ("p-a", "a")]
    assert pending(result) == {"p-b": "0/1 nodes are available: 1 insufficient GPU."}


def test_a_jobs_pods_of_one_priority_go_by_name_with_or_without_the_priority_plugin() -> None:
    for plugins in (("proportion", "priority", "gang"), ("proportion", "gang")):
        snap = Snap([make_node("a").gpus(2).build()], queues=[QueueSpec("q")])
        snap.job("j", "q", max_member=3)
        for name in ("z", "x", "y"):
            snap.pending(make_pod(name).gpus(1).priority(3), job="j")
        result = snap.run(actions=ALLOCATE, plugins=plugins)
        assert binds(result) == [("x", "a"), ("y", "a")], plugins
