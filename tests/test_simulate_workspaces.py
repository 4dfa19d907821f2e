"""``kgpu simulate workspaces``: Workspaces replayed against Node manifests, in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.framework.group_scheduler import DENIAL
from kgpu.sim.workspaces import WorkspaceOutcome, simulate_workspaces
from tests.workspace_fixtures import k8s_gpu_node, k8s_workspace

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "workspaces"


def write(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


def test_the_example_replays_in_order() -> None:
    run = simulate_workspaces(EXAMPLES / "nodes.yaml", EXAMPLES / "workspaces.yaml")
    assert [(r.workspace, r.outcome, r.nodes) for r in run.results] == [
        ("default/phi-4-mini", WorkspaceOutcome.PLACED, ("a100-40g-1", "a100-40g-2")),
        ("default/mistral", WorkspaceOutcome.PLACED, ("a10-1",)),
        # The two nodes phi-4-mini took are busy now: three replicas fit nowhere.
        ("default/phi-3-medium", WorkspaceOutcome.DENIED, ()),
        ("default/big-model", WorkspaceOutcome.PLACED, ("a100-80g-1",)),
        ("default/qwen-nap", WorkspaceOutcome.PROVISION, ()),
        ("default/wrong-team", WorkspaceOutcome.DENIED, ()),
    ]
    denied = run.results[2]
    assert denied.message.startswith(DENIAL)
    assert denied.reasons[0] == (
        "{NVIDIA-A10, 1, 24576} (1 node): NodeResourceFilter: node(s) had GPUs held by other pods"
    )
    assert run.results[4].provision == 2
    assert run.groups[0] == ("{NVIDIA-A10, 1, 24576}", 1)


def test_bound_pods_hold_gpus_and_a_directory_reads_like_kubectl(tmp_path: Path) -> None:
    nodes = tmp_path / "cluster"
    nodes.mkdir()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "nodeName": "a",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    write(
        nodes / "nodes.yaml",
        {
            "kind": "NodeList",
            "apiVersion": "v1",
            "items": [
                {k: v for k, v in k8s_gpu_node(n, "L4", 1, 23034).items() if k != "kind"}
                for n in ("a", "b")
            ],
        },
    )
    write(nodes / "pods.yaml", pod)
    workspaces = write(
        tmp_path / "ws.yaml", k8s_workspace(replicas=1), k8s_workspace("w2", replicas=1)
    )
    run = simulate_workspaces(nodes, workspaces)
    assert [(r.outcome, r.nodes) for r in run.results] == [
        (WorkspaceOutcome.PLACED, ("b",)),  # "a" runs the training pod
        (WorkspaceOutcome.DENIED, ()),
    ]


def test_a_malformed_workspace_is_denied_and_the_rest_run(tmp_path: Path) -> None:
    nodes = write(tmp_path / "n.yaml", k8s_gpu_node("a", "A10", 1, 24576))
    bad = k8s_workspace("bad", preset="gpt-9")
    workspaces = write(
        tmp_path / "w.yaml", bad, k8s_workspace("good", replicas=1), {"kind": "Service"}
    )
    run = simulate_workspaces(nodes, workspaces)
    assert [r.outcome for r in run.results] == [WorkspaceOutcome.DENIED, WorkspaceOutcome.PLACED]
    assert 'inference.preset.name is "gpt-9"' in run.results[0].message
    assert run.notes == ["w.yaml#3: Service skipped"]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, ["simulate", "workspaces", *args], env={"COLUMNS": "300"})


def test_cli_prints_each_workspace_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = invoke(
        "--nodes",
        str(EXAMPLES / "nodes.yaml"),
        "--workspaces",
        str(EXAMPLES / "workspaces.yaml"),
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == "default/phi-4-mini: Placed on a100-40g-1,a100-40g-2"
    assert lines[2] == (
        "    node group {NVIDIA-A100-SXM4-40GB, 4, 40960}: 2 replica(s) x 1 node each = "
        "2 node(s), 2 eligible"
    )
    assert "default/phi-3-medium: Denied" in lines
    assert f"    {DENIAL}" in lines
    assert "profile=byo workspaces=6 placed=4 denied=2" in lines
    data = json.loads(out.read_text())
    assert data["workspaces"][0]["group"] == "{NVIDIA-A100-SXM4-40GB, 4, 40960}"


def test_cli_reports_unreadable_input_as_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    result = invoke("--nodes", str(broken), "--workspaces", str(EXAMPLES / "workspaces.yaml"))
    assert result.exit_code == 1
    assert "broken.yaml" in result.output
    result = invoke(
        "--nodes",
        str(EXAMPLES),
        "--workspaces",
        str(EXAMPLES / "workspaces.yaml"),
        "--profile",
        "x",
    )
    assert result.exit_code == 1 and "unknown node-group profile 'x'" in result.output
