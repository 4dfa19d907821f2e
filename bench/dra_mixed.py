"""A session over a cluster with DRA: the per-shape cache on, and off as it was before.

    .venv/bin/python bench/dra_mixed.py [--nodes 1000] [--pods 3000] [--claims 0.2]
                                        [--repeats 3] [--seed 1]

Every node publishes 8 GPUs through a ResourceSlice (NVIDIA's driver's shape; H100 on
half the nodes, A100 on the others). The pending pods are a mix: most ask CPU and memory
only, in a few shapes (what the shape cache serves), and a fraction ``--claims`` name a
claim made from a template (one GPU of any product, or two H100s), competing for the same
devices. One session (enqueue, allocate; two queues, one with a GPU limit) places them,
with the scheduler ``dra_scheduler`` builds ("cached") and with the same scheduler keeping
no verdict per shape, as ``dra_scheduler`` made it before ("uncached"). The two run in
turn, ``--repeats`` times each, on fresh copies of the cluster (this host's wall time is
noisy: compare the medians, or count instructions under callgrind); building the cluster
is not timed. Prints pods/s per run and the medians, and checks that both made the same
decisions.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from kgpu import core_build
from kgpu.actions.dra_scheduler import dra_scheduler
from kgpu.actions.session_runner import SessionConfig, run_session
from kgpu.config import load_profile
from kgpu.dra.inventory import DraInventory
from kgpu.framework.session_snapshot import Snapshot
from kgpu.kube.objects.dra_claim_objects import resource_claim_template_from_k8s
from kgpu.kube.objects.dra_objects import device_class_from_k8s, resource_slice_from_k8s
from kgpu.model.dra import PodClaim
from kgpu.model.job import JobKey, Task
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.queue import QueueSpec
from kgpu.plugins.registry import PluginContext
from kgpu.state.cluster import ClusterState

API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
NS = "bench"
SHAPES = [(500, 1024), (1000, 2048), (2000, 4096), (4000, 8192)]  # CPU milli, memory MiB


def _device(index: int, product: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": index},
            "productName": {"string": product},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def _slice(node: str, product: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [_device(i, product) for i in range(8)],
        },
    }


def _template(name: str, count: int, selector: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": exactly}]}}},
    }


def build(nodes: int, pods: int, claims: float, seed: int) -> tuple[Snapshot, DraInventory]:
    rng = np.random.default_rng(seed)
    names = [f"node-{i:05d}" for i in range(nodes)]
    infos = [
        NodeInfo(NodeName(name), cpu_milli=64_000, memory_mib=512 * 1024, max_pods=110)
        for name in names
    ]
    gpu_class = {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }
    h100 = f"device.attributes['{DRIVER}'].productName == '{H100}'"
    inv = DraInventory.build(
        [device_class_from_k8s(gpu_class)],
        [resource_slice_from_k8s(_slice(n, H100 if i % 2 else A100)) for i, n in enumerate(names)],
        [],
        [
            resource_claim_template_from_k8s(_template("one", 1)),
            resource_claim_template_from_k8s(_template("two-h100", 2, h100)),
        ],
    )
    tasks = []
    for i in range(pods):
        cpu, memory = SHAPES[int(rng.integers(len(SHAPES)))]
        queue = "limited" if i % 2 else "open"
        key = PodKey(f"{NS}/p-{i:06d}")
        pod = PodSpec(key, cpu_milli=cpu, memory_mib=memory, queue=queue)
        if rng.random() < claims:
            template = "two-h100" if rng.random() < 0.3 else "one"
            inv.set_pod_claims(pod.key, [PodClaim("gpus", template_name=template)])
        tasks.append(Task(pod, JobKey("")))
    queues = [
        QueueSpec("limited", deserved={"gpu": nodes * 2000}, limit={"gpu": nodes * 3000}),
        QueueSpec("open", deserved={"gpu": nodes * 6000}),
    ]
    return Snapshot(ClusterState(infos), queues, (), tasks, dra=inv), inv


def once(args: argparse.Namespace, cached: bool) -> tuple[float, list[Any]]:
    snapshot, inv = build(args.nodes, args.pods, args.claims, args.seed)
    profile = load_profile(args.policy)
    scheduler = dra_scheduler(profile, PluginContext(dra=inv))
    scheduler.use_cache = cached
    config = SessionConfig(actions=("enqueue", "allocate"))
    start = time.perf_counter()
    result = run_session(snapshot, scheduler, config)
    wall = time.perf_counter() - start
    decided = [(b.pod, b.node) for b in result.binds]
    return wall, decided


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--claims", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policy", default="kgpu")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"kgpu scheduling core: {core_build()}")
    print(
        f"{args.nodes:,} nodes × 8 DRA GPUs, {args.pods:,} pending pods, "
        f"{args.claims:.0%} with claims, policy {args.policy}"
    )
    walls: dict[bool, list[float]] = {True: [], False: []}
    seen: dict[bool, list[Any]] = {}
    for _ in range(args.repeats):
        for cached in (False, True):  # in turn, so the host's slow phases hit both
            wall, decided = once(args, cached)
            walls[cached].append(wall)
            seen[cached] = decided
            label = "cached" if cached else "uncached"
            print(
                f"{label:<9} {wall:7.2f} s  {args.pods / wall:9,.0f} pods/s  {len(decided):,} placed"
            )
    for cached in (False, True):
        median = statistics.median(walls[cached])
        label = "cached" if cached else "uncached"
        print(f"median {label:<9} {median:7.2f} s  {args.pods / median:9,.0f} pods/s")
    print("same decisions:", seen[True] == seen[False])


if __name__ == "__main__":
    main()
