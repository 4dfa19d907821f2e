"""kgpu simulate openb: tuning, the curve, the JSON, and a reduced fidelity check against
the paper's table (bench/openb_table.py produces the full one)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.sim.arrivals import tune_workload
from kgpu.sim.openb import TracePod, read_pods
from kgpu.sim.openb_run import run_openb
from kgpu.sim.replay import allocation_curve


def _pod(name: str, num_gpu: int, milli: int) -> TracePod:
    return TracePod(name, 1000, 1024, num_gpu, milli, ())


def test_tuning_up_appends_copies_until_the_next_would_pass_the_target() -> None:
    pods = [_pod("a", 1, 1000), _pod("b", 1, 500), _pod("c", 0, 0)]
    out = tune_workload(pods, capacity_milli=4000, tune=1.3, seed=7)
    assert sorted(p.name for p in out[:3]) == ["a", "b", "c"]
    assert all("-tuned-" in p.name for p in out[3:])
    total = sum(p.gpu_request_milli for p in out)
    assert total <= 5200 < total + 500  # even the smallest share would pass the target
    assert out == tune_workload(pods, capacity_milli=4000, tune=1.3, seed=7)


def test_tuning_down_removes_pods_at_random() -> None:
    pods = [_pod(f"p{i}", 1, 1000) for i in range(10)]
    out = tune_workload(pods, capacity_milli=4000, tune=1.0, seed=3)
    assert sum(p.gpu_request_milli for p in out) == 4000


def test_curve_buckets_arrivals_by_rounded_percent() -> None:
    arrived = np.array([0, 10, 20, 30, 40], dtype=np.int64)
    used = np.array([0, 10, 10, 30, 30], dtype=np.int64)
    # capacity 40 → arrivals 0%, 25%, 50%, 75%, 100%; 2% has no event within 1%.
    curve = dict(allocation_curve(arrived, used, 40, 100))
    assert curve[0] == 0.0 and curve[25] == 25.0 and curve[100] == 75.0
    assert curve[26] == 25.0  # no event at 26%: the events within 1% stand in
    assert 2 not in curve


def test_cli_writes_the_documented_json(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,T4\nn1,64000,262144,2,V100\n"
    )
    pods = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    rows += [f"p{i},4000,8192,1,{[1000, 500, 250][i % 3]}," for i in range(9)]
    rows += ["q,8000,8192,2,1000,V100"]
    pods.write_text("\n".join(rows) + "\n")
    out = tmp_path / "r.json"
    args = ["simulate", "openb", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd"]
    result = CliRunner().invoke(main, [*args, "--seed", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data) >= {
        "policy",
        "seed",
        "tune",
        "total_gpus",
        "pods",
        "failed_pods",
        "final_gpu_alloc_pct",
        "curve",
        "elapsed_s",
    }
    assert data["total_gpus"] == 6 and data["policy"] == "fgd"
    assert data["curve"][-1][1] == data["final_gpu_alloc_pct"]


def test_cli_plots_the_allocation_curve(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,1,500\n")
    args = ["simulate", "openb", "--nodes", str(nodes), "--pods", str(pods)]
    result = CliRunner().invoke(main, [*args, "--plot", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "plots" / "allocation.png").stat().st_size > 0


def test_cli_rejects_a_bad_trace_with_the_row_and_column(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,4,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,1,lots\n")
    result = CliRunner().invoke(
        main, ["simulate", "openb", "--nodes", str(nodes), "--pods", str(pods)]
    )
    assert result.exit_code == 1
    assert "pods.csv row 2: column 'gpu_milli' is 'lots', expected an integer" in result.output


@pytest.mark.slow
def test_reduced_fidelity_on_the_default_trace(openb_dir: Path) -> None:
    """Seeds 42..44 of the default trace: FGD and Best-fit within 0.5 points of the paper's
    10-seed means, and kgpu's default above FGD on the same seeds."""
    nodes = openb_dir / "openb_node_list_gpu_node.csv"
    pods = openb_dir / "openb_pod_list_default.csv"
    assert len(read_pods(pods)) == 8152
    means = {
        policy: statistics.fmean(
            run_openb(nodes, pods, policy, seed).result.final_alloc_pct for seed in (42, 43, 44)
        )
        for policy in ("bestfit", "fgd", "kgpu")
    }
    assert means["bestfit"] == pytest.approx(93.08, abs=0.5)
    assert means["fgd"] == pytest.approx(95.39, abs=0.5)
    assert means["kgpu"] > means["fgd"]
