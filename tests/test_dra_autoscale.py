"""Pending DRA GPU demand becomes trigger pods and NodeClaims as other GPU demand does
(Karpenter cannot see it: kubernetes-sigs/karpenter#1231)."""

from __future__ import annotations

from click.testing import CliRunner

from kgpu.autoscale.demand import UnplacedPod, with_dra_demand
from kgpu.autoscale.planner import PlannerConfig, plan
from kgpu.cli import main
from kgpu.dra.gpu_count import DraGpus
from kgpu.model.gpu import NO_GPU, gpu_share, whole_gpus
from kgpu.model.pod import PodKey, PodSpec
from kgpu.sim.autoscale_dra import dra_cluster_scenario
from kgpu.sim.autoscale_run import Arrival, default_pools, simulate_autoscale
from tests.dra_fixtures import H100, claim, exactly, gpu, inventory, mig, slice_, wants

PINNED = f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"


def _pending(name: str) -> UnplacedPod:
    return UnplacedPod(PodSpec(PodKey(f"ml/{name}"), 1000, 1024))


def test_gpu_claims_become_whole_gpus_of_the_pinned_product() -> None:
    inv = inventory(
        [slice_("n0", gpu(0))],
        [
            claim("four", [{"name": "g", "exactly": exactly("gpu.nvidia.com", PINNED, count=4)}]),
            claim("any", [{"name": "g", "exactly": exactly("gpu.nvidia.com")}]),
            claim(
                "part",
                [
                    {
                        "name": "m",
                        "exactly": exactly(
                            "mig.nvidia.com",
                            "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'",
                        ),
                    }
                ],
            ),
            claim("nic", [{"name": "n", "exactly": exactly("rdma.example.com")}]),
        ],
    )
    for pod, name in (("a", "four"), ("b", "any"), ("c", "part"), ("d", "nic")):
        wants(inv, pod, name)
    counter = DraGpus(inv)
    assert with_dra_demand(_pending("a"), counter).pod.gpu == whole_gpus(
        4, ("NVIDIA-H100-80GB-HBM3",)
    )
    assert with_dra_demand(_pending("b"), counter).pod.gpu == whole_gpus(1)
    assert with_dra_demand(_pending("c"), counter).pod.gpu == gpu_share(429)
    assert with_dra_demand(_pending("d"), counter).pod.gpu == NO_GPU  # not a GPU
    assert with_dra_demand(_pending("none"), counter).pod.gpu == NO_GPU  # no claims


def test_allocated_claims_are_no_demand() -> None:
    inv = inventory(
        [slice_("n0", gpu(0), mig(1, 0))],
        [claim("any", [{"name": "g", "exactly": exactly("gpu.nvidia.com")}])],
    )
    wants(inv, "a", "any")
    inv.record("ml/a", "n0", {})
    assert with_dra_demand(_pending("a"), DraGpus(inv)).pod.gpu == NO_GPU


def test_the_planner_makes_triggers_for_dra_demand_in_the_pool() -> None:
    pools = default_pools()
    _, _, arriving, inv = dra_cluster_scenario(pools)
    counter = DraGpus(inv)
    demand = [with_dra_demand(UnplacedPod(p), counter) for p in arriving]
    planned = plan(demand, PlannerConfig(pools=pools))
    assert planned.unplannable == []
    # 10 x 4 GPUs and 8 x 1 GPU: 48 GPUs, six 8-GPU nodes of the pool.
    assert sum(t.gpus for t in planned.triggers) == 48
    assert len(planned.triggers) == 6
    assert {t.group.target.pool for t in planned.triggers} == {"gpu-a100"}


def test_simulate_autoscale_places_dra_pods_on_nodes_launched_for_them() -> None:
    pools = default_pools()
    nodes, running, arriving, inv = dra_cluster_scenario(pools)
    run = simulate_autoscale(
        nodes, running, [Arrival(0.0, UnplacedPod(p)) for p in arriving], pools, dra=inv
    )
    assert run.placed == len(arriving) == 18
    assert run.triggers_created == 6
    assert run.claims_launched == 6
    assert run.new_gpus == 48
    assert run.new_gpu_milli_used == 48_000
    # Every pod got distinct devices, on the node it was placed on.
    taken = [r.id for c in inv.claims.values() if c.allocation for r in c.allocation.results]
    assert len(taken) == len(set(taken)) == 2 * 8 + 48
    for wait in run.pods:
        (key,) = inv.claim_keys(wait.pod)
        allocation = inv.claims[key].allocation
        assert allocation is not None and allocation.node_name == wait.node
    assert {p.gpus for p in run.pods} == {"4", "1"}


def test_without_kgpu_the_dra_pods_would_show_no_gpu_demand() -> None:
    pools = default_pools()
    _, _, arriving, _ = dra_cluster_scenario(pools)
    planned = plan([UnplacedPod(p) for p in arriving], PlannerConfig(pools=pools))
    assert planned.triggers == []


def test_the_command_runs_the_dra_scenario() -> None:
    result = CliRunner().invoke(main, ["simulate", "autoscale", "--dra"])
    assert result.exit_code == 0, result.output
    assert "pods=18 placed=18 new_nodes=6" in result.output
    assert "triggers=6 nodeclaims=6" in result.output
