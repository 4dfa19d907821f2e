"""Queues, cards and the ledger: the pure model under sessions."""

from __future__ import annotations

import pytest

from kgpu.model.card import (
    CardError,
    NodeCard,
    card_units,
    mps_replicas,
    node_cards,
    parse_card_name,
    parse_card_quota,
    parse_card_request,
)
from kgpu.model.gpu import gpu_share, whole_gpus
from kgpu.model.ledger import QueueLedger
from kgpu.model.queue import QueueSpec, QueueTree, queue_from_annotation
from kgpu.model.resources import gpu_memory_share, show_vector

A100 = "NVIDIA-A100-80GB"


@pytest.mark.parametrize(
    ("labels", "gpus", "cards"),
    [
        ({"nvidia.com/gpu.product": A100}, 8, (NodeCard(A100, 8),)),
        (
            {
                "nvidia.com/gpu.product": A100,
                "nvidia.com/gpu.count": "4",
                "nvidia.com/gpu.memory": "81920",
                "nvidia.com/gpu.replicas": "8",
            },
            4,
            (NodeCard(f"{A100}/mps-80g*1/8", 32),),
        ),
        (
            {"nvidia.com/gpu.product": A100, "nvidia.com/mig-1g.5gb.count": "7"},
            1,
            (NodeCard(A100, 1), NodeCard(f"{A100}/mig-1g.5gb-mixed", 7)),
        ),
        ({"nvidia.com/gpu.count": "8"}, 8, ()),
    ],
    ids=["whole", "mps", "mig-mixed", "no-product"],
)
def test_card_names_follow_volcanos_rules(
    labels: dict[str, str], gpus: int, cards: tuple[NodeCard, ...]
) -> None:
    assert node_cards(labels, gpus) == cards


def test_card_units_count_shares_replicas_and_instances() -> None:
    assert card_units(A100, whole_gpus(4)) == 4000
    assert card_units(A100, gpu_share(500)) == 500
    mps = f"{A100}/mps-80g*1/8"
    assert mps_replicas(mps) == 8
    assert card_units(mps, gpu_share(125)) == 1000
    assert card_units(f"{A100}/mig-1g.5gb-mixed", whole_gpus(1)) == 1000


def test_memory_only_gpu_requests_count_by_their_fraction_of_gpu_memory() -> None:
    assert gpu_memory_share(20 * 1024, 80 * 1024) == 250
    assert gpu_memory_share(1, 81920) == 1  # rounded up: never counted as nothing
    assert gpu_memory_share(100_000, 81920) == 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"A100": 4',
            'annotation volcano.sh/card.quota is "{\\"A100\\": 4", expected a JSON object of '
            'card names to whole numbers of cards, such as {"NVIDIA-A100-80GB": 8} '
            "(invalid JSON at character 10: Expecting ',' delimiter)",
        ),
        (
            '["A100"]',
            'annotation volcano.sh/card.quota is "[\\"A100\\"]", expected a JSON object of '
            'card names to whole numbers of cards, such as {"NVIDIA-A100-80GB": 8}',
        ),
        (
            '{"A100": -1}',
            'annotation volcano.sh/card.quota["A100"] is -1, expected a whole number of cards, '
            "at least 0",
        ),
        (
            '{"A100": 1.5}',
            'annotation volcano.sh/card.quota["A100"] is 1.5, expected a whole number of cards, '
            "at least 0",
        ),
        (
            '{"A100": "4"}',
            'annotation volcano.sh/card.quota["A100"] is "4", expected a whole number of cards, '
            "at least 0",
        ),
        (
            '{"A100|H100": 4}',
            'annotation volcano.sh/card.quota key "A100|H100" is "A100|H100", expected a card '
            "name, one card name without '|'",
        ),
        (
            '{"gpu": 4}',
            'annotation volcano.sh/card.quota key "gpu" is "gpu", expected a card name, '
            "a card name other than cpu, memory, gpu",
        ),
    ],
    ids=["bad-json", "not-object", "negative", "fraction", "string", "alternatives", "reserved"],
)
def test_bad_card_quota_says_field_value_and_expectation(text: str, message: str) -> None:
    with pytest.raises(CardError) as info:
        parse_card_quota(text)
    assert str(info.value) == message


def test_card_quota_request_and_name_parse() -> None:
    assert parse_card_quota('{"A100": 5, "H100": 2.0}') == {"A100": 5, "H100": 2}
    assert parse_card_request('{"A100|H100": 4, "T4": 1}') == {("A100", "H100"): 4, ("T4",): 1}
    assert parse_card_name(" A100 | H100 ") == ("A100", "H100")
    with pytest.raises(CardError, match=r'card.name is "A100\|\|H100", expected card names'):
        parse_card_name("A100||H100")


def test_queue_annotation_sets_deserved_and_limit_per_card_and_spec_wins() -> None:
    queue = QueueSpec("team-a", deserved={A100: 2000})
    got = queue_from_annotation(queue, '{"NVIDIA-A100-80GB": 5, "T4": 1}')
    assert got.deserved == {A100: 2000, "T4": 1000}
    assert got.limit == {A100: 5000, "T4": 1000}


def test_tree_is_ordered_and_bad_queues_are_left_out_with_reasons() -> None:
    tree = QueueTree(
        [
            QueueSpec("b"),
            QueueSpec("a"),
            QueueSpec("a2", parent="a"),
            QueueSpec("a1", parent="a"),
            QueueSpec("orphan", parent="nowhere"),
            QueueSpec("x", parent="y"),
            QueueSpec("y", parent="x"),
            QueueSpec("dup"),
            QueueSpec("dup"),
            QueueSpec("neg", limit={"gpu": -1}),
        ]
    )
    assert [s.name for s in tree.specs] == ["a", "a1", "a2", "b"]
    assert tree.path[tree.index["a2"]] == (2, 0)
    assert [p.message for p in tree.problems] == [
        'Queue dup: name is "dup", expected a name used by one queue',
        "Queue neg: limit[gpu] is -1, expected at least 0",
        'Queue orphan: parent is "nowhere", expected the name of an existing queue, '
        "or empty for a top-level queue",
        'Queue x: parent is "y", expected a queue that is not its own ancestor',
        'Queue y: parent is "x", expected a queue that is not its own ancestor',
    ]


def test_ledger_charges_the_path_and_checks_every_limit_on_it() -> None:
    tree = QueueTree(
        [
            QueueSpec("org", limit={"gpu": 4000}),
            QueueSpec("team", parent="org", limit={"cpu": 8000}),
        ]
    )
    ledger = QueueLedger(tree)
    team = tree.index["team"]
    ledger.charge(team, {"gpu": 3000, "cpu": 2000})
    assert ledger.allocated[tree.index["org"]] == {"gpu": 3000, "cpu": 2000}
    short = ledger.shortfall(team, {"gpu": 2000, "cpu": 1000})
    assert short is not None and short.code == "InsufficientScalarQuota"
    assert short.message == "queue org: gpu requested 2, allocated 3, quota 4"
    short = ledger.shortfall(team, {"cpu": 6500})
    assert short is not None and short.code == "InsufficientCPUQuota"
    assert short.message == "queue team: cpu requested 6.5, allocated 2, quota 8"
    assert show_vector({"gpu": 500, "memory": 1024, "T4": 2000}) == "memory 1024Mi, gpu 0.5, T4 2"
