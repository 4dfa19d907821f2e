"""Allocate one pod's ResourceClaims on one node: which devices, or why none.

As kube-scheduler's structured allocator does, for the claims of one pod together:

1. The candidates are the devices of the slices that reach the node (its own, ``allNodes``
   and those whose ``nodeSelector`` matches), of each pool's newest generation only.
2. A device fits a request when every selector of the request's DeviceClass and of the
   request itself is true on it (:mod:`kgpu.dra.cel_selectors`), it is not allocated to
   another claim (or, when it allows multiple allocations, what it has left holds the
   request's ``capacity.requests``), and it has at least the capacity the request asks.
3. ``ExactCount`` takes ``count`` devices, ``All`` every fitting device of the node (and
   fails when one of them is taken or a pool is incomplete); a ``firstAvailable`` request
   takes its first alternative that works, in order.
4. ``matchAttribute`` constraints hold across the devices of the requests they name.

The search is a depth-first one over requests, then devices in candidate order
(combinations, never permutations), so the answer is deterministic; it gives up after
``MAX_STEPS`` devices tried, saying so. Every failure says which claim, request, selector
or constraint stopped it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from kgpu.dra.cel_selectors import (
    Outcome,
    SelectorError,
    compile_selector,
    device_variables,
    evaluate,
)
from kgpu.model.dra import (
    AllocationMode,
    AttributeValue,
    ClaimAllocation,
    ClaimSpec,
    Constraint,
    Device,
    DeviceClass,
    DeviceId,
    DeviceResult,
    ExactRequest,
    device_id,
)

MAX_STEPS: Final = 100_000
# Selector verdicts kept per inventory: selectors x devices, a few per device in practice.
MAX_VERDICTS: Final = 1 << 20
_TAKEN: Final = "allocated to another claim"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A device reachable from the node, with where it comes from."""

    driver: str
    pool: str
    device: Device
    node_local: bool  # from a slice of this node or a node selector, not allNodes
    pool_complete: bool = True

    @property
    def id(self) -> DeviceId:
        return device_id(self.driver, self.pool, self.device.name)


@dataclass(slots=True)
class InUse:
    """Devices taken cluster-wide: exclusively by a claim, or in part (consumable
    capacity) by several."""

    exclusive: dict[DeviceId, str] = field(default_factory=dict)  # device -> claim key
    consumed: dict[DeviceId, dict[str, Fraction]] = field(default_factory=dict)

    def take(self, claim: str, results: Sequence[DeviceResult], shared: set[DeviceId]) -> None:
        for r in results:
            if r.id in shared:
                used = self.consumed.setdefault(r.id, {})
                for name, amount in r.consumed.items():
                    used[name] = used.get(name, Fraction(0)) + amount
            else:
                self.exclusive[r.id] = claim

    def give_back(self, results: Sequence[DeviceResult], shared: set[DeviceId]) -> None:
        for r in results:
            if r.id in shared:
                used = self.consumed.get(r.id, {})
                for name, amount in r.consumed.items():
                    used[name] = used.get(name, Fraction(0)) - amount
            else:
                self.exclusive.pop(r.id, None)


# A selector's answer on a device, by (expression, device): neither changes while the
# inventory's slices stay those it was built with, and building CEL's view of a device
# costs far more than running the program on it.
Verdicts = dict[tuple[str, DeviceId], Outcome]


@dataclass(frozen=True, slots=True)
class ClaimToAllocate:
    key: str  # namespace/name
    spec: ClaimSpec


@dataclass(frozen=True, slots=True)
class Allocated:
    allocations: dict[str, ClaimAllocation]  # claim key -> its allocation


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class _Option:
    """One way to serve a request: the request's own or one firstAvailable alternative."""

    claim: int
    request: str  # the request's name
    result_name: str  # "req" or "req/sub", as the allocation result names it
    exactly: ExactRequest
    fits: tuple[int, ...]  # candidate indices that fit, in candidate order


