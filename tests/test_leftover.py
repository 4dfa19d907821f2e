"""The leftover model: how much of a free share the workload is expected to leave idle,
and the share placements it changes in kgpu's default policy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgpu.config import load_profile
from kgpu.framework.scheduler import Placement
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import TypicalPod
from kgpu.state.leftover import CHANCES, LeftoverModel
from tests.builders import make_node, make_pod

WHOLE = TypicalPod(0.9, 4000, 1000, 1)
SHARE_470 = TypicalPod(0.05, 4000, 470, 1)
SHARE_320 = TypicalPod(0.05, 4000, 320, 1)
# A share of weight w turns up to fill a hole it fits with this chance.
FILLED = 1.0 - math.exp(-CHANCES * 0.05)


def _leftover(typical: list[TypicalPod], free: int, cpu: int = 32_000) -> float:
    model = LeftoverModel(typical, cpu_max=32_000)
    return float(model.leftover(np.array([free]), np.array([cpu]))[0])


def test_a_hole_no_typical_share_fits_stays_idle() -> None:
    assert _leftover([WHOLE, SHARE_470, SHARE_320], 310) == 310


def test_an_idle_gpu_is_left_to_fgd() -> None:
    assert _leftover([WHOLE, SHARE_470, SHARE_320], 1000) == 0


def test_a_hole_a_typical_share_fits_keeps_what_that_share_leaves() -> None:
    typical = [WHOLE, SHARE_470, SHARE_320]
    # 350 free: only the 320 fits (chance FILLED), leaving 30 that nothing fits.
    assert _leftover(typical, 350) == pytest.approx((1 - FILLED) * 350 + FILLED * 30)
    # 530 free: the 470 or the 320 turns up (each half the time when one does), leaving
    # 60, or 210 that nothing fits.
    either = 1.0 - math.exp(-CHANCES * 0.1)
    assert _leftover(typical, 530) == pytest.approx((1 - either) * 530 + either * (60 + 210) / 2)


def test_a_common_share_fills_a_hole_more_surely_than_a_rare_one() -> None:
    common = [TypicalPod(0.5, 4000, 1000, 1), TypicalPod(0.5, 4000, 500, 1)]
    rare = [TypicalPod(0.99, 4000, 1000, 1), TypicalPod(0.01, 4000, 500, 1)]
    assert _leftover(common, 500) == pytest.approx(math.exp(-CHANCES * 0.5) * 500)
    assert _leftover(rare, 500) == pytest.approx(math.exp(-CHANCES * 0.01) * 500)
    assert _leftover(common, 500) < 5 < 400 < _leftover(rare, 500)


def test_a_hole_on_a_node_without_the_cpu_its_shares_need_stays_idle() -> None:
    typical = [WHOLE, SHARE_470, SHARE_320]
    assert _leftover(typical, 350, cpu=3999) == 350
    assert _leftover(typical, 350, cpu=4000) == pytest.approx((1 - FILLED) * 350 + FILLED * 30)


def test_requests_off_the_table_steps_still_fit_a_hole_their_size() -> None:
    """The table steps by 10 milli-GPU and 100 milli-CPU; a 315-milli, 3,152-milli-CPU
    share still fits a hole of 315 on a node with 3,152 free (counted to the step: 310)."""
    typical = [TypicalPod(0.5, 4000, 1000, 1), TypicalPod(0.5, 3152, 315, 1)]
    assert _leftover(typical, 315, cpu=3152) == pytest.approx(math.exp(-CHANCES * 0.5) * 310)
    assert _leftover(typical, 305, cpu=3152) == 300


def test_the_kgpu_policy_puts_a_share_where_the_hole_it_leaves_will_be_filled() -> None:
    """A GPU with 530 free and one with 680 free: a 320 share leaves 210 (which no typical
    share fits) or 360 (which another 320 fits). FGD scores the two alike and takes the
    first node; kgpu takes the second."""
    state = ClusterState([make_node("a").gpus(1).build(), make_node("b").gpus(1).build()])
    state.allocate(make_pod("x").share(470).build(), 0, [0])
    state.allocate(make_pod("y").share(320).build(), 1, [0])
    pod = make_pod("s").share(320).build()
    context = PluginContext(typical_pods=[WHOLE, SHARE_470, SHARE_320])
    chosen = {}
    for policy in ("fgd", "kgpu"):
        outcome = build_scheduler(load_profile(policy), context).schedule(state, pod)
        assert isinstance(outcome, Placement)
        chosen[policy] = state.nodes[outcome.node].name
    assert chosen == {"fgd": "a", "kgpu": "b"}


def test_a_node_claiming_millions_of_cores_costs_no_bigger_table() -> None:
    """Virtual nodes report huge CPU. The table stops at the most CPU that filling one hole
    can take (here 100 shares of 10 milli × 4 cores), and beyond it reads that column."""
    typical = [WHOLE, TypicalPod(0.05, 4000, 10, 1), SHARE_320]
    model = LeftoverModel(typical, cpu_max=10**12)
    assert model.table.shape == (101, 100 * 40 + 1)
    free, cpu = np.array([350, 1000]), np.array([10**12])
    assert model.leftover(free, cpu).tolist() == model.leftover(free, np.array([400_000])).tolist()
    assert model.leftover(free, cpu)[0] < 350
