"""The per-shape cache with DRA: pods without claims keep being served from it, pods with
claims get DraClaims' verdicts afresh every cycle, and the decisions are those of a
scheduler that keeps nothing, session after session."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from kgpu.actions.dra_scheduler import dra_scheduler
from kgpu.actions.session_runner import run_session, session_config
from kgpu.config import load_profile
from kgpu.dra.inventory import DraInventory
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import FilterPlugin, IntArray, Verdicts
from kgpu.framework.scheduler import Placement, Scheduler
from kgpu.framework.session_snapshot import Snapshot
from kgpu.model.dra import PodClaim
from kgpu.model.job import JobKey, Task
from kgpu.model.pod import PodSpec
from kgpu.model.queue import QueueSpec
from kgpu.plugins.registry import PluginContext
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod
from tests.dra_fixtures import A100, H100, claim, exactly, gpu, inventory, slice_, template

NS = "default"


class _Plain:
    """A filter asked as every filter was before: in the cycle's one pass, kept nowhere
    (no ``judges_alone``): the reference the cached scheduler must agree with."""

    def __init__(self, inner: FilterPlugin) -> None:
        self.inner = inner
        self.name = inner.name

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        return self.inner.filter(cycle, pod, nodes)


def _keeping_nothing(scheduler: Scheduler) -> Scheduler:
    filters = [_Plain(f) if f.name == "DraClaims" else f for f in scheduler.filters]
    ref = Scheduler(
        scheduler.pre_filters, filters, scheduler.scores, scheduler.gpu_choice, use_cache=False
    )
    ref.set_tie_rank(scheduler.tie_rank)
    return ref


def _world() -> tuple[ClusterState, DraInventory]:
    nodes = [
        make_node(f"n{i}").cpu(16_000).memory(64 * 1024).label("pool", "gpu").build()
        for i in range(8)
    ]
    # Two GPUs a node: H100 on odd nodes, A100 on even ones; one shared claim for a team.
    slices = [
        slice_(f"n{i}", *[gpu(j, product=H100 if i % 2 else A100) for j in range(2)])
        for i in range(8)
    ]
    shared = claim("team-gpu", [{"name": "g", "exactly": exactly()}], namespace=NS)
    h100 = f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"
    templates = [
        template("one", [{"name": "g", "exactly": exactly()}], namespace=NS),
        template(
            "two-h100",
            [{"name": "g", "exactly": exactly("gpu.nvidia.com", h100, count=2)}],
            namespace=NS,
        ),
        template("all", [{"name": "g", "exactly": exactly(allocationMode="All")}], namespace=NS),
        template("three", [{"name": "g", "exactly": exactly(count=3)}], namespace=NS),
    ]
    return ClusterState(nodes), inventory(slices, [shared], templates=templates)


def _pods(round_: int, inv: DraInventory) -> list[PodSpec]:
    """Each round: pods without claims of a few shapes (the cache's business), and pods
    with claims of the same sizes, some sharing one claim; those of ``team`` are held by its
    GPU limit, those of ``free`` by the devices alone."""
    out = []
    for i in range(12):
        cpu = (1 + i % 3) * 500
        pod = make_pod(f"r{round_}-plain-{i}", NS).cpu(cpu).memory(1024).build()
        out.append(replace(pod, queue="team"))
    kinds = ["one", "two-h100", "all", "shared", "one", "one", "two-h100"]
    for i, kind in enumerate(kinds):
        pod = make_pod(f"r{round_}-dra-{i}", NS).cpu(500 * (1 + i % 3)).memory(1024).build()
        ref = (
            PodClaim("gpu", claim_name="team-gpu")
            if kind == "shared"
            else PodClaim("gpu", template_name=kind)
        )
        inv.set_pod_claims(pod.key, [ref])
        out.append(replace(pod, queue="team" if i % 2 else "free"))
    return out


def _rounds(cached: bool) -> tuple[list[Any], Scheduler]:
    state, inv = _world()
    profile = load_profile("kgpu")
    scheduler = dra_scheduler(profile, PluginContext(dra=inv))
    if not cached:
        scheduler = _keeping_nothing(scheduler)
    queues = [
        QueueSpec("team", deserved={"gpu": 4000}, limit={"gpu": 6000}),
        QueueSpec("free", deserved={"gpu": 12_000}),
    ]
    running: list[Task] = []
    waiting: list[Task] = []
    seen: list[Any] = []
    for round_ in range(4):
        waiting += [Task(p, JobKey("")) for p in _pods(round_, inv)]
        snap = Snapshot(state, queues, (), [*running, *waiting], now=float(round_), dra=inv)
        result = run_session(snap, scheduler, session_config(profile))
        bound = {b.pod for b in result.binds}
        seen.append(
            (
                [(b.pod, b.node, b.gpus) for b in result.binds],
                sorted((p.pod, p.message) for p in result.pending),
                sorted((k, str(v)) for k, v in result.claims.items()),
                (result.allocated.get("team"), result.allocated.get("free")),
            )
        )
        running += [t for t in waiting if t.pod.key in bound]
        waiting = [t for t in waiting if t.pod.key not in bound]
        # Every third running pod finishes: its node room and its claims' devices come back.
        for task in running[::3]:
            state.release(task.pod.key)
            inv.release(task.pod.key)
        running = [t for i, t in enumerate(running) if i % 3]
    return seen, scheduler


def test_cached_scheduler_decides_as_one_that_keeps_nothing_over_several_sessions() -> None:
    cached, scheduler = _rounds(cached=True)
    reference, _ = _rounds(cached=False)
    assert cached == reference
    # The workload placed pods with and without claims, and left some waiting on devices.
    binds = [b for session in cached for b in session[0]]
    assert any("-dra-" in pod for pod, _, _ in binds)
    assert any("-plain-" in pod for pod, _, _ in binds)
    waiting = [m for session in cached for _, m in session[1]]
    assert any("allocated to another claim" in m for m in waiting)
    # Pods without claims were served from the shape cache.
    assert scheduler.cache.entries


def test_a_pod_with_claims_takes_the_shapes_verdicts_and_its_own_claims() -> None:
    state, inv = _world()
    scheduler = dra_scheduler(load_profile("kgpu"), PluginContext(dra=inv))
    plain = make_pod("plain", NS).cpu(500).memory(1024).build()
    first = scheduler.schedule(state, plain)
    assert isinstance(first, Placement)
    assert len(scheduler.cache.entries) == 1
    # Same shape, with a claim no node can serve (more H100s than a node has): the kept
    # entry stands (no new one), and the pod is refused by its claims on every node.
    big = make_pod("big", NS).cpu(500).memory(1024).build()
    inv.set_pod_claims(big.key, [PodClaim("gpu", template_name="three")])
    outcome = scheduler.schedule(state, big)
    assert not isinstance(outcome, Placement)
    assert outcome.message.startswith("0/8 nodes are available: 8 node(s) cannot allocate")
    assert len(scheduler.cache.entries) == 1
    # The pod without claims is served as before, from the same entry.
    again = scheduler.schedule(state, plain)
    assert isinstance(again, Placement) and again.node == first.node
    assert np.array_equal(scheduler.cache.entries[plain.shape].feasible, np.ones(8, dtype=bool))
