"""Policies compared on traces of the openb family that are not in ../shared.

    .venv/bin/python bench/openb_family.py [--variants gpushare60,multigpu50,...]
                                           [--seeds 42-44] [--policies fgd,kgpu] [--jobs 2]

The paper's variants stress one kind of pod by resampling the default list; this builds
more of them the same way, from `openb_pod_list_default.csv` with a fixed seed (7):

- ``gpusharePP``: GPU pods drawn with replacement, shares or not, so that shares ask for
  PP% of the GPU milli (the default list: 28.5%; gpushare40 in ../shared: 40.1%);
- ``multigpuPP``: the same for pods asking for more than one GPU (default 7.3%);
- ``gpuspecPP``: PP% of the GPU pods, drawn at random, given a GPU-model list drawn from
  those of `openb_pod_list_gpuspec10.csv`;
- ``cpuonlyPP``: as many pods as the default list, drawn with replacement so that PP% of
  them ask for no GPU (the default list: 13.3%).

Except in ``cpuonlyPP``, CPU-only pods are kept as they are. Each variant is replayed as `kgpu simulate openb`
does (GPU nodes, tune 1.3). Prints per variant the mean final allocation per policy over
the seeds and, with two policies, the second's gain over the first per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from kgpu.sim.openb import TracePod, read_nodes, read_pods
from kgpu.sim.openb_run import run_trace

OPENB = Path(__file__).resolve().parents[2] / "shared" / "data" / "openb"
VARIANTS = "gpushare20,gpushare60,gpushare80,gpushare100,multigpu50,gpuspec25,gpuspec33"
BUILD_SEED = 7


def _is_share(p: TracePod) -> bool:
    return p.num_gpu == 1 and p.gpu_milli < 1000


def _is_multi(p: TracePod) -> bool:
    return p.num_gpu > 1


def resampled(
    pods: list[TracePod], kind: Callable[[TracePod], bool], part: float
) -> list[TracePod]:
    """GPU pods drawn with replacement so that pods of ``kind`` ask for ``part`` of the GPU
    milli in expectation; as many GPU pods as before, CPU-only pods kept."""
    rng = random.Random(BUILD_SEED)
    cpu_only = [p for p in pods if p.num_gpu == 0]
    gpu = [p for p in pods if p.num_gpu > 0]
    chosen, rest = [p for p in gpu if kind(p)], [p for p in gpu if not kind(p)]
    mean_chosen = statistics.fmean(p.gpu_request_milli for p in chosen)
    mean_rest = statistics.fmean(p.gpu_request_milli for p in rest) if rest else 0.0
    # The share q of drawn pods that makes q·a / (q·a + (1 − q)·b) equal to part.
    q = 1.0 if part >= 1 else part * mean_rest / (mean_chosen * (1 - part) + part * mean_rest)
    drawn = [rng.choice(chosen if rng.random() < q else rest) for _ in gpu]
    return cpu_only + [dataclasses.replace(p, name=f"{p.name}-v{i}") for i, p in enumerate(drawn)]


def with_cpu_only(pods: list[TracePod], part: float) -> list[TracePod]:
    rng = random.Random(BUILD_SEED)
    cpu_only = [p for p in pods if p.num_gpu == 0]
    gpu = [p for p in pods if p.num_gpu > 0]
    drawn = [rng.choice(cpu_only if rng.random() < part else gpu) for _ in pods]
    return [dataclasses.replace(p, name=f"{p.name}-v{i}") for i, p in enumerate(drawn)]


def with_specs(pods: list[TracePod], part: float) -> list[TracePod]:
    rng = random.Random(BUILD_SEED)
    specs = [p.gpu_spec for p in read_pods(OPENB / "openb_pod_list_gpuspec10.csv") if p.gpu_spec]
    return [
        dataclasses.replace(p, gpu_spec=rng.choice(specs))
        if p.num_gpu > 0 and rng.random() < part
        else p
        for p in pods
    ]


def variant(name: str) -> list[TracePod]:
    default = read_pods(OPENB / "openb_pod_list_default.csv")
    kind, digits = name.rstrip("0123456789"), name[len(name.rstrip("0123456789")) :]
    part = int(digits) / 100 if digits else -1.0
    if kind == "gpushare" and part >= 0:
        return resampled(default, _is_share, part)
    if kind == "multigpu" and part >= 0:
        return resampled(default, _is_multi, part)
    if kind == "gpuspec" and part >= 0:
        return with_specs(default, part)
    if kind == "cpuonly" and part >= 0:
        return with_cpu_only(default, part)
    raise SystemExit(
        f"unknown variant {name!r}: expected gpusharePP, multigpuPP, gpuspecPP or cpuonlyPP"
    )


def one(job: tuple[str, str, int]) -> tuple[str, str, int, float]:
    name, policy, seed = job
    nodes = read_nodes(OPENB / "openb_node_list_gpu_node.csv")
    return name, policy, seed, run_trace(nodes, variant(name), policy, seed).result.final_alloc_pct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=VARIANTS)
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--policies", default="fgd,kgpu")
    parser.add_argument("--jobs", type=int, default=2)
    opts = parser.parse_args()
    lo, _, hi = opts.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    names, policies = opts.variants.split(","), opts.policies.split(",")
    jobs = [(n, p, s) for n in names for p in policies for s in seeds]
    got: dict[tuple[str, str, int], float] = {}
    with ProcessPoolExecutor(max_workers=opts.jobs) as pool:
        for name, policy, seed, final in pool.map(one, jobs):
            got[(name, policy, seed)] = final
    gain = len(policies) == 2
    print(f"seeds {opts.seeds}; mean final GPU allocation, %\n")
    print("| variant | " + " | ".join(policies) + (" | gain per seed |" if gain else " |"))
    print("| --- |" + " ---: |" * len(policies) + (" --- |" if gain else ""))
    for name in names:
        cells = [f"{statistics.fmean(got[(name, p, s)] for s in seeds):.2f}" for p in policies]
        if gain:
            first, second = policies
            diffs = [got[(name, second, s)] - got[(name, first, s)] for s in seeds]
            cells.append(" / ".join(f"{d:+.2f}" for d in diffs))
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
