"""``kgpu demo`` on a small synthetic cluster: table, plot and JSON."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.config import POLICIES
from kgpu.sim.openb_run import run_trace
from kgpu.sim.synthetic import synthetic_nodes, synthetic_pods

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_demo_prints_every_policy_and_writes_plot_and_json(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = CliRunner().invoke(
        main, ["demo", "--out", str(out), "--nodes", "40", "--pods", "200", "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│")]
    assert sorted(row.split("│")[1].strip() for row in rows) == sorted(POLICIES)
    assert (out / "allocation.png").read_bytes()[:8] == PNG_MAGIC
    data = json.loads((out / "results.json").read_text())
    assert set(data) == {"cluster", "workload", "runs"}
    assert data["cluster"]["nodes"] == 40
    assert data["workload"] == {"pods": 200, "seed": 3, "tune": 1.3}
    assert [r["policy"] for r in data["runs"]] == list(POLICIES)
    for run in data["runs"]:
        assert 0 < run["final_gpu_alloc_pct"] <= 100
        assert run["curve"]


def test_demo_runs_the_chosen_policies_only(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "demo",
            "--out",
            str(tmp_path),
            "--nodes",
            "20",
            "--pods",
            "50",
            "--policies",
            "fgd,random",
        ],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert [r["policy"] for r in runs] == ["fgd", "random"]


def test_demo_refuses_an_unknown_policy_before_replaying(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--out", str(tmp_path), "--policies", "nope"])
    assert result.exit_code != 0
    assert "unknown policy 'nope'" in result.output
    assert not (tmp_path / "results.json").exists()


@pytest.mark.slow
def test_kgpu_beats_fgd_on_the_demo_workload_where_memory_binds() -> None:
    """The demo's cluster at its default size, seeds 1..6. Small GPU nodes there run out of
    memory before CPU (GPU-less pods ask for up to 8 GiB a core): counting CPU alone, kgpu
    averaged 0.04 points below FGD on these seeds; counting memory too, it is ahead."""
    nodes_and_pods = [
        (synthetic_nodes(400, seed), synthetic_pods(2000, seed), seed) for seed in range(1, 7)
    ]
    means = {
        policy: statistics.fmean(
            run_trace(nodes, pods, policy, seed).result.final_alloc_pct
            for nodes, pods, seed in nodes_and_pods
        )
        for policy in ("fgd", "kgpu")
    }
    assert means["kgpu"] > means["fgd"] + 0.2
