"""The filters' cheaper ways to build verdicts give the verdicts of the plain ways: a few
nodes' reasons as ``Verdicts.from_reasons`` reads them, tests over the whole cluster as
``Verdicts.reject`` applies them to the nodes asked, reasons in the same order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.framework import reasons
from kgpu.framework.interfaces import Verdicts
from kgpu.framework.status import Reason
from kgpu.plugins.node.filter_verdicts import first_reasons, one_by_one

REASONS = [reasons.TOO_MANY_PODS, reasons.INSUFFICIENT_CPU, reasons.INSUFFICIENT_MEMORY]


def _same(a: Verdicts, b: Verdicts) -> None:
    assert a.ok.tolist() == b.ok.tolist()
    assert [r for r, _ in a.rejected] == [r for r, _ in b.rejected]
    assert [m.tolist() for _, m in a.rejected] == [m.tolist() for _, m in b.rejected]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([None, *REASONS]), max_size=20))
def test_nodes_judged_one_by_one_get_the_verdicts_of_their_reasons(
    why: list[Reason | None],
) -> None:
    _same(one_by_one(why), Verdicts.from_reasons(why))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), min_size=1, max_size=40),
    st.data(),
)
def test_tests_over_the_whole_cluster_reject_as_each_test_in_turn(
    failed: list[tuple[bool, bool, bool]], data: st.DataObject
) -> None:
    masks = [np.array([f[i] for f in failed], dtype=np.bool_) for i in range(3)]
    picked = sorted(data.draw(st.sets(st.integers(0, len(failed) - 1))))
    nodes = np.array(picked, dtype=np.int64)
    expected = Verdicts.all_pass(len(nodes))
    for reason, mask in zip(REASONS, masks, strict=True):
        expected.reject(reason, mask[nodes])
    _same(first_reasons(nodes, list(zip(REASONS, masks, strict=True))), expected)
