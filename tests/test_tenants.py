"""Multi-tenant simulation: queues converge to their fair shares, and idle ones come back."""

from __future__ import annotations

from pathlib import Path

from kgpu.config import load_profile
from kgpu.model.queue import QueueSpec
from kgpu.plugins.registry import build_scheduler
from kgpu.sim.tenants import Tenant, gpu_cluster, plot_tenants, simulate_tenants

NODES = gpu_cluster(8)  # 64 GPUs
TOTAL = 64_000
A = QueueSpec("a", deserved={"gpu": TOTAL * 60 // 100})
B = QueueSpec("b", deserved={"gpu": TOTAL * 40 // 100})


def test_two_queues_with_deserved_60_40_converge_within_5_percent_of_fair_share() -> None:
    tenants = [
        Tenant(A, pods=2, min_member=2, durations=(3, 9)),
        Tenant(B, gpu_milli=500, cpu_milli=2000, durations=(2, 6)),
    ]
    result = simulate_tenants(NODES, tenants, 30, build_scheduler(load_profile("bestfit")), seed=3)
    assert result.fair["a"][-1] == 0.6 and result.fair["b"][-1] == 0.4
    for cycle in range(5, 30):  # the cluster is saturated throughout
        assert abs(result.share["a"][cycle] - 0.6) <= 0.05, cycle
        assert abs(result.share["b"][cycle] - 0.4) <= 0.05, cycle
        assert result.share["a"][cycle] + result.share["b"][cycle] >= 0.95


def test_an_idle_queue_that_comes_back_gets_its_share_through_reclaim(tmp_path: Path) -> None:
    tenants = [
        Tenant(A, pods=2, min_member=2, durations=(50, 60)),  # long jobs: only reclaim helps
        Tenant(B, gpu_milli=500, cpu_milli=2000, active=(10, 1 << 30), durations=(50, 60)),
    ]
    result = simulate_tenants(NODES, tenants, 16, build_scheduler(load_profile("bestfit")), seed=5)
    assert result.share["a"][9] == 1.0 and result.share["b"][9] == 0.0  # a borrowed it all
    assert result.evictions[10] > 0 and sum(result.evictions[:10]) == 0
    back = next(c for c in range(10, 16) if result.share["b"][c] >= 0.4 - 0.05)
    assert back <= 12  # within two cycles of coming back
    assert all(abs(result.share["b"][c] - 0.4) <= 0.05 for c in range(back, 16))
    plot_tenants(result, tmp_path / "tenants.png")
    assert (tmp_path / "tenants.png").stat().st_size > 0


def test_cli_prints_shares_per_cycle_and_writes_the_plot(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kgpu.cli import main

    out = tmp_path / "t.png"
    args = ["simulate", "tenants", "--cycles", "14", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "cycle   0: a holds 100.0% (fair 100.0%), b holds   0.0%" in result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = CliRunner().invoke(main, ["simulate", "tenants", "--deserved", "70,50"])
    assert bad.exit_code == 2
    assert "is '70,50', expected two percentages that add up to at most 100" in bad.output
