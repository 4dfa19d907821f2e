"""``kgpu run`` as a command: its options, and clear failures before anything connects."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kgpu.cli import main


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