class _Search:
    def __init__(
        self,
        claims: Sequence[ClaimToAllocate],
        candidates: Sequence[Candidate],
        classes: Mapping[str, DeviceClass],
        in_use: InUse,
        verdicts: Verdicts,
    ) -> None:
        self.claims = claims
        self.verdicts = verdicts
        self.candidates = candidates
        self.classes = classes
        self.in_use = in_use
        self.variables: list[dict[str, Any] | None] = [None] * len(candidates)
        self.steps = 0
        self.taken: dict[int, int] = {}  # candidate -> times taken in this search
        self.consumed: dict[int, dict[str, Fraction]] = {}
        self.chosen: list[tuple[_Option, int]] = []
        self.failed_constraint: tuple[str, Constraint] | None = None

    # -- which devices fit a request, and why the others do not

    def _vars(self, i: int) -> dict[str, Any]:
        v = self.variables[i]
        if v is None:
            c = self.candidates[i]
            v = self.variables[i] = device_variables(c.driver, c.device)
        return v

    def fitting(self, claim: str, name: str, exactly: ExactRequest) -> tuple[int, ...] | str:
        """Candidates that fit, or why none can (a class or selector that cannot run)."""
        cls = self.classes.get(exactly.device_class)
        if cls is None:
            return f'claim {claim} request "{name}": device class "{exactly.device_class}" does not exist'
        selectors: list[tuple[str, str, Any]] = []
        for where, exprs in (
            (f'class "{cls.name}"', cls.selectors),
            ("request", exactly.selectors),
        ):
            for k, expr in enumerate(exprs):
                try:
                    selectors.append((f"{where} selector #{k}", expr, compile_selector(expr)))
                except SelectorError as exc:
                    return f'claim {claim} request "{name}": {where} selector #{k} {exc}'
        fits: list[int] = []
        rejected: dict[str, int] = {}
        errors: list[str] = []
        for i, c in enumerate(self.candidates):
            why = self._misfit(i, c, exactly, selectors, errors)
            if why:
                rejected[why] = rejected.get(why, 0) + 1
            else:
                fits.append(i)
        taken = rejected.get(_TAKEN, 0)
        if exactly.mode == AllocationMode.ALL and taken:
            return (
                f'claim {claim} request "{name}": allocationMode All, and {taken} matching '
                "device(s) are allocated to another claim"
            )
        if not fits or len(fits) < exactly.count:
            need = (
                "all matching devices"
                if exactly.mode == AllocationMode.ALL
                else f"{exactly.count} device(s)"
            )
            # Every device may fit and still be too few: say so rather than nothing.
            parts = ", ".join(f"{n} {why}" for why, n in rejected.items()) or (
                "too few on the node" if self.candidates else "the node has no device"
            )
            text = f'claim {claim} request "{name}": needs {need}, {len(fits)} of {len(self.candidates)} fit ({parts})'
            if errors:
                text += f"; {errors[0]}"
            return text
        return tuple(fits)

    def _misfit(
        self,
        i: int,
        c: Candidate,
        exactly: ExactRequest,
        selectors: list[tuple[str, str, Any]],
        errors: list[str],
    ) -> str:
        verdicts = self.verdicts
        cid = c.id
        for label, expression, program in selectors:
            key = (expression, cid)
            outcome = verdicts.get(key)
            if outcome is None:
                outcome = evaluate(program, self._vars(i))
                if len(verdicts) >= MAX_VERDICTS:
                    verdicts.clear()
                verdicts[key] = outcome
            if outcome.error:
                if len(errors) < 1:
                    errors.append(f"{label} on device {cid}: {outcome.error}")
                return f"{label} failed"
            if not outcome.matched:
                return f"{label} false"
        for cap, amount in exactly.capacity.items():
            if c.device.capacity.get(cap, Fraction(-1)) < amount:
                return f"capacity {cap} below {amount}"
        if cid in self.in_use.exclusive:
            return _TAKEN
        if not c.device.allow_multiple and self.in_use.consumed.get(cid):
            return _TAKEN
        return ""

    # -- the search

    def _can_take(self, i: int, opt: _Option) -> bool:
        c = self.candidates[i]
        if not c.device.allow_multiple:
            return self.taken.get(i, 0) == 0
        for cap, amount in self._consumes(c, opt.exactly).items():
            used = self.in_use.consumed.get(c.id, {}).get(cap, Fraction(0))
            mine = self.consumed.get(i, {}).get(cap, Fraction(0))
            if used + mine + amount > c.device.capacity.get(cap, Fraction(0)):
                return False
        return True

    @staticmethod
    def _consumes(c: Candidate, exactly: ExactRequest) -> dict[str, Fraction]:
        # Unset requests take the whole of every capacity (requestPolicy is not read).
        if exactly.capacity:
            return dict(exactly.capacity)
        return dict(c.device.capacity)

    def _push(self, opt: _Option, i: int) -> None:
        self.taken[i] = self.taken.get(i, 0) + 1
        c = self.candidates[i]
        if c.device.allow_multiple:
            mine = self.consumed.setdefault(i, {})
            for cap, amount in self._consumes(c, opt.exactly).items():
                mine[cap] = mine.get(cap, Fraction(0)) + amount
        self.chosen.append((opt, i))

    def _pop(self) -> None:
        opt, i = self.chosen.pop()
        self.taken[i] -= 1
        c = self.candidates[i]
        if c.device.allow_multiple:
            mine = self.consumed[i]
            for cap, amount in self._consumes(c, opt.exactly).items():
                mine[cap] -= amount

    def constraints_hold(self, claim: int) -> bool:
        """The claim's constraints over the devices chosen so far (a partial choice that
        breaks one can only get worse)."""
        spec = self.claims[claim].spec
        for constraint in spec.constraints:
            value: AttributeValue | None = None
            for opt, i in self.chosen:
                if opt.claim != claim or not _named(constraint, opt):
                    continue
                got = self.candidates[i].device.attributes.get(constraint.match_attribute)
                if got is None or (value is not None and got != value):
                    self.failed_constraint = (self.claims[claim].key, constraint)
                    return False
                value = got
        return True


