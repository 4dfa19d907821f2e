"""``kgpu run`` as a command: its options, and clear failures before anything connects."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.kube.live import scheduler_process
from kgpu.kube.live.scheduler_process import RunOptions


def test_run_offers_the_options_of_a_scheduler() -> None:
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0
    for option in (
        "--kubeconfig",
        "--scheduler-name",
        "--policy",
        "--metrics-port",
        "--leader-elect / --no-leader-elect",
        "--namespace-for-lease",
    ):
        assert option in result.output


def test_run_refuses_an_unknown_policy(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\n")
    result = CliRunner().invoke(main, ["run", "--kubeconfig", str(config), "--policy", "nope"])
    assert result.exit_code != 0
    assert "unknown policy 'nope'" in result.output


def test_run_refuses_an_unusable_kubeconfig(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    result = CliRunner().invoke(main, ["run", "--kubeconfig", str(config), "--metrics-port", "0"])
    assert result.exit_code == 1
    assert f"cannot use kubeconfig {config}" in result.output


def test_run_offers_autoscaling() -> None:
    result = CliRunner().invoke(main, ["run", "--help"])
    assert result.exit_code == 0
    for option in (
        "--autoscale / --no-autoscale",
        "--nodepool",
        "--gpu-memory-to-fraction-ratio",
        "--trigger-namespace",
    ):
        assert option in result.output


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[RunOptions]:
    """The options each `kgpu run` would start a scheduler with; it stops right there."""
    started: list[RunOptions] = []

    class Captured:
        def __init__(self, options: RunOptions) -> None:
            started.append(options)
            raise OSError("stopped here")

    monkeypatch.setattr(scheduler_process, "RunningScheduler", Captured)
    return started


def test_run_with_autoscale_passes_the_nodepools_on(seen: list[RunOptions]) -> None:
    nodepool = Path(__file__).parent.parent / "examples" / "autoscale" / "nodepool-l4.yaml"
    args = ["run", "--autoscale", "--nodepool", str(nodepool), "--trigger-namespace", "scale"]
    result = CliRunner().invoke(main, [*args, "--gpu-memory-to-fraction-ratio", "0.25"])
    assert result.exit_code == 1 and "stopped here" in result.output
    [options] = seen
    assert options.autoscale is not None
    planner = options.autoscale.controller.planner
    assert [p.name for p in planner.pools] == ["gpu-l4", "gpu-h200"]
    assert planner.gpu_memory_to_fraction_ratio == 0.25
    assert options.autoscale.pods.namespace == "scale"

    seen.clear()
    assert CliRunner().invoke(main, ["run"]).exit_code == 1
    assert seen[0].autoscale is None  # off by default


def test_run_refuses_a_nodepool_it_cannot_use(tmp_path: Path) -> None:
    bad = tmp_path / "pool.yaml"
    bad.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\n")
    result = CliRunner().invoke(main, ["run", "--autoscale", "--nodepool", str(bad)])
    assert result.exit_code == 1
    assert "NodePool p" in result.output
    result = CliRunner().invoke(main, ["run", "--nodepool", str(bad)])
    assert result.exit_code == 2 and "--nodepool goes with --autoscale" in result.output


def test_run_starts_the_workspace_controller_unless_told_not_to(seen: list[RunOptions]) -> None:
    assert CliRunner().invoke(main, ["run"]).exit_code == 1
    assert seen[-1].workspaces is not None and seen[-1].workspaces.profile == "byo"
    assert CliRunner().invoke(main, ["run", "--no-workspaces"]).exit_code == 1
    assert seen[-1].workspaces is None


def test_webhook_refuses_a_kubeconfig_it_cannot_read_nodes_with(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    result = CliRunner().invoke(main, ["webhook", "--kubeconfig", str(config), "--port", "0"])
    assert result.exit_code == 1
    assert f"cannot use kubeconfig {config}" in result.output
    assert "(needed to place Workspaces)" in result.output
