"""The session itself: how callbacks combine, statements, and what close leaves behind."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kgpu.actions.allocate import Allocate
from kgpu.actions.placement import Placer
from kgpu.config import load_profile
from kgpu.framework.scheduler import Placement
from kgpu.framework.session import Session
from kgpu.framework.statement import Statement
from kgpu.framework.status import Code, Status
from kgpu.model.decision import EvictionKind
from kgpu.model.job import JobInfo, Task
from kgpu.model.queue import QueueSpec
from kgpu.plugins.registry import build_scheduler
from kgpu.plugins.session.proportion import Proportion
from tests.builders import PodBuilder, make_node, make_pod
from tests.session_harness import Snap


class _Recorder:
    """A plugin registering fixed answers, to see how the session combines them."""

    def __init__(self, name: str, order: int = 0, refuse: str = "", judge: bool = True) -> None:
        self.name = name
        self.order = order
        self.refuse = refuse
        self.judge = judge

    def on_open(self, session: Session) -> None:
        session.callbacks.job_order.append(
            lambda job: (self.order if job.key.endswith("b") else 0,)
        )
        if self.refuse:
            refusal = Status(Code.UNSCHEDULABLE, (self.refuse,), self.name, "Refused")
            session.callbacks.allocatable.append(lambda job, task, vec: refusal)
        session.callbacks.preemptable.append(lambda job, unit: self.judge)


def _session(snap: Snap, *plugins: _Recorder) -> Session:
    return Session(snap.snapshot(), build_scheduler(load_profile("bestfit")), plugins)


def _two_jobs() -> Snap:
    snap = Snap([make_node("n").gpus(1).build()], queues=[QueueSpec("q")])
    snap.job("a", "q", created=0)
    snap.job("b", "q", created=1)
    snap.pending(make_pod("a").gpus(1), job="a")
    snap.pending(make_pod("b").gpus(1), job="b")
    return snap


def test_orders_combine_first_plugin_that_tells_apart_decides() -> None:
    session = _session(_two_jobs(), _Recorder("tie", 0), _Recorder("b-first", -1))
    assert [j.key for j in sorted(session.jobs, key=session.callbacks.job_key)] == [
        "default/b",
        "default/a",
    ]
    session = _session(_two_jobs(), _Recorder("a-first", 1), _Recorder("b-first", -1))
    assert [j.key for j in sorted(session.jobs, key=session.callbacks.job_key)] == [
        "default/a",
        "default/b",
    ]
    session = _session(_two_jobs())  # no plugin: creation time
    assert [j.key for j in sorted(session.jobs, key=session.callbacks.job_key)] == [
        "default/a",
        "default/b",
    ]


class _QueueOrder:
    """Orders queues by where their name comes in ``first``, then not at all."""

    name = "queue-order"

    def __init__(self, first: Sequence[str]) -> None:
        self.first = first

    def on_open(self, session: Session) -> None:
        tree, first = session.tree, self.first

        def key(q: int) -> tuple[int, int]:
            name = tree.name(q)
            return (0, first.index(name)) if name in first else (1, 0)

        session.callbacks.queue_order.append(key)


def test_queue_orders_combine_after_the_profiles_and_names_break_ties() -> None:
    snap = Snap(
        [make_node("n").gpus(2).build()],
        queues=[QueueSpec("a"), QueueSpec("b"), QueueSpec("c"), QueueSpec("d")],
    )
    snap.pending(make_pod("p").gpus(1), queue="a")
    snap.pending(make_pod("r").gpus(1), queue="d")
    session = Session(
        snap.snapshot(),
        build_scheduler(load_profile("bestfit")),
        (Proportion(), _QueueOrder(["d", "c"])),
    )
    tree = session.tree
    a, b, c, d = (tree.index[n] for n in "abcd")
    # Nothing held: proportion's keys tie, so the plugin after it decides, then names.
    assert sorted([a, b, c, d], key=session.callbacks.queue_key) == [d, c, a, b]
    statement = session.statement()
    task = next(t for job in session.jobs if job.queue == d for t in job.pending)
    statement.allocate(task, 0, (0,), None)
    # Now d holds a GPU: past the others in proportion's order, whatever the plugin says.
    assert sorted([a, b, c, d], key=session.callbacks.queue_key) == [c, a, b, d]


def test_allocatable_all_must_pass_and_the_first_refusal_is_the_reason() -> None:
    session = _session(_two_jobs(), _Recorder("x", refuse="first"), _Recorder("y", refuse="second"))
    Allocate().execute(session)
    result = session.close()
    assert result.binds == []
    assert {p.message for p in result.pending} == {"first"}


def test_victim_judges_must_all_accept_and_none_means_no_victims() -> None:
    snap = _two_jobs()
    job: JobInfo = _session(snap).jobs[0]
    unit: Sequence[Task] = snap.tasks[:1]
    assert not _session(snap).callbacks.victim_ok(job, unit, reclaim=False)
    assert _session(snap, _Recorder("y"), _Recorder("z")).callbacks.victim_ok(
        job, unit, reclaim=False
    )
    assert not _session(snap, _Recorder("y"), _Recorder("n", judge=False)).callbacks.victim_ok(
        job, unit, reclaim=False
    )


def test_statement_discard_undoes_in_reverse_and_restores_everything() -> None:
    snap = Snap([make_node("n").gpus(4).build()], queues=[QueueSpec("q")])
    victim = snap.running(make_pod("old").gpus(2), node="n", queue="q")
    fresh = snap.pending(make_pod("new").gpus(4), queue="q")
    session = _session(snap)
    before = (dict(snap.state.allocations), snap.state.gpu_free.copy())
    ledger_before = [dict(v) for v in session.ledger.allocated]
    statement = Statement(session)
    statement.evict(victim, EvictionKind.PREEMPTED, "for the test")
    statement.allocate(fresh, 0, (0, 1, 2, 3), None)
    assert session.ledger.allocated[session.tree.index["q"]]["gpu"] == 4000
    statement.discard()
    assert snap.state.allocations == before[0]
    assert (snap.state.gpu_free == before[1]).all()
    assert session.ledger.allocated == ledger_before
    assert session.job_of[fresh.pod.key].pending == [fresh]
    snap.state.check_invariants()


def test_what_failed_to_fit_is_tried_again_once_room_is_freed_and_only_then() -> None:
    snap = Snap([make_node("n").gpus(4).build()], queues=[QueueSpec("q")])
    old = snap.running(make_pod("old").gpus(2), node="n", queue="q")
    filler = snap.pending(make_pod("filler").gpus(2), queue="q")
    big = snap.pending(make_pod("big").gpus(2), queue="q").pod
    session = _session(snap)
    placer = Placer(session)

    def fits() -> bool:
        return isinstance(placer.schedule(big), Placement)

    gang = session.statement()
    gang.allocate(filler, 0, (2, 3), None)
    assert not fits()
    gang.discard()  # the filler's GPUs are free again: what failed may fit now
    assert fits()
    gang = session.statement()
    gang.allocate(filler, 0, (2, 3), None)
    assert not fits()
    trial = session.statement()
    trial.evict(old, EvictionKind.PREEMPTED, "")
    assert fits()
    trial.discard()  # a trial of victims undone: exactly the state where big failed
    assert not fits()
    gang.discard()
    taken = session.statement()
    taken.evict(old, EvictionKind.PREEMPTED, "for the test")
    taken.commit()
    assert fits()


def test_a_trial_taken_by_its_statement_is_undone_or_made_with_it() -> None:
    """A trial of victims kept (``Statement.take``): discarding the statement that took it
    puts every pod back; committing it evicts them with the trial's kind and message."""
    snap = Snap([make_node("n").gpus(4).build()], queues=[QueueSpec("q")])
    old = snap.running(make_pod("old").gpus(2), node="n", queue="q")
    other = snap.running(make_pod("other").gpus(2), node="n", queue="q")
    session = _session(snap)
    before = dict(snap.state.allocations)
    for commit in (False, True):
        outer = session.statement()
        trial = session.statement()
        trial.evict(old, EvictionKind.RECLAIMED, "reclaimed for the test")
        trial.evict(other, EvictionKind.RECLAIMED, "reclaimed for the test")
        outer.take(trial)
        trial.discard()  # holds nothing now: the evictions stand
        assert "default/old" not in snap.state.allocations
        if commit:
            outer.commit()
        else:
            outer.discard()
            assert snap.state.allocations == before
    result = session.close()
    assert [(e.pod, e.kind, e.message) for e in result.evictions] == [
        ("default/old", EvictionKind.RECLAIMED, "reclaimed for the test"),
        ("default/other", EvictionKind.RECLAIMED, "reclaimed for the test"),
    ]
    snap.state.check_invariants()


