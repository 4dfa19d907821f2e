"""Fair shares: docs/QUEUES.md's worked examples, number for number, and the properties."""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.model.fair_share import Claim, divide, dominant_ratio, fair_shares
from kgpu.model.queue import QueueSpec, QueueTree

G = 1000  # milli per GPU, per core


def _shares(
    queues: list[QueueSpec], capacity: dict[str, int], wants: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    tree = QueueTree(queues)
    assert tree.problems == []
    demand = [wants.get(spec.name, {}) for spec in tree.specs]
    fair = fair_shares(tree, capacity, demand)
    return {spec.name: fair[i] for i, spec in enumerate(tree.specs)}


def test_example_1_quotas_a_satisfied_queue_and_weights() -> None:
    shares = _shares(
        [
            QueueSpec("a", deserved={"gpu": 30 * G}, over_quota_weight={"gpu": 2}),
            QueueSpec("b", deserved={"gpu": 10 * G}),
            QueueSpec("c"),
        ],
        {"gpu": 100 * G},
        {"a": {"gpu": 100 * G}, "b": {"gpu": 20 * G}, "c": {"gpu": 100 * G}},
    )
    assert shares == {"a": {"gpu": 63333}, "b": {"gpu": 20000}, "c": {"gpu": 16667}}


def test_example_2_a_tree_a_limit_and_a_queue_priority() -> None:
    shares = _shares(
        [
            QueueSpec("research", deserved={"gpu": 24 * G}, limit={"gpu": 28 * G}),
            QueueSpec("vision", parent="research", deserved={"gpu": 16 * G}),
            QueueSpec(
                "nlp", parent="research", deserved={"gpu": 8 * G}, over_quota_weight={"gpu": 3}
            ),
            QueueSpec("prod", deserved={"gpu": 24 * G}, priority=1),
            QueueSpec("serve", parent="prod", deserved={"gpu": 24 * G}),
            QueueSpec("batch"),
        ],
        {"gpu": 64 * G},
        {
            "vision": {"gpu": 40 * G},
            "nlp": {"gpu": 40 * G},
            "serve": {"gpu": 30 * G},
            "batch": {"gpu": 64 * G},
        },
    )
    assert {name: share["gpu"] // G for name, share in shares.items()} == {
        "research": 28,
        "vision": 17,
        "nlp": 11,
        "prod": 30,
        "serve": 30,
        "batch": 6,
    }


def test_example_3_overcommitted_quotas_two_resources_and_the_dominant_ratio() -> None:
    shares = _shares(
        [
            QueueSpec("infer", deserved={"gpu": 6 * G}),
            QueueSpec("train", deserved={"gpu": 4 * G}),
            QueueSpec("cpu-batch", deserved={"cpu": 16 * G}),
        ],
        {"gpu": 8 * G, "cpu": 64 * G},
        {
            "infer": {"gpu": 6 * G, "cpu": 24 * G},
            "train": {"gpu": 8 * G, "cpu": 32 * G},
            "cpu-batch": {"cpu": 40 * G},
        },
    )
    assert shares == {
        "infer": {"gpu": 4800, "cpu": 16000},
        "train": {"gpu": 3200, "cpu": 16000},
        "cpu-batch": {"cpu": 32000},
    }
    held = {"gpu": 4000, "cpu": 16000}
    assert dominant_ratio(held, shares["infer"]) == 1.0
    assert dominant_ratio(held, shares["train"]) == 1.25


def test_weight_zero_gets_nothing_over_quota_and_leaves_it_undivided() -> None:
    claims = [Claim(2, 10, Fraction(0)), Claim(0, 10, Fraction(0))]
    assert divide(10, claims) == [2, 0]


def test_a_queue_with_demand_in_a_resource_it_has_no_share_of_is_infinitely_served() -> None:
    assert dominant_ratio({"cpu": 1}, {"gpu": 5}) == float("inf")
    assert dominant_ratio({}, {}) == 0.0


claim = st.builds(
    Claim,
    deserved=st.integers(0, 50),
    want=st.integers(0, 80),
    weight=st.sampled_from([Fraction(0), Fraction(1), Fraction(2), Fraction(1, 3)]),
    priority=st.integers(0, 2),
)


@given(amount=st.integers(0, 200), claims=st.lists(claim, min_size=1, max_size=6))
@settings(max_examples=300, deadline=None)
def test_division_never_gives_past_what_is_wanted_or_had(amount: int, claims: list[Claim]) -> None:
    give = divide(amount, claims)
    assert sum(give) <= amount
    assert all(0 <= g <= c.want for g, c in zip(give, claims, strict=True))
    floors = [min(c.deserved, c.want) for c in claims]
    if sum(floors) <= amount:
        # Quotas are honoured, and nothing that someone with a weight wants is left idle.
        assert all(g >= f for g, f in zip(give, floors, strict=True))
        hungry = [c.want - g for g, c in zip(give, claims, strict=True) if c.weight > 0]
        assert sum(give) == amount or not any(hungry)
    else:
        assert sum(give) == amount


def test_unused_share_of_a_subtree_flows_to_its_parents_siblings() -> None:
    shares = _shares(
        [QueueSpec("p", deserved={"gpu": 8 * G}), QueueSpec("p1", parent="p"), QueueSpec("q")],
        {"gpu": 10 * G},
        {"p1": {"gpu": 2 * G}, "q": {"gpu": 10 * G}},
    )
    assert shares["p"] == {"gpu": 2 * G} and shares["p1"] == {"gpu": 2 * G}
    assert shares["q"] == {"gpu": 8 * G}


def _divide_in_fractions(amount: int, claims: list[Claim]) -> list[int]:
    """``divide`` as rational arithmetic spells it (``Fraction`` offers): what the integer
    cross-multiplications must give."""
    give = [min(c.deserved, c.want) for c in claims]
    quoted = sum(give)
    if quoted > amount:
        exact = [Fraction(g * amount, quoted) for g in give]
        out = [math.floor(x) for x in exact]
        ranked = sorted(range(len(out)), key=lambda i: (out[i] - exact[i], i))
        for i in ranked[: amount - sum(out)]:
            out[i] += 1
        return out
    left = amount - quoted
    for level in sorted({c.priority for c in claims}, reverse=True):
        active = [
            i
            for i, c in enumerate(claims)
            if c.priority == level and give[i] < c.want and c.weight > 0
        ]
        while left > 0 and active:
            weights = sum(claims[i].weight for i in active)
            offer = {i: left * claims[i].weight / weights for i in active}
            sated = [i for i in active if claims[i].want - give[i] <= offer[i]]
            if sated:
                for i in sated:
                    left -= claims[i].want - give[i]
                    give[i] = claims[i].want
                active = [i for i in active if i not in sated]
                continue
            floors = {i: math.floor(offer[i]) for i in active}
            for i in active:
                give[i] += floors[i]
                left -= floors[i]
            for i in sorted(active, key=lambda i: (floors[i] - offer[i], i))[:left]:
                give[i] += 1
                left -= 1
            break
    return give


wide_claim = st.builds(
    Claim,
    deserved=st.integers(0, 10**6),
    want=st.integers(0, 10**6),
    weight=st.sampled_from(
        [Fraction(0), Fraction(1), Fraction(3), Fraction(1, 3), Fraction(0.1), Fraction(2.5)]
    ),
    priority=st.integers(0, 2),
)


@given(amount=st.integers(0, 4 * 10**6), claims=st.lists(wide_claim, min_size=1, max_size=7))
@settings(max_examples=300, deadline=None)
def test_division_in_integers_is_the_exact_rational_one(amount: int, claims: list[Claim]) -> None:
    assert divide(amount, claims) == _divide_in_fractions(amount, claims)
