"""Fair shares of a queue tree: what each queue should hold now, resource by resource.

docs/QUEUES.md explains the algorithm with worked examples (checked by
tests/test_fair_share.py). In short, top down from the cluster's capacity, each parent's
share of a resource is divided among its children:

1. every child first gets its deserved quota, but no more than it wants, where what a
   child wants is its subtree's demand (what its pods hold plus what its pending pods
   ask) capped by its limit; if the quotas ask more than the parent has, they are scaled
   down in proportion;
2. what is left goes to children that want more, higher queue priority first, and among
   equal priorities by water-filling in proportion to the over-quota weight: each round
   offers every unsatisfied child ``left × weight / Σ weights``; a child that needs less
   takes its need and the round is repeated over the rest; when everyone needs more than
   the offer, each takes the offer (whole units, the few units of rounding going to the
   largest fractions) and the division ends.

A child's fair share is never above what it wants, so what one queue leaves unused flows
to its siblings, and what a subtree leaves unused flows to its parent's siblings.

The division is per resource; resources meet in a queue's *dominant ratio*
(``dominant_ratio``): the largest over resources of held ÷ fair share, which orders queues
(least served first) and picks reclaim victims (most over-served first), so a queue that
is over its share of GPUs is over its share even when it holds little CPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from kgpu.model.queue import QueueTree
from kgpu.model.resources import Vector, add


@dataclass(frozen=True, slots=True, init=False)
class Claim:
    """One child's stake in one resource of its parent's share."""

    deserved: int
    want: int
    weight: Fraction
    priority: int

    # Written out, not generated: a session makes one per queue and resource, and the
    # generated __init__ of a frozen dataclass is Python even in the compiled build.
    def __init__(self, deserved: int, want: int, weight: Fraction, priority: int = 0) -> None:
        object.__setattr__(self, "deserved", deserved)
        object.__setattr__(self, "want", want)
        object.__setattr__(self, "weight", weight)
        object.__setattr__(self, "priority", priority)


def divide(amount: int, claims: Sequence[Claim]) -> list[int]:
    """Divide ``amount`` of one resource among ``claims`` (quotas, then weighted water-filling)."""
    give = [min(c.deserved, c.want) for c in claims]
    quoted = sum(give)
    if quoted > amount:
        return _scale(give, amount)
    left = amount - quoted
    for level in sorted({c.priority for c in claims}, reverse=True):
        if left == 0:
            break
        members = [i for i, c in enumerate(claims) if c.priority == level]
        left = _water_fill(left, members, give, claims)
    return give


def _scale(give: list[int], amount: int) -> list[int]:
    """``give`` scaled to sum to ``amount``: floors, then a unit each to the largest fractions.

    In integers: ``g × amount ÷ quoted`` is its floor plus remainder ÷ quoted, so the
    largest fractions are the largest remainders (the smallest, were ``quoted`` negative)."""
    quoted = sum(give)
    parts = [divmod(g * amount, quoted) for g in give]
    out = [whole for whole, _ in parts]
    rest = amount - sum(out)
    sign = 1 if quoted > 0 else -1
    for i in sorted(range(len(out)), key=lambda i: (-sign * parts[i][1], i))[:rest]:
        out[i] += 1
    return out


def _water_fill(left: int, members: list[int], give: list[int], claims: Sequence[Claim]) -> int:
    """Exact rational arithmetic in integers: the weights over their common denominator,
    and each offer ``left × weight ÷ Σ weights`` compared and floored by cross-multiplying
    (``Fraction`` arithmetic, Python even in the compiled build, was most of a session's
    fair shares)."""
    active = [i for i in members if give[i] < claims[i].want and claims[i].weight.numerator > 0]
    if not active:
        return left
    common = math.lcm(*[claims[i].weight.denominator for i in active])
    weight = {
        i: claims[i].weight.numerator * (common // claims[i].weight.denominator) for i in active
    }
    while left > 0 and active:
        weights = sum(weight[i] for i in active)
        # want - give <= left × w ÷ Σ w, with Σ w > 0
        sated = [i for i in active if (claims[i].want - give[i]) * weights <= left * weight[i]]
        if sated:
            for i in sated:
                left -= claims[i].want - give[i]
                give[i] = claims[i].want
            active = [i for i in active if i not in sated]
            continue
        offers = {i: divmod(left * weight[i], weights) for i in active}
        for i in active:
            give[i] += offers[i][0]
            left -= offers[i][0]
        # Fewer units than children are left; each still needs more than its offer, so one
        # more unit never takes a child past what it wants. The largest fractions of an
        # offer (remainder ÷ Σ w) first.
        for i in sorted(active, key=lambda i: (-offers[i][1], i))[:left]:
            give[i] += 1
            left -= 1
        break
    return left


def subtree_demand(tree: QueueTree, demand: Sequence[Mapping[str, int]]) -> list[Vector]:
    """Each queue's demand plus its descendants' (children come after parents in ``tree``)."""
    out = [dict(d) for d in demand]
    for i in reversed(range(len(tree))):
        parent = tree.parent[i]
        if parent >= 0:
            add(out[parent], out[i])
    return out


def fair_shares(
    tree: QueueTree, capacity: Mapping[str, int], demand: Sequence[Mapping[str, int]]
) -> list[Vector]:
    """The fair share of every queue of ``tree``; ``demand[i]`` is queue i's own demand."""
    wanted = subtree_demand(tree, demand)
    names: set[str] = set(capacity)
    for i, spec in enumerate(tree.specs):
        names.update(spec.deserved, wanted[i])
    resources = sorted(names)
    fair: list[Vector] = [{} for _ in range(len(tree))]
    # Queues share a few weights: each made a Fraction once (``Fraction(float)`` is slow).
    exact: dict[float, Fraction] = {}

    def exactly(weight: float) -> Fraction:
        found = exact.get(weight)
        if found is None:
            found = exact[weight] = Fraction(weight)
        return found

    def split(share: Mapping[str, int], kids: list[int]) -> None:
        for r in resources:
            claims = []
            for k in kids:
                spec = tree.specs[k]
                want = wanted[k].get(r, 0)
                if r in spec.limit:
                    want = min(want, spec.limit[r])
                claims.append(
                    Claim(spec.deserved.get(r, 0), want, exactly(spec.weight(r)), spec.priority)
                )
            for k, amount in zip(kids, divide(share.get(r, 0), claims), strict=True):
                if amount:
                    fair[k][r] = amount

    split(capacity, tree.top)
    for i in range(len(tree)):  # parents before children
        if tree.children[i]:
            split(fair[i], tree.children[i])
    return fair


def dominant_ratio(held: Vector, fair: Vector) -> float:
    """max over resources held of held ÷ fair share (infinite where the share is 0).

    Of vectors (dicts), not mappings: the compiled build walks a dict natively, and a
    queue's ratio is worked out again each time its account changes."""
    ratio = 0.0
    for r, amount in held.items():
        if amount > 0:
            share = fair.get(r, 0)
            if share <= 0:
                return math.inf
            part = amount / share  # compared, not ``max``: floats unboxed when compiled
            if part > ratio:
                ratio = part
    return ratio
