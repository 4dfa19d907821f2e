"""A churn replay of a slice of the openb default trace: the same seed gives the same
figures, and Best-fit's and FGD's figures stay what they were (a decision that changed
would move them)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.sim.churn_run import run_churn, sample_nodes
from kgpu.sim.churn_trace import read_timed_pods
from kgpu.sim.openb import read_nodes

SLICE_PODS = 800
NODE_SHARE = 0.005  # 6 of the 1,213 GPU nodes: the slice's pods contend for them


@pytest.fixture(scope="module")
def slice_csv(openb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default list's first SLICE_PODS rows (its own order, whatever their times)."""
    path = tmp_path_factory.mktemp("churn") / "default_slice.csv"
    with (openb_dir / "openb_pod_list_default.csv").open() as f:
        path.write_text("".join(itertools.islice(f, SLICE_PODS + 1)))
    return path


def _figures(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "elapsed_s"}


EXPECTED = {
    "bestfit": {
        "placed_at_arrival": 230,
        "placed_after_waiting": 93,
        "withdrawn_while_waiting": 477,
        "waiting_at_end": 0,
        "time_avg_gpu_alloc_pct": 35.0495,
        "time_avg_gpu_asked_pct": 35.601,
        "time_avg_frag_gpu_pct": 8.3286,
        "pending_p50_s": 194.5,
        "pending_p99_s": 17484.64,
    },
    "fgd": {
        "placed_at_arrival": 647,
        "placed_after_waiting": 55,
        "withdrawn_while_waiting": 98,
        "waiting_at_end": 0,
        "time_avg_gpu_alloc_pct": 32.6633,
        "time_avg_gpu_asked_pct": 35.601,
        "time_avg_frag_gpu_pct": 7.8075,
        "pending_p50_s": 0.0,
        "pending_p99_s": 4857.51,
    },
}


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_the_slice_replays_to_the_recorded_figures(
    openb_dir: Path, slice_csv: Path, policy: str
) -> None:
    nodes = read_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    run = run_churn(nodes, read_timed_pods(slice_csv), policy, 42, NODE_SHARE)
    summary = run.summary()
    assert (summary["nodes"], summary["total_gpus"], summary["pods"]) == (6, 30, SLICE_PODS)
    assert {k: summary[k] for k in EXPECTED[policy]} == EXPECTED[policy]


def test_the_same_seed_gives_the_same_figures_and_series(
    openb_dir: Path, slice_csv: Path, tmp_path: Path
) -> None:
    nodes = openb_dir / "openb_node_list_gpu_node.csv"
    outputs = []
    for k in range(2):
        out = tmp_path / f"run{k}.json"
        args = ["simulate", "openb", "--churn", "--nodes", str(nodes), "--pods", str(slice_csv)]
        args += ["--policy", "bestfit,fgd,kgpu", "--node-share", str(NODE_SHARE)]
        result = CliRunner().invoke(main, [*args, "--json", str(out)])
        assert result.exit_code == 0, result.output
        outputs.append([_figures(r) for r in json.loads(out.read_text())["runs"]])
    assert outputs[0] == outputs[1]
    assert [r["policy"] for r in outputs[0]] == ["bestfit", "fgd", "kgpu"]


def test_the_node_sample_is_fixed_by_the_seed(openb_dir: Path) -> None:
    nodes = read_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    names = [[n.name for n in sample_nodes(nodes, NODE_SHARE, seed)] for seed in (42, 42, 43)]
    assert names[0] == names[1] != names[2]
    assert len(names[0]) == 6