def test_a_first_try_in_free_room_after_releases_finds_what_a_cycle_finds() -> None:
    """Once a shape failed, each release makes ``free_room`` look again, finding what a
    cycle finds: nothing after a release too small, or one on a node the pod may not go
    to; then the node where enough room was freed."""
    nodes = [make_node(f"n{i}").gpus(4).label("zone", "b" if i else "a").build() for i in range(2)]
    snap = Snap(nodes, queues=[QueueSpec("q")])
    halves = [snap.running(make_pod(f"half{i}").gpus(2), node="n0", queue="q") for i in range(2)]
    ones = [snap.running(make_pod(f"one{i}").gpus(1), node="n1", queue="q") for i in range(4)]
    session = _session(snap)
    placer = Placer(session)
    big = make_pod("big").gpus(2).selector("zone", "b").build()

    def found() -> int | None:
        outcome = placer.free_room(big)
        cycle = session.scheduler.placement(session.state, big)
        assert (outcome is None) == (cycle is None)
        return None if outcome is None else outcome.node

    assert found() is None
    taken = session.statement()
    taken.evict(ones[0], EvictionKind.PREEMPTED, "one GPU free on n1")
    assert found() is None
    taken.evict(halves[0], EvictionKind.PREEMPTED, "two GPUs free on n0, of zone a")
    assert found() is None
    taken.evict(ones[1], EvictionKind.PREEMPTED, "two GPUs free on n1")
    assert found() == 1


