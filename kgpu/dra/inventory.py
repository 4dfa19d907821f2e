"""The cluster's DRA objects and which devices are taken: what the allocator works over.

Invariants:

- only the newest generation of each pool is used; a pool whose newest slices name a device
  twice is left out whole (its devices cannot be told apart), with a note;
- a device is in ``in_use`` exactly when an allocated claim holds it: allocations read from
  claims count from the start, :meth:`DraInventory.record` adds, :meth:`release` removes;
- a claim made from a template for a pod is named ``<pod>-<entry>`` here (the resource claim
  controller adds a random suffix live; nothing here depends on the name).

The slices that reach a node are found through an index by node name (made again whenever
``pools`` is replaced): a cluster publishes one slice or more per node, and a pod's claims
are tried on every node, so a scan of every slice for each node would cost the square of
the nodes for each pod with claims. For the same reason each selector's verdict on each
device is kept with that index: CEL's view of a device costs far more to build than the
program costs to run, and neither changes while the pools stay the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kgpu.dra.allocator import (
    Allocated,
    Candidate,
    ClaimToAllocate,
    InUse,
    Refused,
    Verdicts,
    allocate,
)
from kgpu.model.dra import (
    MAX_RESERVED_FOR,
    ClaimAllocation,
    DeviceClass,
    DeviceId,
    PodClaim,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    device_id,
)


@dataclass(frozen=True, slots=True)
class _Pool:
    driver: str
    name: str
    slices: tuple[ResourceSlice, ...]
    complete: bool


def _pools(slices: Iterable[ResourceSlice], notes: list[str]) -> list[_Pool]:
    newest: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        key = (s.driver, s.pool)
        have = newest.get(key)
        if have is None or s.generation > have[0].generation:
            newest[key] = [s]
        elif s.generation == have[0].generation:
            have.append(s)
    pools = []
    for (driver, pool), members in sorted(newest.items()):
        names = [d.name for s in members for d in s.devices]
        if len(names) != len(set(names)):
            twice = sorted({n for n in names if names.count(n) > 1})[0]
            notes.append(
                f"ResourceSlice pool {driver}/{pool} left out: device {twice!r} is published twice"
            )
            continue
        members.sort(key=lambda s: s.name)
        pools.append(_Pool(driver, pool, tuple(members), len(members) >= members[0].slice_count))
    return pools


_Placed = tuple[int, _Pool, ResourceSlice]  # a slice, with its place in pool order


@dataclass(frozen=True, slots=True)
class _Reach:
    """The slices of ``pools`` by the node they name, and those that name none (``allNodes``,
    a node selector), each with its place in pool order; and the selectors' verdicts on
    their devices, which hold as long as these pools do."""

    pools: list[_Pool]
    own: dict[str, list[_Placed]]
    others: list[_Placed]
    verdicts: Verdicts = field(default_factory=dict)

    @staticmethod
    def of(pools: list[_Pool]) -> _Reach:
        own: dict[str, list[_Placed]] = {}
        others: list[_Placed] = []
        place = 0
        for pool in pools:
            for s in pool.slices:
                entry = (place, pool, s)
                place += 1
                if s.node_name:
                    own.setdefault(s.node_name, []).append(entry)
                else:
                    others.append(entry)
        return _Reach(pools, own, others)


@dataclass(slots=True)
class DraInventory:
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)  # namespace/name
    templates: dict[str, ResourceClaimTemplate] = field(default_factory=dict)
    pools: list[_Pool] = field(default_factory=list)
    in_use: InUse = field(default_factory=InUse)
    shared: set[DeviceId] = field(default_factory=set)  # devices allowing multiple allocations
    notes: list[str] = field(default_factory=list)
    pod_claims: dict[str, tuple[PodClaim, ...]] = field(default_factory=dict)  # pod key
    # Pods whose claims cannot be named yet or at all (a template's claim not made yet, a
    # claim that cannot be read), with why: they fit no node until that changes.
    unresolved: dict[str, str] = field(default_factory=dict)  # pod key
    _reach: _Reach | None = field(default=None, init=False, repr=False, compare=False)

    @staticmethod
    def build(
        classes: Iterable[DeviceClass],
        slices: Iterable[ResourceSlice],
        claims: Iterable[ResourceClaim],
        templates: Iterable[ResourceClaimTemplate],
    ) -> DraInventory:
        inv = DraInventory(
            classes={c.name: c for c in classes},
            claims={c.key: c for c in claims},
            templates={t.key: t for t in templates},
        )
        inv.pools = _pools(slices, inv.notes)
        for pool in inv.pools:
            for s in pool.slices:
                inv.shared.update(
                    device_id(s.driver, s.pool, d.name) for d in s.devices if d.allow_multiple
                )
        for claim in inv.claims.values():
            if claim.allocation is not None:
                inv.in_use.take(claim.key, claim.allocation.results, inv.shared)
        return inv

    def add_slices(self, slices: Iterable[ResourceSlice]) -> None:
        """Slices published since the build (a node that joined): pools are made again
        over all slices; what claims hold stays taken."""
        every = [s for pool in self.pools for s in pool.slices]
        self.pools = _pools([*every, *slices], self.notes)
        self.shared = {
            device_id(s.driver, s.pool, d.name)
            for pool in self.pools
            for s in pool.slices
            for d in s.devices
            if d.allow_multiple
        }

    @property
    def empty(self) -> bool:
        return not (self.pools or self.claims or self.pod_claims or self.unresolved)

    def asks(self, pod_key: str) -> bool:
        """Whether the pod has claims to allocate (or that cannot be resolved)."""
        return pod_key in self.pod_claims or pod_key in self.unresolved

    def _reach_now(self) -> _Reach:
        reach = self._reach
        if reach is None or reach.pools is not self.pools:
            reach = self._reach = _Reach.of(self.pools)
        return reach

    def candidates(self, node: str, labels: Mapping[str, str]) -> list[Candidate]:
        """The devices reachable from ``node``, pool by pool, in name order."""
        reach = self._reach_now()
        found = reach.own.get(node, [])
        if reach.others:
            label_map = dict(labels)
            more = [e for e in reach.others if e[2].reaches(node, label_map)]
            if more:
                found = sorted([*found, *more], key=lambda e: e[0])
        return [
            Candidate(s.driver, s.pool, d, not s.all_nodes, pool.complete)
            for _, pool, s in found
            for d in s.devices
        ]

    def claim_key(self, namespace: str, pod: str, ref: PodClaim) -> str:
        name = ref.claim_name or f"{pod}-{ref.name}"
        return f"{namespace}/{name}"

    def resolve(self, pod_key: str) -> list[ResourceClaim] | str:
        """The pod's claims (one made from its template, not yet recorded, when there is
        none), or why one cannot be found."""
        why = self.unresolved.get(pod_key)
        if why is not None:
            return why
        namespace, _, pod = pod_key.partition("/")
        out = []
        for ref in self.pod_claims.get(pod_key, ()):
            key = self.claim_key(namespace, pod, ref)
            claim = self.claims.get(key)
            if claim is None and ref.template_name:
                template = self.templates.get(f"{namespace}/{ref.template_name}")
                if template is None:
                    return (
                        f"resource claim template {namespace}/{ref.template_name} "
                        f'(pod claim "{ref.name}") does not exist'
                    )
                claim = ResourceClaim(namespace, key.partition("/")[2], template.spec)
            if claim is None:
                return f'resource claim {key} (pod claim "{ref.name}") does not exist'
            out.append(claim)
        return out

    def try_allocate(
        self, pod_key: str, node: str, labels: Mapping[str, str]
    ) -> Allocated | Refused:
        """What the pod's claims would get on ``node`` (claims allocated before included),
        recording nothing."""
        claims = self.resolve(pod_key)
        if isinstance(claims, str):
            return Refused(claims)
        done: dict[str, ClaimAllocation] = {}
        todo: list[ClaimToAllocate] = []
        for claim in claims:
            if claim.allocation is None:
                todo.append(ClaimToAllocate(claim.key, claim.spec))
                continue
            if claim.allocation.node_name not in ("", node):
                return Refused(
                    f"claim {claim.key} is allocated on node {claim.allocation.node_name}"
                )
            if pod_key.partition("/")[2] not in claim.reserved_for and (
                len(claim.reserved_for) >= MAX_RESERVED_FOR
            ):
                return Refused(f"claim {claim.key} is reserved for {MAX_RESERVED_FOR} pods already")
            done[claim.key] = claim.allocation
        if not todo:
            return Allocated(done)
        outcome = allocate(
            todo,
            self.candidates(node, labels),
            self.classes,
            self.in_use,
            node,
            self._reach_now().verdicts,
        )
        if isinstance(outcome, Refused):
            return outcome
        return Allocated({**done, **outcome.allocations})

    def record(self, pod_key: str, node: str, labels: Mapping[str, str]) -> Allocated | Refused:
        """Allocate the pod's claims on ``node`` and reserve them for it, as kube-scheduler
        writes ``status.allocation`` and ``status.reservedFor`` before binding."""
        outcome = self.try_allocate(pod_key, node, labels)
        if isinstance(outcome, Refused):
            return outcome
        namespace, _, pod = pod_key.partition("/")
        for key, allocation in outcome.allocations.items():
            claim = self.claims.get(key)
            if claim is None:  # made from its template now
                ref = next(
                    r for r in self.pod_claims[pod_key] if self.claim_key(namespace, pod, r) == key
                )
                template = self.templates[f"{namespace}/{ref.template_name}"]
                claim = ResourceClaim(namespace, key.partition("/")[2], template.spec)
            if claim.allocation is None:
                self.in_use.take(key, allocation.results, self.shared)
            reserved = (
                claim.reserved_for if pod in claim.reserved_for else (*claim.reserved_for, pod)
            )
            self.claims[key] = replace(claim, allocation=allocation, reserved_for=reserved)
        return outcome

    def release(self, pod_key: str) -> list[str]:
        """The pod is gone: unreserve its claims; those no pod holds any more give their
        devices back (the claim keys released)."""
        namespace, _, pod = pod_key.partition("/")
        released = []
        for ref in self.pod_claims.get(pod_key, ()):
            key = self.claim_key(namespace, pod, ref)
            claim = self.claims.get(key)
            if claim is None or pod not in claim.reserved_for:
                continue
            reserved = tuple(p for p in claim.reserved_for if p != pod)
            if not reserved and claim.allocation is not None:
                self.in_use.give_back(claim.allocation.results, self.shared)
                self.claims[key] = replace(claim, allocation=None, reserved_for=())
                released.append(key)
            else:
                self.claims[key] = replace(claim, reserved_for=reserved)
        return released

    def claim_keys(self, pod_key: str) -> list[str]:
        namespace, _, pod = pod_key.partition("/")
        return [self.claim_key(namespace, pod, ref) for ref in self.pod_claims.get(pod_key, ())]

    def saved(self, pod_key: str) -> dict[str, ResourceClaim | None]:
        """The pod's claims as they are now, for :meth:`restore` to put back."""
        return {key: self.claims.get(key) for key in self.claim_keys(pod_key)}

    def restore(self, saved: Mapping[str, ResourceClaim | None]) -> None:
        """Put claims back as :meth:`saved` found them, devices taken or given back to
        match: what a session does when it undoes a tentative placement or eviction."""
        for key, before in saved.items():
            now = self.claims.get(key)
            had = before.allocation if before is not None else None
            has = now.allocation if now is not None else None
            if has is not had:
                if has is not None:
                    self.in_use.give_back(has.results, self.shared)
                if had is not None:
                    self.in_use.take(key, had.results, self.shared)
            if before is None:
                self.claims.pop(key, None)
            else:
                self.claims[key] = before

    def set_pod_claims(self, pod_key: str, refs: Sequence[PodClaim]) -> None:
        if refs:
            self.pod_claims[pod_key] = tuple(refs)
