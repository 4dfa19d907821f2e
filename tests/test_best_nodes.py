"""A shape's feasible nodes ranked by one raw score, against the arrays' answer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.framework.best_nodes import BestNodes

_NODES = 12
# Few distinct scores, so that ties (and -0.0 beside 0.0) come often.
_SCORES = st.sampled_from([-3.0, -0.0, 0.0, 1.0, 2.5, 7.0, 7.0])


def _expected(scores: dict[int, float], tie: list[int] | None) -> tuple[int, float, float] | None:
    """What a pass over every feasible node says: the highest score, the lowest rank among
    the nodes that have it (the lowest index without ranks), and the lowest score."""
    if not scores:
        return None
    high = max(scores.values())
    best = min((n for n, s in scores.items() if s == high), key=lambda n: (tie or range(_NODES))[n])
    return best, high, min(scores.values())


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, _NODES - 1), _SCORES),
    st.lists(
        st.lists(st.tuples(st.integers(0, _NODES - 1), st.none() | _SCORES), max_size=5),
        max_size=60,
    ),
    st.booleans(),
    st.permutations(list(range(_NODES))),
)
def test_the_best_node_is_the_one_a_pass_over_every_node_finds(
    start: dict[int, float],
    updates: list[list[tuple[int, float | None]]],
    ranked: bool,
    ranks: list[int],
) -> None:
    tie = ranks if ranked else None
    ranking = BestNodes(list(start), list(start.values()), tie)
    scores = dict(start)
    assert ranking.best() == _expected(scores, tie)
    for update in updates:
        last = dict(update)  # a node listed twice in one update ends as its last entry says
        ranking.update(list(last), list(last.values()))
        for node, score in last.items():
            if score is None:
                scores.pop(node, None)
            else:
                scores[node] = score
        assert ranking.best() == _expected(scores, tie)


def test_nan_scores_are_not_ranked() -> None:
    assert BestNodes.usable([1.0, 2.0])
    assert not BestNodes.usable([1.0, float("nan")])


def test_a_node_scored_again_and_again_leaves_a_bounded_ranking() -> None:
    ranking = BestNodes([0, 1], [1.0, 2.0], None)
    most = 0
    for i in range(10_000):
        ranking.update([0], [float(i % 50)])
        most = max(most, ranking.held())
    assert ranking.best() == (0, 49.0, 2.0)
    assert most <= 4 * 2 + 128 + 2  # rebuilt past twice its good entries (and 64 spare)
