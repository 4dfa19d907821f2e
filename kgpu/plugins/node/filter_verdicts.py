"""A node filter's verdicts, built at the least cost for the nodes it is given.

A filter judges nodes by index. A decision of a shape seen before re-judges the few nodes
changed since (an openb replay's usual cycle): each is judged in Python on its figures
read as Python ints, and the verdicts are made from the list of first reasons
(:func:`one_by_one`), which is most often that every node passes.

Given most of the cluster instead (a pod of a new shape is judged on every node),
gathering each figure a filter reads for those nodes costs more than comparing the figure
on every node, where it lies contiguous in memory: a gather moves the nodes' figures one
index at a time, a comparison runs over the whole array at once. So each test runs over
the whole cluster, every node's first failed test is written into one small array, and
only that array is gathered for the nodes given (:func:`first_reasons`). The verdicts are
those of the same tests run on the gathered figures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kgpu.framework.interfaces import BoolArray, IntArray, Verdicts
from kgpu.framework.status import Reason
from kgpu.state.cluster import ClusterState


def one_by_one(why: list[Reason | None]) -> Verdicts:
    """The verdicts of nodes judged one by one, from each node's first reason or None:
    ``Verdicts.from_reasons``'s for the filters' reasons (shared constants, told apart by
    identity rather than by a hash of their fields), compiled. A decision re-judges the
    few nodes changed since, where building the verdicts costs more than judging them."""
    count = len(why)
    if why.count(None) == count:  # most calls: every node passes
        passed = np.empty(count, dtype=np.bool_)
        passed.fill(True)
        return Verdicts(passed)
    verdicts = Verdicts(np.array([r is None for r in why], dtype=np.bool_))
    seen: list[Reason] = []  # in the order they first come
    for reason in why:
        if reason is not None and not any(reason is other for other in seen):
            seen.append(reason)
    for reason in seen:
        verdicts.rejected.append((reason, np.array([r is reason for r in why], dtype=np.bool_)))
    return verdicts


def asks_most(state: ClusterState, nodes: IntArray) -> bool:
    """Are ``nodes`` enough of the cluster (a quarter or more) for its whole arrays to be
    the cheaper way?"""
    return 4 * len(nodes) >= len(state)


def first_reasons(nodes: IntArray, tests: Sequence[tuple[Reason, BoolArray]]) -> Verdicts:
    """Verdicts on ``nodes`` from ``tests``, each a reason and the nodes of the whole cluster
    it rejects, in order: a node that fails several keeps the first (as ``Verdicts.reject``
    leaves it). At most 126 tests."""
    count = len(tests)
    # Per node, count + 1 less the number of its first failed test (0: none failed), as the
    # most of each test's rank where it fails: a masked write per test costs several times
    # more than this arithmetic on bytes.
    rank = np.zeros(len(tests[0][1]), dtype=np.int8)
    for number, (_, rejected) in enumerate(tests, start=1):
        np.maximum(rank, rejected.view(np.int8) * np.int8(count + 1 - number), out=rank)
    why = rank.take(nodes)
    verdicts = Verdicts(why == 0)
    if np.count_nonzero(verdicts.ok) < len(nodes):
        for number, (reason, _) in enumerate(tests, start=1):
            rejected_here = why == count + 1 - number
            if np.count_nonzero(rejected_here):
                verdicts.rejected.append((reason, rejected_here))
    return verdicts