def _named(constraint: Constraint, opt: _Option) -> bool:
    return not constraint.requests or any(
        r in (opt.request, opt.result_name) for r in constraint.requests
    )


def allocate(
    claims: Sequence[ClaimToAllocate],
    candidates: Sequence[Candidate],
    classes: Mapping[str, DeviceClass],
    in_use: InUse,
    node_name: str,
    verdicts: Verdicts | None = None,
) -> Allocated | Refused:
    """The devices of ``node_name`` for every one of ``claims``, or the reason why not."""
    search = _Search(claims, candidates, classes, in_use, {} if verdicts is None else verdicts)
    # Each request becomes its options, in order of preference.
    requests: list[list[_Option]] = []
    for ci, claim in enumerate(claims):
        for req in claim.spec.requests:
            alternatives = (
                [(req.name, req.exactly)]
                if req.exactly is not None
                else [(f"{req.name}/{s.name}", s.exactly) for s in req.first_available]
            )
            options: list[_Option] = []
            reasons: list[str] = []
            for result_name, exactly in alternatives:
                fits = search.fitting(claim.key, result_name, exactly)
                if isinstance(fits, str):
                    reasons.append(fits)
                    continue
                if exactly.mode == AllocationMode.ALL:
                    complete = all(candidates[i].pool_complete for i in fits)
                    if not complete:
                        reasons.append(
                            f'claim {claim.key} request "{result_name}": allocationMode All '
                            "over a pool whose slices are not all published"
                        )
                        continue
                options.append(_Option(ci, req.name, result_name, exactly, fits))
            if not options:
                return Refused("; ".join(reasons))
            requests.append(options)
    if _solve(search, requests, 0):
        return Allocated(_results(search, claims, node_name))
    if search.steps >= MAX_STEPS:
        return Refused(f"gave up after trying {MAX_STEPS} devices (the search is bounded)")
    if search.failed_constraint is not None:
        key, constraint = search.failed_constraint
        named = ", ".join(constraint.requests) or "all requests"
        return Refused(
            f'claim {key}: no choice of devices gives {named} the same "{constraint.match_attribute}"'
        )
    return Refused("the claims' requests cannot all have distinct devices on this node")


def _solve(search: _Search, requests: list[list[_Option]], r: int) -> bool:
    if r == len(requests):
        return True
    for opt in requests[r]:
        count = len(opt.fits) if opt.exactly.mode == AllocationMode.ALL else opt.exactly.count
        if _pick(search, requests, r, opt, count, 0):
            return True
    return False


def _pick(
    search: _Search, requests: list[list[_Option]], r: int, opt: _Option, left: int, start: int
) -> bool:
    if left == 0:
        return _solve(search, requests, r + 1)
    for k in range(start, len(opt.fits) - left + 1):
        search.steps += 1
        if search.steps > MAX_STEPS:
            return False
        i = opt.fits[k]
        if not search._can_take(i, opt):
            if opt.exactly.mode == AllocationMode.ALL:
                return False  # All means every one of them
            continue
        search._push(opt, i)
        if search.constraints_hold(opt.claim) and _pick(search, requests, r, opt, left - 1, k + 1):
            return True
        search._pop()
        if opt.exactly.mode == AllocationMode.ALL:
            return False
    return False


def _results(
    search: _Search, claims: Sequence[ClaimToAllocate], node_name: str
) -> dict[str, ClaimAllocation]:
    out: dict[str, list[DeviceResult]] = {c.key: [] for c in claims}
    local: dict[str, bool] = {c.key: False for c in claims}
    for opt, i in search.chosen:
        c = search.candidates[i]
        key = claims[opt.claim].key
        consumed = search._consumes(c, opt.exactly) if c.device.allow_multiple else {}
        out[key].append(DeviceResult(opt.result_name, c.driver, c.pool, c.device.name, consumed))
        local[key] = local[key] or c.node_local
    return {
        key: ClaimAllocation(tuple(results), node_name if local[key] else "")
        for key, results in out.items()
    }
