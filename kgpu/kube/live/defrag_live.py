"""Defragmentation in ``kgpu run``: after a session leaves GPU pods waiting while enough GPU
sits idle in holes, the planner's moves (:mod:`kgpu.actions.defrag_planner`) carried out
through the Eviction API.

On only where the profile says ``defragmentation: {enabled: true}``; then the
PodDisruptionBudgets are cached too (``policy/v1`` where the server serves it, else
``policy/v1beta1``, as v1.20). After each session of the leader (:meth:`DefragLive.after`):

1. The budgets are read (:mod:`kgpu.kube.objects.disruption_budgets`); a bad one is
   refused alone, with a Warning event ``InvalidPodDisruptionBudget`` naming the field,
   the value and what was expected, once per version of it, and no pod of its namespace
   is moved while it cannot be read.
2. No round while moves of an earlier one are under way (a moved pod still in the cache,
   for at most ``MOVE_TIMEOUT_S``), nor while the session preempts or its preemptors wait
   for victims: room is already on its way.
3. The waiting pods: those the session left Unschedulable that ask for GPUs and fit
   nowhere now, in the session's order; and the gangs (a PodGroup with ``minMember``
   above 1) whose waiting pods the session left Unschedulable, each planned as one, for
   its ``minMember`` less its running pods (the planner's ``Gang``): room for one member
   is no room for the gang. A gang that requires a topology domain (a level the profile
   declares) is planned in one domain of that level at a time
   (:mod:`kgpu.actions.defrag_domains` says which). A pod or gang its queue's quota holds
   back gets no moves: room would not let it run, and moving other tenants' pods for it
   would only disrupt them. At most ``MAX_WAITING_PER_ROUND`` pods, a gang counting its
   waiting pods, and no gang with more.
4. The rate limit: at most ``maxEvictionsPerMinute`` evictions asked in any 60 seconds;
   a round plans no more moves than are left, and none when none are.
5. The facts (:mod:`kgpu.kube.live.defrag_facts`) and the plan, over the session's state
   (its binds in it) with the session's scheduler; each step is handed to a thread of
   defragmentation's own, which evicts its moves in order (:mod:`kgpu.kube.live.defrag_evictions`).

The waiting pod is not bound by the round: once its movers are gone the cluster has
changed, and the next session places it like any other pod (the moved pods, started
again by their controllers, come after it: the session orders jobs of equal priority by
creation, and they are newer, and of no higher priority). So is a gang, all its pods at
once; a gang's steps are evicted one after another, and one refused (a budget's 429)
leaves the rest unmade, as for any step: a later round plans again.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from kgpu.actions.defrag_domains import gang_domains
from kgpu.actions.defrag_planner import Domain, Gang, Move, plan_moves
from kgpu.framework.defrag_config import Defragmentation
from kgpu.framework.scheduler import Scheduler
from kgpu.framework.status import Code
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import NotFound
from kgpu.kube.api.event_recorder import NORMAL, WARNING, EventRecorder
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.resource_types import (
    POD_DISRUPTION_BUDGETS_V1,
    POD_DISRUPTION_BUDGETS_V1BETA1,
    Resource,
    object_key,
    resource_version,
    uid,
)
from kgpu.kube.live.carry_out import Decided
from kgpu.kube.live.defrag_evictions import EVICTED, GONE, DefragMetrics, MoveEvictor
from kgpu.kube.live.defrag_facts import by_namespace, move_facts
from kgpu.kube.objects.disruption_budgets import LiveBudget, budget_from_k8s
from kgpu.kube.objects.fields import ConversionError
from kgpu.kube.objects.queue_podgroup import pod_group_of
from kgpu.model.ledger import QUOTA_CODES
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.topology_request import TopologyRequestError, gang_request
from kgpu.state.topology_domains import TopologyDomains

log = logging.getLogger(__name__)

# Waiting pods a round plans for: each costs a bounded search (the planner's bounds).
MAX_WAITING_PER_ROUND: Final = 8
# Budgets read per namespace: past this many the rest are refused, and the namespace's
# pods stay (a namespace with thousands of budgets is a mistake or an attack).
MAX_BUDGETS_PER_NAMESPACE: Final = 256
# How long a moved pod may take to leave before rounds go on without waiting for it.
MOVE_TIMEOUT_S: Final = 600.0
WINDOW_S: Final = 60.0
_DIGITS: Final = re.compile(r"\d+")


def budget_resource(client: KubeClient) -> Resource:
    """``policy/v1`` where the server serves PodDisruptionBudgets in it (1.21 on), else
    ``policy/v1beta1`` (v1.20); another error than 404 is raised (the start fails)."""
    try:
        found = client.request("GET", "/apis/policy/v1")
    except NotFound:
        return POD_DISRUPTION_BUDGETS_V1BETA1
    served = {r.get("name") for r in found.get("resources") or [] if isinstance(r, Mapping)}
    if POD_DISRUPTION_BUDGETS_V1.plural in served:
        return POD_DISRUPTION_BUDGETS_V1
    return POD_DISRUPTION_BUDGETS_V1BETA1


@dataclass(slots=True)
class _Moving:
    uid: str
    until: float


class DefragLive:
    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        metrics: DefragMetrics,
        is_leader: Callable[[], bool],
        config: Defragmentation,
        budgets: Informer,
        *,
        levels: tuple[tuple[str, str], ...] = (),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.levels = levels  # the profile's topology levels (name, node label)
        self.budgets = budgets
        self.recorder = recorder
        self.metrics = metrics
        # Steps are evicted on threads of their own, one step after another: a step's
        # moves go in order, and a round's steps are few.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="defrag")
        self.is_leader = is_leader
        self.clock = clock
        self.wall = wall
        self.evictor = MoveEvictor(
            client, recorder, metrics, is_leader, budgets.resource.api_version
        )
        self._lock = threading.Lock()
        self._moving: dict[PodKey, _Moving] = {}
        self._asked: deque[float] = deque()  # when each eviction was handed over
        # Why a waiting pod (or gang, by its job) last got no moves, as logged and as last
        # in an event (figures blanked), kept while it waits; a gang's first waiting pod.
        self._said: dict[str, str] = {}
        self._told: dict[str, str] = {}
        self._first: dict[str, str] = {}
        # uid -> (resourceVersion, the budget or why not): read once per version.
        self._read: dict[str, tuple[str, LiveBudget | ConversionError]] = {}

    def after(self, d: Decided, scheduler: Scheduler) -> None:
        """One round after session ``d``, if one is due (the module's steps)."""
        if not self.is_leader():
            return
        budgets = self._read_budgets()
        now = self.clock()
        if self._held(d.by_key, now):
            self.metrics.rounds.labels("held").inc()
            return
        result = d.result
        if result.evictions or result.nominations or d.leaving:
            return  # preemption is making room already
        skipped: dict[str, str] = {}
        waiting = self._waiting(d, scheduler, skipped)
        if not waiting:
            self._say(skipped, (), d.by_key)
            return
        with self._lock:
            while self._asked and self._asked[0] <= now - WINDOW_S:
                self._asked.popleft()
            left = self.config.max_evictions_per_minute - len(self._asked)
        if left <= 0:
            self.metrics.rounds.labels("limited").inc()
            return
        most = min(left, self.config.max_moves_per_round)
        config = self.config.model_copy(update={"max_moves_per_round": most})
        facts = move_facts(d.snap, d.objects, by_namespace(budgets), self.wall())
        plan = plan_moves(d.snap.state, waiting, facts, scheduler.placement, config)
        # What each waiting pod's reasons go by: its own key, or its gang's.
        item_of = {
            pod.key: w.key for w in waiting for pod in (w.members if isinstance(w, Gang) else (w,))
        }
        planned = [item_of[step.pending.key] for step in plan.steps]
        self._say({**skipped, **plan.unplanned}, planned, d.by_key)
        if not plan.steps:
            self.metrics.rounds.labels("nothing").inc()
            return
        self.metrics.rounds.labels("planned").inc()
        names = [node.name for node in d.snap.state.nodes]
        for step in plan.steps:
            pods = {m.pod.key: d.by_key[m.pod.key] for m in step.moves}
            if step.pending.key in d.by_key:
                pods[step.pending.key] = d.by_key[step.pending.key]
            with self._lock:
                for move in step.moves:
                    until = now + MOVE_TIMEOUT_S
                    self._moving[move.pod.key] = _Moving(uid(pods[move.pod.key]), until)
                    self._asked.append(now)
            carry = partial(self.evictor.carry_out, step, pods, names.__getitem__, self._done)
            self._pool.submit(carry)

    def _say(
        self,
        unplanned: Mapping[str, str],
        planned: Iterable[str],
        by_key: Mapping[str, Mapping[str, Any]],
    ) -> None:
        """Say why each waiting pod or gang got no moves, again only when that changes: in
        the log, and in a Normal event ``NotDefragmenting`` on the pod (a gang's first
        waiting pod), where people read why a pod waits."""
        for key, why in unplanned.items():
            if self._said.get(key) == why:
                continue
            self._said[key] = why
            log.info("defragmentation: no moves for %s: %s", key, why)
            # The event again only when the reason's words change, not its figures (the
            # milli-GPU idle moves with every bind): one per pod and reason, not per session.
            words = _DIGITS.sub("#", why)
            obj = by_key.get(self._first.get(key, key))
            if obj is not None and self._told.get(key) != words:
                self._told[key] = words
                self.recorder.emit(
                    obj, NORMAL, "NotDefragmenting", f"defragmentation made no room: {why}"
                )
        # Moves made room: a later refusal is news. A pod gone: nothing more to say.
        for key in planned:
            self._forget(key)
        for key in [k for k in self._said if self._first.get(k, k) not in by_key]:
            self._forget(key)

    def _forget(self, key: str) -> None:
        self._said.pop(key, None)
        self._told.pop(key, None)
        self._first.pop(key, None)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _done(self, move: Move, result: str) -> None:
        """A move's result (on the pool's thread): one not made is no longer awaited."""
        if result not in (EVICTED, GONE):
            with self._lock:
                self._moving.pop(move.pod.key, None)

    def _held(self, by_key: Mapping[str, Mapping[str, Any]], now: float) -> bool:
        """Whether a pod moved by an earlier round is still there (and not for too long)."""
        with self._lock:
            for key, moving in list(self._moving.items()):
                obj = by_key.get(key)
                if obj is None or uid(obj) != moving.uid or now >= moving.until:
                    del self._moving[key]
            return bool(self._moving)

    def _waiting(
        self, d: Decided, scheduler: Scheduler, skipped: dict[str, str]
    ) -> list[PodSpec | Gang]:
        """The session's waiting pods and gangs a round plans for (step 3), in the
        session's order (a gang where its first waiting pod is). Why a gang gets no moves
        goes to ``skipped``, by its job."""
        unschedulable = {p.pod for p in d.result.pending if p.status.code == Code.UNSCHEDULABLE}
        # Room would not let these run: their queue's quota holds them back (a quota is
        # judged before any node, so a pod refused for room was within its quota).
        held = {p.pod for p in d.result.pending if p.status.reason_code in QUOTA_CODES}
        # First the gangs' waiting pods, by job (no cycle run): a gang is planned where its
        # first waiting pod comes, with all of them.
        order: list[PodSpec | str] = []
        gangs: dict[str, list[PodSpec]] = {}
        for pending in d.batch:
            spec = pending.spec
            if spec.key not in unschedulable:
                continue
            job = str(pod_group_of(spec))
            group = d.objects.jobs.get(pod_group_of(spec))
            if group is None or group.min_member <= 1:
                if spec.gpu.count:
                    order.append(spec)
            elif job in gangs:
                gangs[job].append(spec)
            else:
                gangs[job] = [spec]
                order.append(job)
        state = d.snap.state
        found = _Domains(d, self.levels)
        out: list[PodSpec | Gang] = []
        count = 0
        for item in order:
            if count == MAX_WAITING_PER_ROUND:
                break
            if isinstance(item, PodSpec):
                if item.key in held:
                    continue
                # A whole cycle each: asked only of the pods the round may still take.
                if scheduler.placement(state, item) is not None:
                    continue  # it fits now: what held it back is not room
                out.append(item)
                count += 1
                continue
            members = gangs[item]
            if not any(m.gpu.count for m in members) or any(m.key in held for m in members):
                continue
            self._first[item] = members[0].key
            where: tuple[Domain, ...] | str = (
                found.of(item, members)
                if len(members) <= MAX_WAITING_PER_ROUND
                else f"{len(members)} of its pods wait; defragmentation plans for gangs of at "
                f"most {MAX_WAITING_PER_ROUND} waiting pods"
            )
            if isinstance(where, str):
                skipped[item] = f"gang {item}: {where}"
            elif count + len(members) <= MAX_WAITING_PER_ROUND:
                out.append(Gang(item, tuple(members), where))
                count += len(members)
        return out

    def _read_budgets(self) -> list[tuple[str, LiveBudget | None]]:
        """Every cached budget by key, None for one refused; a Warning for each newly bad."""
        out: list[tuple[str, LiveBudget | None]] = []
        seen: set[str] = set()
        per_namespace: dict[str, int] = {}
        for obj in sorted(self.budgets.items(), key=object_key):
            key, mark, version = object_key(obj), uid(obj), resource_version(obj)
            seen.add(mark)
            cached = self._read.get(mark)
            if cached is None or cached[0] != version:
                try:
                    read: LiveBudget | ConversionError = budget_from_k8s(obj)
                except ConversionError as exc:
                    read = exc
                    self._warn(obj, key, str(exc))
                self._read[mark] = (version, read)
            else:
                read = cached[1]
            namespace = key.split("/", 1)[0]
            per_namespace[namespace] = per_namespace.get(namespace, 0) + 1
            if isinstance(read, ConversionError):
                out.append((key, None))
            elif per_namespace[namespace] > MAX_BUDGETS_PER_NAMESPACE:
                out.append((key, None))  # warned once, when the namespace went past
                if per_namespace[namespace] == MAX_BUDGETS_PER_NAMESPACE + 1:
                    log.warning(
                        "namespace %s holds more than %d PodDisruptionBudgets: "
                        "defragmentation moves none of its pods",
                        namespace,
                        MAX_BUDGETS_PER_NAMESPACE,
                    )
            else:
                out.append((key, read))
        for gone in set(self._read) - seen:
            del self._read[gone]
        return out

    def _warn(self, obj: Mapping[str, Any], key: str, problem: str) -> None:
        namespace = key.split("/", 1)[0]
        message = (
            f"{problem}; defragmentation moves no pod of namespace {namespace} while it "
            "cannot be read"
        )
        log.warning("%s", message)
        self.recorder.emit(obj, WARNING, "InvalidPodDisruptionBudget", message)


class _Domains:
    """The domains a round plans each gang in, where it requires one of a level the
    profile declares; the domains of every level, and the nodes of each job's running
    pods, are worked out for the first such gang (one walk of the bound pods)."""

    def __init__(self, d: Decided, levels: tuple[tuple[str, str], ...]) -> None:
        self.d = d
        self.levels = levels
        self._domains: TopologyDomains | None = None
        self._running: dict[str, list[int]] = {}

    def of(self, job: str, members: list[PodSpec]) -> tuple[Domain, ...] | str:
        """The gang's domains, in order (empty: anywhere), or why it gets no moves."""
        if not self.levels:
            return ()
        try:
            request = gang_request(members, self.levels)
        except TopologyRequestError as exc:
            return str(exc)
        if request is None or request.required is None:
            return ()  # a preferred level only: placement may spread it when no domain holds it
        d = self.d
        if self._domains is None:
            self._domains = TopologyDomains(d.snap.state, self.levels)
            allocations = d.snap.state.allocations
            for pod in d.snap.bound:
                alloc = allocations.get(pod.spec.key)
                of = str(pod_group_of(pod.spec))
                if alloc is not None and of:
                    self._running.setdefault(of, []).append(alloc.node)
        running = self._running.get(job, [])
        need = d.objects.jobs[pod_group_of(members[0])].min_member - len(running)
        return gang_domains(self._domains, request.required, members[: max(need, 0)], running)
