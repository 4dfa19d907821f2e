"""Placing one task: its card alternatives in order, its queue's checks, then a cycle.

Shared by every action. A pod that names cards (``volcano.sh/card.name: A100|H100``) is
tried as each card in the written order: the first card whose quota has room and that has
a node with room wins. What a pod of some shape failed to find is remembered until the
session next releases something (``Session.room_mark``: a trial of victims that is undone
does not count), so the thousands of pods of a saturated cluster that share a shape are
turned down at the cost of a dictionary lookup, not a cycle each.

A pod with DRA claims is checked against its queue twice: as its claims count before a node
is chosen, then on each node as what they would get there (``claim_quota``), which only the
node tells for an ``All`` request or one that pins no single product.
"""

from __future__ import annotations

from dataclasses import replace

from kgpu.actions.claim_quota import claim_checks
from kgpu.framework.interfaces import FilterPlugin
from kgpu.framework.scheduler import Outcome, Placement, Unschedulable
from kgpu.framework.session import Session
from kgpu.framework.session_scratch import StateKey
from kgpu.framework.statement import Statement
from kgpu.framework.status import Status
from kgpu.model.card import REPLICAS_LABEL, card_product, mps_replicas
from kgpu.model.job import JobInfo, Task
from kgpu.model.pod import PodSpec
from kgpu.plugins.node.gpu_fit import GpuFit
from kgpu.plugins.node.resource_fit import NodeResourcesFit
from kgpu.state.topology_domains import pinned

Option = tuple[PodSpec, str | None]


def best_effort(task: Task) -> bool:
    """A pod that asks for nothing (Volcano's BestEffort): backfill places it."""
    pod = task.pod
    return pod.cpu_milli == 0 and pod.memory_mib == 0 and pod.gpu.count == 0


def combine(refusals: list[Status], cards: list[str | None]) -> Status:
    """One status for a pod turned down on every card it may use (the first one's code)."""
    if len(refusals) == 1:
        return refusals[0]
    parts = []
    for status, card in zip(refusals, cards, strict=True):
        text = status.message
        parts.append(text if card is None or card in text else f"{card}: {text}")
    first = refusals[0]
    return Status(first.code, ("; ".join(parts),), first.plugin, first.reason_code)


PLACER: StateKey[Placer] = StateKey("placer")


def placer_of(session: Session) -> Placer:
    """The session's placer, made by the first action that asks: allocate's failures stay
    known to reclaim and preempt (whose first try is the free room) while nothing is
    released, as they stay known from one job to the next within an action."""
    placer = session.scratch.get(PLACER)
    if placer is None:
        placer = Placer(session)
        session.scratch.set(PLACER, placer)
    return placer


