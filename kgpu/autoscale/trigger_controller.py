"""The trigger controller: a pure state machine from observations to actions.

Each :meth:`TriggerController.step` looks at the pods kgpu could not place and at the
trigger pods, NodeClaims and Nodes that exist, and answers what to create, delete and
retry. It never talks to anyone, so the live edge and the simulator drive the same code.

A trigger's life::

    created ─▶ Pending ─▶ Launching ─▶ Launched ─▶ Registered ─▶ Initialized ─▶ Bound
               (no claim)  (NodeClaim of its pool)                            (on a node)
                    │                                                              │
                    └──── failed / timed out ──▶ deleted, group backs off          ▼
                                                             node Ready ─▶ deleted, pods retried

A trigger is tied to the first NodeClaim of its pool created after it that no other
trigger holds (Karpenter does not say which pod a claim is for; a trigger that binds to a
claim's node settles it). The trigger succeeds when it is bound to a Ready node: by then
the default scheduler has seen the node's GPUs, so the original pods fit there. It fails
when its NodeClaim reports a launch failure or disappears, when the pod itself fails, or
after ``timeout_s``. A failed group waits ``backoff_initial_s``, doubling up to
``backoff_max_s``, before it is planned again; a success resets it.

New demand is gathered for ``batch_idle_s`` of quiet (at most ``batch_max_s``) before the
triggers are made, as Karpenter batches pods: pods arriving one by one then share nodes
instead of each starting one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kgpu.autoscale.demand import ActiveTrigger, TriggerSpec
from kgpu.autoscale.observed import (
    Actions,
    Observed,
    ObservedNodeClaim,
    ObservedTrigger,
    Phase,
    PodEvent,
    TriggerOutcome,
)
from kgpu.autoscale.planner import PlannerConfig, plan
from kgpu.model.pod import PodKey


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    timeout_s: float = 600.0  # as the trigger's activeDeadlineSeconds
    backoff_initial_s: float = 30.0
    backoff_max_s: float = 600.0
    batch_idle_s: float = 1.0
    batch_max_s: float = 10.0
    # How long a create is taken on trust before the world shows it: an informer a little
    # behind must not make the controller plan the same demand twice.
    settle_s: float = 60.0
    # How long the pods of a Ready node are left to the scheduler before any that it could
    # not place there (another pod took the room) are planned again.
    retry_grace_s: float = 15.0


@dataclass(slots=True)
class _Backoff:
    failures: int
    until: float


class TriggerController:
    """Holds what the world does not show: back-offs, claim ties, recent creates."""

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self._claim_of: dict[str, str] = {}  # trigger: its NodeClaim
        self._ended: set[str] = set()  # triggers whose outcome is recorded
        self._created: dict[str, tuple[TriggerSpec, float]] = {}  # not yet observed
        self._placing: dict[PodKey, float] = {}  # pods of a Ready node: until when
        self._backoff: dict[str, _Backoff] = {}
        self._batch: tuple[frozenset[str], float, float] | None = None  # names, first, last
        self._told: dict[PodKey, str] = {}  # the last event reason given to each pod
        # Pods the last plan fitted into the room of an active trigger (beyond its own):
        # they are retried with its pods when its node is Ready.
        self._adopted: dict[str, list[PodKey]] = {}
        self.successes = 0
        self.failures = 0

    def step(self, seen: Observed) -> Actions:
        acts = Actions()
        now = seen.now
        pending = {p.key for p in seen.pending}
        observed = {t.name for t in seen.triggers}
        self._forget(seen, observed, pending)
        live = [t for t in seen.triggers if not t.deleting and t.name not in self._ended]
        live.sort(key=lambda t: (t.created_at, t.name))
        for trigger in live:
            self._advance(trigger, seen, pending, acts)
        self._plan(seen, live, acts)
        acts.wake_at = self._wake_at(now, live)
        return acts

    def create_failed(self, name: str) -> None:
        """The edge could not create trigger ``name``: plan its demand again next step."""
        self._created.pop(name, None)

    # ------------------------------------------------------------------ triggers

    def _forget(self, seen: Observed, observed: set[str], pending: set[PodKey]) -> None:
        """Drop memory of what has settled: deleted triggers, placed pods, old creates."""
        now = seen.now
        self._ended &= observed
        self._claim_of = {t: c for t, c in self._claim_of.items() if t in observed}
        self._created = {
            n: (s, at)
            for n, (s, at) in self._created.items()
            if n not in observed and now - at < self.config.settle_s
        }
        self._placing = {p: u for p, u in self._placing.items() if p in pending and u > now}
        self._told = {p: r for p, r in self._told.items() if p in pending}

    def _advance(
        self, t: ObservedTrigger, seen: Observed, pending: set[PodKey], acts: Actions
    ) -> None:
        claims = {c.name: c for c in seen.claims}
        claim = self._tie(t, seen.claims)
        node = next((n for n in seen.nodes if n.name == t.node), None) if t.node else None
        if node is not None and node.ready:
            self._end(t, seen.now, acts, node=node.name)
            ready = [p for p in (*t.pods, *self._adopted.get(t.name, ())) if p in pending]
            acts.retry.extend(ready)
            for pod in ready:
                self._placing[pod] = seen.now + self.config.retry_grace_s
            return
        tied = self._claim_of.get(t.name)
        if t.failed:
            reason = t.failed
        elif tied is not None and tied not in claims:
            reason = f"NodeClaim {tied} was deleted before its node was ready"
        elif claim is not None and claim.failure:
            reason = f"NodeClaim {claim.name}: {claim.failure}"
        elif seen.now - t.created_at >= self.config.timeout_s:
            reason = f"no node was ready after {self.config.timeout_s:g}s"
        else:
            acts.phases[t.name] = (
                Phase.BOUND if t.node else claim.phase if claim is not None else Phase.PENDING
            )
            return
        self._end(t, seen.now, acts, reason=reason)

    def _tie(
        self, t: ObservedTrigger, claims: Sequence[ObservedNodeClaim]
    ) -> ObservedNodeClaim | None:
        """The trigger's NodeClaim: the one whose node it is bound to, else the one tied to
        it before, else the oldest claim of its pool made after it that no trigger holds."""
        by_name = {c.name: c for c in claims}
        if t.node:
            for c in claims:
                if c.node == t.node:
                    self._claim_of[t.name] = c.name
                    return c
        tied = self._claim_of.get(t.name)
        if tied is not None:
            return by_name.get(tied)
        held = set(self._claim_of.values())
        for c in sorted(claims, key=lambda c: (c.created_at, c.name)):
            if c.name in held or c.deleting or c.created_at < t.created_at:
                continue
            if not t.pool or c.pool == t.pool:
                self._claim_of[t.name] = c.name
                return c
        return None

    def _end(
        self, t: ObservedTrigger, now: float, acts: Actions, node: str = "", reason: str = ""
    ) -> None:
        self._ended.add(t.name)
        acts.delete.append(t.name)
        acts.outcomes.append(
            TriggerOutcome(t.name, t.group, t.pool, t.pods, now - t.created_at, node, reason)
        )
        if node:
            self.successes += 1
            self._backoff.pop(t.group, None)
            return
        self.failures += 1
        back = self._backoff.get(t.group) or _Backoff(0, now)
        delay = min(
            self.config.backoff_max_s, self.config.backoff_initial_s * 2 ** min(back.failures, 30)
        )
        self._backoff[t.group] = _Backoff(back.failures + 1, now + delay)
        for pod in t.pods:
            message = f"scale-up by trigger pod {t.name} failed: {reason}; retrying in {delay:g}s"
            acts.events.append(PodEvent(pod, "Warning", "FailedScaleUp", message))
            self._told[pod] = "FailedScaleUp"

    # ------------------------------------------------------------------ planning

    def _plan(self, seen: Observed, live: list[ObservedTrigger], acts: Actions) -> None:
        now = seen.now
        ended = set(acts.delete)
        active = [
            ActiveTrigger(t.name, t.group, t.pods, t.gpus, t.cpu_milli, t.memory_mib)
            for t in live
            if t.name not in ended
        ]
        active += [
            ActiveTrigger(s.name, s.group.id, s.pod_keys, s.gpus, s.cpu_milli, s.memory_mib)
            for s, _ in self._created.values()
        ]
        candidates = [p for p in seen.pending if p.key not in self._placing]
        acts.waiting.extend(p.key for p in seen.pending if p.key in self._placing)
        result = plan(candidates, self.config.planner, active)
        own = {t.name: set(t.pods) for t in active}
        self._adopted = {}
        for pod, name in result.covered.items():
            if pod not in own.get(name, ()):
                self._adopted.setdefault(name, []).append(pod)
        acts.unplannable = result.unplannable
        for u in result.unplannable:
            self._tell(
                acts,
                PodEvent(
                    u.pod, "Normal", "NotTriggerScaleUp", f"pod didn't trigger scale-up: {u.reason}"
                ),
            )
        ready: list[TriggerSpec] = []
        for spec in result.triggers:
            back = self._backoff.get(spec.group.id)
            if back is not None and back.until > now:
                acts.waiting.extend(spec.pod_keys)
                continue
            if back is not None:
                # A retry gets a name of its own: the failed trigger may still be going away.
                spec = replace(spec, name=f"{spec.name}-r{back.failures}")
            ready.append(spec)
        if not self._batch_closed(now, ready):
            acts.waiting.extend(k for s in ready for k in s.pod_keys)
            return
        for spec in ready:
            acts.create.append(spec)
            acts.phases[spec.name] = Phase.PENDING
            self._created[spec.name] = (spec, now)
            where = f" in NodePool {spec.group.target.pool}" if spec.group.target.pool else ""
            model = spec.group.target.model or "|".join(spec.group.target.models) or "any model"
            for pod in spec.pod_keys:
                message = (
                    f"kgpu requested a scale-up: trigger pod {spec.name} asks for "
                    f"{spec.gpus} nvidia.com/gpu of {model}{where} for {len(spec.pods)} pod(s)"
                )
                self._tell(acts, PodEvent(pod, "Normal", "TriggeredScaleUp", message), force=True)

    def _batch_closed(self, now: float, ready: list[TriggerSpec]) -> bool:
        """Whether new demand has been quiet for ``batch_idle_s`` (or gathering for
        ``batch_max_s``); a change in the demand restarts the quiet time."""
        if not ready:
            self._batch = None
            return False
        names = frozenset(s.name for s in ready)
        if self._batch is None:
            self._batch = (names, now, now)
        elif self._batch[0] != names:
            self._batch = (names, self._batch[1], now)
        _, first, last = self._batch
        closed = now - last >= self.config.batch_idle_s or now - first >= self.config.batch_max_s
        if closed:
            self._batch = None
        return closed

    def _tell(self, acts: Actions, event: PodEvent, force: bool = False) -> None:
        """Record an event once per reason and pod, not at every step (``force``: always)."""
        if force or self._told.get(event.pod) != event.reason:
            acts.events.append(event)
            self._told[event.pod] = event.reason

    def _wake_at(self, now: float, live: list[ObservedTrigger]) -> float | None:
        times = [b.until for b in self._backoff.values() if b.until > now]
        times += [until for until in self._placing.values() if until > now]
        times += [t.created_at + self.config.timeout_s for t in live if t.name not in self._ended]
        if self._batch is not None:
            _, first, last = self._batch
            times.append(min(last + self.config.batch_idle_s, first + self.config.batch_max_s))
        return min(times) if times else None
