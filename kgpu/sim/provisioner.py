"""A provisioner model for the simulator: Karpenter, as trigger pods see it.

It does what kgpu relies on Karpenter to do, with the timing of a real launch:

- pending trigger pods older than ``reaction_s`` (Karpenter's batching window) are first
  nominated onto NodeClaims still launching that have room for them, as Karpenter counts
  in-flight capacity; the others get new NodeClaims, each of the smallest instance type the
  trigger allows that holds it (Karpenter picks the cheapest; for GPU instances of one
  family the smallest is the cheapest), within the pool's GPU limit;
- a NodeClaim passes Launched, Registered, Initialized and Ready at the offsets of
  :class:`LaunchTimes` from its creation; at Ready its node joins the cluster and the
  triggers nominated to it are bound there (the default scheduler's part);
- the first ``fail_first`` launches fail as an instance shortage does (Launched=False),
  and the NodeClaim is removed a few seconds later, as Karpenter removes it.

It never sees the original pods: only the trigger pods, exactly as Karpenter would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kgpu.autoscale.demand import TriggerSpec
from kgpu.autoscale.observed import NODECLAIM_STAGES, ObservedNodeClaim
from kgpu.model.node import NodeInfo
from kgpu.model.nodepool import InstanceType, NodePool
from kgpu.model.taints import untolerated

FAILURE: Final = "InsufficientCapacityError: no capacity for the instance type in any zone"
_FAILED_CLAIM_LINGERS_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class LaunchTimes:
    """Seconds from a NodeClaim's creation to each of its conditions.

    The defaults are a GPU instance on a GPU-ready image: the instance runs within seconds,
    the kubelet joins in about a minute, the device plugin advertises the GPUs a little
    later, and Ready follows.
    """

    launched: float = 10.0
    registered: float = 60.0
    initialized: float = 100.0
    ready: float = 105.0

    @classmethod
    def until_ready(cls, seconds: float) -> LaunchTimes:
        """The default stages stretched or shrunk so that Ready comes after ``seconds``."""
        base = cls()
        k = seconds / base.ready
        return cls(base.launched * k, base.registered * k, base.initialized * k, seconds)

    def offsets(self) -> tuple[float, float, float, float]:
        return (self.launched, self.registered, self.initialized, self.ready)


@dataclass(slots=True)
class SimTrigger:
    """A trigger pod in the simulated API: created at ``created_at``, nominated to
    ``claim`` by the provisioner, bound to ``node`` once that node is Ready."""

    spec: TriggerSpec
    created_at: float
    claim: str = ""
    node: str = ""


@dataclass(slots=True)
class SimClaim:
    name: str
    pool: NodePool
    itype: InstanceType
    created_at: float
    node: str
    triggers: list[str] = field(default_factory=list)
    room: list[int] = field(default_factory=list)  # GPUs, CPU, memory, pods left
    failed: bool = False
    joined: bool = False


class Provisioner:
    """Karpenter over a set of NodePools; :meth:`step` advances it to a time."""

    def __init__(
        self,
        pools: tuple[NodePool, ...],
        launch: LaunchTimes | None = None,
        reaction_s: float = 1.0,
        fail_first: int = 0,
    ) -> None:
        self.pools = pools
        self.launch = launch or LaunchTimes()
        self.reaction_s = reaction_s
        self.fail_first = fail_first
        self.claims: dict[str, SimClaim] = {}
        self.launched = 0  # NodeClaims made, failed ones included

    def step(self, now: float, triggers: Mapping[str, SimTrigger]) -> list[NodeInfo]:
        """Advance to ``now``: nodes whose NodeClaim became Ready join (returned), their
        triggers bind, failed claims go, and pending triggers get claims."""
        joined: list[NodeInfo] = []
        for claim in list(self.claims.values()):
            if claim.failed:
                if now >= claim.created_at + self.launch.launched + _FAILED_CLAIM_LINGERS_S:
                    del self.claims[claim.name]
                continue
            if not claim.joined and now >= claim.created_at + self.launch.ready:
                claim.joined = True
                joined.append(claim.pool.node(claim.node, claim.itype))
                for name in claim.triggers:
                    if name in triggers:
                        triggers[name].node = claim.node
        for name in sorted(triggers, key=lambda n: (-triggers[n].spec.gpus, n)):
            trigger = triggers[name]
            if trigger.node or (trigger.claim and trigger.claim in self.claims):
                continue
            if now >= trigger.created_at + self.reaction_s:
                self._nominate(now, name, trigger)
        return joined

    def next_event(self, now: float, triggers: Mapping[str, SimTrigger]) -> float | None:
        """When :meth:`step` next has something to do, if ever."""
        times = []
        for claim in self.claims.values():
            offsets: tuple[float, ...] = (
                self.launch.launched,
                self.launch.launched + _FAILED_CLAIM_LINGERS_S,
            )
            if not claim.failed:
                offsets = self.launch.offsets()
            times += [claim.created_at + o for o in offsets if claim.created_at + o > now]
        for t in triggers.values():
            if not t.node and not (t.claim and t.claim in self.claims):
                times.append(max(t.created_at + self.reaction_s, now))
        later = [t for t in times if t > now]
        return min(later) if later else None

    def observed(self, now: float) -> list[ObservedNodeClaim]:
        """The NodeClaims as the API would show them at ``now``."""
        out = []
        for claim in self.claims.values():
            age = now - claim.created_at
            conditions = {
                stage: "True" if age >= offset else "Unknown"
                for stage, offset in zip(NODECLAIM_STAGES, self.launch.offsets(), strict=True)
            }
            failure = ""
            if claim.failed and age >= self.launch.launched:
                conditions["Launched"] = "False"
                failure = FAILURE
            registered = conditions["Registered"] == "True" and not claim.failed
            out.append(
                ObservedNodeClaim(
                    claim.name,
                    claim.pool.name,
                    claim.created_at,
                    conditions,
                    node=claim.node if registered else "",
                    failure=failure,
                )
            )
        return out

    # ------------------------------------------------------------------ launching

    def _nominate(self, now: float, name: str, trigger: SimTrigger) -> None:
        spec = trigger.spec
        need = (spec.gpus, spec.cpu_milli, spec.memory_mib, 1)
        for claim in self.claims.values():
            if claim.failed or claim.joined or not self._allows(spec, claim.pool):
                continue
            if claim.itype in self._types(spec, claim.pool) and _fits(need, claim.room):
                self._take(claim, name, trigger, need)
                return
        for pool in sorted(self.pools, key=lambda p: -p.weight):
            if not self._allows(spec, pool):
                continue
            fitting = [t for t in self._types(spec, pool) if _fits(need, _capacity(t))]
            fitting.sort(key=lambda t: (t.gpu_count, t.cpu_milli, t.memory_mib, t.name))
            used = sum(c.itype.gpu_count for c in self.claims.values() if c.pool is pool)
            for itype in fitting:
                if pool.gpu_limit is None or used + itype.gpu_count <= pool.gpu_limit:
                    self._take(self._new_claim(now, pool, itype), name, trigger, need)
                    return

    def _new_claim(self, now: float, pool: NodePool, itype: InstanceType) -> SimClaim:
        self.launched += 1
        n = self.launched
        claim = SimClaim(
            name=f"{pool.name}-nc{n}",
            pool=pool,
            itype=itype,
            created_at=now,
            node=f"{pool.name}-node{n}",
            room=list(_capacity(itype)),
            failed=n <= self.fail_first,
        )
        self.claims[claim.name] = claim
        return claim

    def _take(self, claim: SimClaim, name: str, trigger: SimTrigger, need: tuple[int, ...]) -> None:
        claim.triggers.append(name)
        claim.room = [r - n for r, n in zip(claim.room, need, strict=True)]
        trigger.claim = claim.name

    @staticmethod
    def _allows(spec: TriggerSpec, pool: NodePool) -> bool:
        target = spec.group.target
        if target.pool:
            return target.pool == pool.name
        return untolerated(pool.taints, spec.group.tolerations) is None

    @staticmethod
    def _types(spec: TriggerSpec, pool: NodePool) -> list[InstanceType]:
        target = spec.group.target
        if target.pool:
            return [t for t in pool.instance_types if t.name in target.instance_types]
        models = target.models or ("",)
        return [t for m in models for t in pool.offering(m)]


def _capacity(t: InstanceType) -> tuple[int, int, int, int]:
    return (t.gpu_count, t.cpu_milli, t.memory_mib, t.max_pods)


def _fits(need: tuple[int, ...], room: tuple[int, ...] | list[int]) -> bool:
    return all(n <= r for n, r in zip(need, room, strict=True))