class Placer:
    """Places tasks for the actions of one session, remembering what failed to fit."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._failed: dict[object, tuple[int, Unschedulable | None]] = {}
        self._options: dict[str, list[Option]] = {}
        filters = session.scheduler.filters
        self._checks_room = any(isinstance(f, NodeResourcesFit) for f in filters)
        self._checks_gpus = any(isinstance(f, GpuFit) for f in filters)

    def options(self, task: Task) -> list[Option]:
        """The pod as each card it may run on restricts it (itself if it names none)."""
        found = self._options.get(task.pod.key)
        if found is not None:
            return found
        pod = task.pod
        names = task.card_names() if pod.gpu.count else ()
        out: list[Option] = [(pod, None)] if not names else []
        for card in names:
            selector = pod.node_selector
            replicas = mps_replicas(card)
            if replicas:
                selector = tuple(sorted({*selector, (REPLICAS_LABEL, str(replicas))}))
            gpu = replace(pod.gpu, models=(card_product(card),))
            out.append((replace(pod, gpu=gpu, node_selector=selector), card))
        self._options[task.pod.key] = out
        return out

    def _shape(self, pod: PodSpec) -> object:
        # A pod with DRA claims fits where its claims can be allocated: its shape alone
        # does not say what it failed to find, so it is remembered on its own.
        return (pod.shape, pod.key) if self.session.has_claims(pod) else pod.shape

    def checks(self, job: JobInfo, task: Task, card: str | None) -> tuple[FilterPlugin, ...]:
        """The filters ``task``'s cycles add as ``card``: its queue's check of its claims on
        each node, for a pod with DRA claims (``claim_quota``)."""
        return claim_checks(self.session, job, task, card)

    def schedule(self, pod: PodSpec, extra: tuple[FilterPlugin, ...] = ()) -> Outcome:
        """A cycle, unless a pod of this shape already failed and nothing was released since.
        ``extra``: ``checks`` for the pod."""
        session = self.session
        shape = self._shape(pod)
        failed = self._failed.get(shape)
        if failed is not None and failed[0] == session.room_mark and failed[1] is not None:
            return Unschedulable(pod, failed[1].status, failed[1].node_reasons)
        outcome = session.scheduler.schedule(session.state, pod, extra)
        if isinstance(outcome, Unschedulable):
            self._failed[shape] = (session.room_mark, outcome)
        return outcome

    def free_room(self, pod: PodSpec, extra: tuple[FilterPlugin, ...] = ()) -> Placement | None:
        """Where ``pod`` fits without evicting anyone, if anywhere: ``schedule`` for callers
        that do not say why not (what failed is remembered all the same, without a reason,
        which ``schedule`` works out if it is ever asked)."""
        session = self.session
        shape = self._shape(pod)
        failed = self._failed.get(shape)
        if failed is not None and failed[0] == session.room_mark:
            return None
        placement = session.scheduler.placement(session.state, pod, extra)
        if placement is None:
            self._failed[shape] = (session.room_mark, None)
        return placement

    def place(
        self,
        statement: Statement,
        job: JobInfo,
        task: Task,
        pipeline: bool = False,
        within: tuple[tuple[str, str], ...] = (),
    ) -> Status | None:
        """Place ``task`` of ``job`` through ``statement``; the reason it cannot be placed,
        if so. ``within``: node labels the pod must also match (a topology domain)."""
        session = self.session
        refusals: list[Status] = []
        cards: list[str | None] = []
        for pod, card in self.options(task):
            if within:  # topology (kgpu.actions.topology_placement): the NodeSelector holds it
                pod = pinned(pod, within)
            vec = session.vector(task, card)
            verdict = session.check_allocatable(job, task, vec)
            if verdict is None:
                outcome = self.schedule(pod, self.checks(job, task, card))
                if isinstance(outcome, Placement):
                    statement.allocate(task, outcome.node, outcome.gpus, card, pipeline, job)
                    return None
                verdict = outcome.status
            refusals.append(verdict)
            cards.append(card)
        return combine(refusals, cards)

    def fits(
        self, pod: PodSpec, node: int, extra: tuple[FilterPlugin, ...] = ()
    ) -> tuple[int, ...] | None:
        """The GPUs ``pod`` would get on ``node`` if every filter (and ``extra``) passes it
        there, else None."""
        session = self.session
        scheduler, state = session.scheduler, session.state
        if not self._roomy(pod, node) or not scheduler.passes(state, pod, node, extra):
            return None
        return scheduler.gpu_choice.choose_gpus(state, pod, node) if pod.gpu.count else ()

    def _roomy(self, pod: PodSpec, node: int) -> bool:
        """False where a filter of the profile is sure to turn ``pod`` down on ``node``: the
        first tests of NodeResourcesFit and GpuFit (of a plain request), read off the
        state's arrays. Trials of victims ask ``fits`` after every unit they evict, mostly
        before enough is free: this answers those for a few array reads, not a filter pass.
        """
        state = self.session.state
        if self._checks_room:
            cpu, memory, slots = state.room(node)
            if cpu < pod.cpu_milli or memory < pod.memory_mib or slots < 1:
                return False
        gpu = pod.gpu
        if self._checks_gpus and gpu.plain and gpu.count:
            idle, most = state.gpu_summary(node)
            return most >= gpu.milli if gpu.is_shared else idle >= gpu.count
        return True