@pytest.mark.parametrize(
    ("pod", "fits"),
    [
        (make_pod("two").gpus(2), True),
        (make_pod("three").gpus(3), False),  # two idle GPUs left
        (make_pod("share").share(600), True),  # the half-used GPU has 500 left, idle ones 1000
        (make_pod("cpu").cpu(7000), False),  # 8 cores, 2 taken
        (make_pod("memory").memory(30_000), False),  # 32 GiB, 4 taken
        (make_pod("small").cpu(1000).share(250, "V100"), False),  # model
    ],
)
def test_a_trial_fits_a_pod_where_the_filters_pass_it(pod: PodBuilder, fits: bool) -> None:
    snap = Snap([make_node("n").cpu(8000).memory(32_768).gpus(4).build()], [QueueSpec("q")])
    snap.running(make_pod("whole").cpu(1000).memory(2048).gpus(1), node="n", queue="q")
    snap.running(make_pod("half").cpu(1000).memory(2048).share(500), node="n", queue="q")
    session = _session(snap)
    spec = pod.build()
    gpus = Placer(session).fits(spec, 0)
    assert (gpus is not None) == fits
    assert isinstance(session.scheduler.schedule(snap.state, spec), Placement) == fits


def test_close_leaves_the_snapshot_plus_binds_only() -> None:
    snap = Snap([make_node("n").gpus(4).build()], queues=[QueueSpec("q")])
    snap.job("low", "q", priority=0)
    snap.running(make_pod("low").gpus(3), node="n", job="low")
    snap.job("high", "q", priority=5)
    snap.pending(make_pod("high").gpus(2), job="high")
    snap.job("tiny", "q", priority=1)
    snap.pending(make_pod("tiny").gpus(1), job="tiny")
    result = snap.run(actions=("allocate", "preempt"))
    assert [b.pod for b in result.binds] == ["default/tiny"]
    assert [e.pod for e in result.evictions] == ["default/low"]
    assert [n.pod for n in result.nominations] == ["default/high"]
    assert set(snap.state.allocations) == {"default/low", "default/tiny"}


def test_session_configuration_comes_from_the_profile_plugin_args() -> None:
    from kgpu.actions.session_runner import SessionConfig, session_config
    from kgpu.framework.profile import Profile

    profile = Profile(
        name="queues",
        gpuChoice="GpuTightest",
        pluginArgs={
            "session": {"actions": ["allocate", "preempt"], "plugins": ["priority", "gang"]},
            "capacity-card": {"cardUnlimitedCpuMemory": True},
        },
    )
    config = session_config(profile)
    assert config.actions == ("allocate", "preempt")
    assert config.plugins == ("priority", "gang")
    assert config.plugin_args["capacity-card"] == {"cardUnlimitedCpuMemory": True}
    assert SessionConfig().actions == ("enqueue", "allocate", "backfill", "reclaim", "preempt")
    with pytest.raises(ValueError, match="unknown session actions \\['shuffle'\\]"):
        SessionConfig(actions=("allocate", "shuffle"))
