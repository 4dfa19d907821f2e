"""Defragmentation in the churn replay: a small deterministic trace where a move places a
pod that otherwise waits, and what `kgpu simulate openb --churn --defrag` reports."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kgpu.cli import main
from kgpu.sim.churn import Outcome
from kgpu.sim.churn_run import ChurnRun, run_churn
from kgpu.sim.churn_trace import read_timed_pods
from kgpu.sim.openb import read_nodes

HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time"
)


def _files(tmp_path: Path, y_arrives: int = 1000) -> tuple[Path, Path]:
    """Two nodes of one GPU. At 0: big (600) takes one, x (500, best-effort) the other, w
    (400) fills the first. At 50 big leaves: 600 and 500 milli idle, no whole GPU. y
    (1 GPU) comes at ``y_arrives``; x is deleted at 5,000."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,1,T4\nn1,64000,262144,1,T4\n"
    )
    pods = tmp_path / "pods.csv"
    rows = [
        "big,1000,1024,1,600,,LS,Running,0,50",
        "x,1000,1024,1,500,,BE,Running,0,5000",
        "w,1000,1024,1,400,,LS,Running,0,9000",
        f"y,1000,1024,1,1000,,LS,Running,{y_arrives},9000",
    ]
    pods.write_text("\n".join([HEADER, *rows]) + "\n")
    return nodes, pods


def _run(tmp_path: Path, defrag: bool, y_arrives: int = 1000) -> ChurnRun:
    nodes, pods = _files(tmp_path, y_arrives)
    return run_churn(read_nodes(nodes), read_timed_pods(pods), "bestfit", 42, defrag=defrag)


def test_a_move_places_the_pod_that_otherwise_waits(tmp_path: Path) -> None:
    off = _run(tmp_path, defrag=False)
    assert off.result.defrag is None
    assert off.result.outcome.tolist()[3] == Outcome.PLACED_LATE
    assert off.result.waited_s.tolist()[3] == 4000  # until x is deleted
    on = _run(tmp_path, defrag=True)
    r = on.result
    assert r.outcome.tolist()[3] == Outcome.PLACED and r.waited_s.tolist()[3] == 0
    # x moved onto w's GPU, y took x's.
    assert r.nodes.tolist()[1] == r.nodes.tolist()[2] != r.nodes.tolist()[3]
    assert r.time_avg_alloc_pct > off.result.time_avg_alloc_pct
    summary = on.summary()
    assert {k: v for k, v in summary.items() if k.startswith("defrag_")} == {
        "defrag_rounds": 1,
        "defrag_moves": 1,
        "defrag_moved_pods": 1,
        "defrag_moved_pods_pct": 25.0,
        "defrag_placed": 1,
        "defrag_move_cost_gpu_h": round(300 * 0.5 / 3600, 3),
    }
    assert _run(tmp_path, defrag=True).summary() | {"elapsed_s": 0} == summary | {"elapsed_s": 0}


def test_a_pod_younger_than_the_min_runtime_is_not_moved(tmp_path: Path) -> None:
    run = _run(tmp_path, defrag=True, y_arrives=300)  # x has run 300 s of its 600
    assert run.result.waited_s.tolist()[3] == 4700
    assert run.summary()["defrag_moves"] == 0


def test_the_cli_switch_reports_moves_and_their_cost(tmp_path: Path) -> None:
    nodes, pods = _files(tmp_path)
    out = tmp_path / "out.json"
    base = ["simulate", "openb", "--nodes", str(nodes), "--pods", str(pods)]
    result = CliRunner().invoke(
        main, [*base, "--churn", "--defrag", "--policy", "bestfit", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "moves=1 moved_pods=1 placed_by_moves=1 move_cost=0.042GPUh" in result.output
    (run,) = json.loads(out.read_text())["runs"]
    assert run["defrag_moves"] == 1
    (move,) = run["defrag_moves_log"]
    assert (move["time_s"], move["pod"], move["for_pod"]) == (1000, "openb/x", "openb/y")
    assert move["reason"].startswith("moves pod openb/x off node n")
    assert "ran 16m40s >= min-runtime 10m" in move["reason"]
    refused = CliRunner().invoke(main, [*base, "--defrag"])
    assert refused.exit_code != 0 and "applies to --churn only" in refused.output
