"""``kgpu simulate autoscale``: the provisioner model, the scenario and the command."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from kgpu.autoscale.planner import PlannerConfig, plan
from kgpu.cli import main
from kgpu.kube.anchors.karpenter import NodePoolError
from kgpu.model.nodepool import CATALOGUE, NodePool
from kgpu.sim.autoscale_run import (
    default_pools,
    full_cluster_scenario,
    load_nodepools,
    simulate_autoscale,
)
from kgpu.sim.provisioner import LaunchTimes, Provisioner, SimTrigger
from tests.test_autoscale_planner import A100, GPU_TAINT, POOLS, gpu_pod, pending

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "autoscale" / "nodepool-l4.yaml"


def test_the_full_cluster_scenario_ends_on_eight_8_gpu_nodes() -> None:
    # 40 x 0.5 GPU pack into 20 GPUs, 10 x 4 GPUs are 40: 60 GPUs, which 8-GPU nodes hold
    # in no fewer than 8 (64 GPUs, 4 idle on the node of the last halves).
    pools = default_pools()
    nodes, running, arrivals = full_cluster_scenario(pools)
    run = simulate_autoscale(nodes, running, arrivals, pools)
    assert (len(run.nodes), run.new_gpus, run.new_gpu_milli_used) == (8, 64, 60_000)
    assert {n.instance_type for n in run.nodes} == {"p4de.24xlarge"}
    assert (run.placed, run.triggers_created, run.claims_launched) == (50, 8, 8)
    # Each pod waited the controller's batch (1 s), Karpenter's (1 s) and the launch (105 s).
    assert run.waits() == [107.0] * 50
    assert all(ok for _, ok, _, _ in run.outcomes)


def test_a_pool_with_a_smaller_type_ends_on_exactly_60_gpus() -> None:
    pools = load_nodepools(EXAMPLE)
    nodes, running, arrivals = full_cluster_scenario(pools)
    run = simulate_autoscale(nodes, running, arrivals, pools)
    types = sorted(n.instance_type for n in run.nodes)
    assert types == ["g6.12xlarge"] + ["g6.48xlarge"] * 7
    assert (run.new_gpus, run.new_gpu_milli_used, run.placed) == (60, 60_000, 50)


def test_pods_arriving_one_by_one_still_share_nodes() -> None:
    pools = default_pools()
    nodes, running, arrivals = full_cluster_scenario(pools)
    trickle = [replace(a, at=i * 0.5) for i, a in enumerate(arrivals)]
    run = simulate_autoscale(nodes, running, trickle, pools)
    assert (len(run.nodes), run.placed) == (8, 50)
    waits = run.waits()
    assert min(waits) >= 100 and max(waits) <= 120


def test_a_failed_launch_is_retried_after_backoff_and_every_pod_runs() -> None:
    pools = default_pools()
    nodes, running, arrivals = full_cluster_scenario(pools)
    run = simulate_autoscale(nodes, running, arrivals, pools, fail_first=1)
    failed = [o for o in run.outcomes if not o[1]]
    assert len(failed) == 1 and failed[0][3].startswith("NodeClaim gpu-a100-nc1: Insufficient")
    assert run.placed == 50 and run.claims_launched == 9
    # The retry waits 30 s of back-off, then a launch: its pods wait longest.
    assert max(run.waits()) > 107 + 30


def test_a_pool_limit_stops_launches_and_the_rest_stays_pending() -> None:
    capped = (replace(default_pools()[0], gpu_limit=40),)
    nodes, running, arrivals = full_cluster_scenario(capped)
    run = simulate_autoscale(nodes, running, arrivals, capped, horizon_s=1800)
    assert (len(run.nodes), run.new_gpus) == (5, 40)
    assert 0 < run.placed < 50
    assert any(not ok and "no node was ready after 600s" in why for _, ok, _, why in run.outcomes)


def test_karpenter_counts_in_flight_room_before_launching_again() -> None:
    prov = Provisioner(POOLS.pools, LaunchTimes.until_ready(100), reaction_s=0)
    [four] = plan(pending(gpu_pod("a").gpus(4, A100)), POOLS).triggers
    [one] = plan(pending(gpu_pod("b").gpus(1, A100)), POOLS).triggers
    triggers = {four.name: SimTrigger(four, 0.0)}
    prov.step(0.0, triggers)
    triggers[one.name] = SimTrigger(one, 10.0)
    prov.step(10.0, triggers)
    assert prov.launched == 1 and triggers[one.name].claim == triggers[four.name].claim
    [claim] = prov.observed(50.0)
    assert claim.conditions == {
        "Launched": "True",
        "Registered": "Unknown",
        "Initialized": "Unknown",
        "Ready": "Unknown",
    }
    joined = prov.step(100.0, triggers)
    assert [n.gpu_count for n in joined] == [8]
    assert triggers[one.name].node == triggers[four.name].node == joined[0].name
    assert joined[0].labels["karpenter.sh/nodepool"] == "gpu-a100"


def test_generic_triggers_go_to_a_pool_with_their_model() -> None:
    pools = (NodePool("any-a100", (CATALOGUE["p4de.24xlarge"],), taints=(GPU_TAINT,)),)
    [spec] = plan(pending(gpu_pod("a").gpus(2, A100)), PlannerConfig()).triggers
    prov = Provisioner(pools, reaction_s=0)
    triggers = {spec.name: SimTrigger(spec, 0.0)}
    prov.step(0.0, triggers)
    assert prov.launched == 1


def test_the_command_prints_each_wait_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        main, ["simulate", "autoscale", "--nodepool", str(EXAMPLE), "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "default/quad-09" in result.output
    assert "new_nodes=8 (g6.12xlarge, g6.48xlarge) new_gpus=60" in result.output
    data = json.loads(out.read_text())
    assert len(data["pods"]) == 50 and all(p["waited"] == 107.0 for p in data["pods"])
    assert data["new_gpus"] == 60


def test_the_command_says_what_is_wrong_with_a_nodepool_file(tmp_path: Path) -> None:
    bad = tmp_path / "pool.yaml"
    bad.write_text("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: p}\nspec: {}\n")
    result = CliRunner().invoke(main, ["simulate", "autoscale", "--nodepool", str(bad)])
    assert result.exit_code == 1
    assert "NodePool p: spec.template.spec.requirements has no" in result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Pod\n", r"no NodePool \(karpenter.sh/v1\) among the documents"),
        (
            "kind: NodePool\nmetadata: {name: p}\nspec: {template: {spec: {requirements: "
            "[{key: node.kubernetes.io/instance-type, operator: In, values: [x9]}]}}}\n",
            "NodePool p: instance type 'x9' is unknown",
        ),
        (
            "kind: InstanceType\nmetadata: {name: x9}\nspec: {gpus: 8, cpu: '4', memory: 1Gi}\n",
            "InstanceType x9: expected spec.gpuProduct when spec.gpus > 0",
        ),
    ],
)
def test_nodepool_files_are_checked(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    with pytest.raises(NodePoolError, match=message):
        load_nodepools(path)
