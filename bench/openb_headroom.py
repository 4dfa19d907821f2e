"""What better pairing of shares could still win over a policy on the openb traces.

    .venv/bin/python bench/openb_headroom.py [--traces default,...] [--seeds 42-44] [--policy kgpu]

Replays each trace under the policy, then packs the shares it placed (pods taking part of
one GPU) again, offline, by best-fit decreasing: largest first, each into the GPU it
leaves least free, knowing every share in advance and ignoring CPU, GPU models and the
order of arrival. Prints per trace and seed the final allocation, the GPUs holding shares
in the replay and in that packing, and the GPUs the packing frees as points of capacity:
at the end of a replay whole-GPU pods are waiting, so that is about what the policy would
gain were its shares paired perfectly.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
from collections.abc import Iterable
from pathlib import Path

from kgpu.model.units import MILLI_PER_GPU
from kgpu.sim.openb_run import run_openb
from kgpu.state.cluster import ClusterState

OPENB = Path(__file__).resolve().parents[2] / "shared" / "data" / "openb"
TRACES = ("default", "gpushare40", "multigpu30", "gpuspec10", "cpu100")


def shares_placed(state: ClusterState) -> tuple[list[int], int]:
    """The milli of every share the state holds, and how many GPUs hold them."""
    milli: list[int] = []
    gpus: set[tuple[int, int]] = set()
    for alloc in state.allocations.values():
        if len(alloc.gpus) == 1 and 0 < alloc.gpu_milli < MILLI_PER_GPU:
            milli.append(alloc.gpu_milli)
            gpus.add((alloc.node, alloc.gpus[0]))
    return milli, len(gpus)


def best_fit_decreasing(milli: Iterable[int]) -> int:
    """GPUs that best-fit decreasing needs for these shares."""
    free: list[int] = []  # free milli of the GPUs opened so far, ascending
    for share in sorted(milli, reverse=True):
        i = bisect.bisect_left(free, share)
        left = free.pop(i) - share if i < len(free) else MILLI_PER_GPU - share
        bisect.insort(free, left)
    return len(free)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--policy", default="kgpu")
    opts = parser.parse_args()
    lo, _, hi = opts.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    print(f"policy {opts.policy}; shares packed again offline by best-fit decreasing\n")
    print("| trace | seed | final alloc % | GPUs with shares | packed offline | freed, points |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    freed_by_trace: dict[str, list[float]] = {}
    for trace in opts.traces.split(","):
        for seed in seeds:
            run = run_openb(
                OPENB / "openb_node_list_gpu_node.csv",
                OPENB / f"openb_pod_list_{trace}.csv",
                opts.policy,
                seed,
            )
            milli, held = shares_placed(run.state)
            packed = best_fit_decreasing(milli)
            freed = 100.0 * (held - packed) * MILLI_PER_GPU / run.state.total_gpu_milli
            freed_by_trace.setdefault(trace, []).append(freed)
            final = run.result.final_alloc_pct
            print(f"| {trace} | {seed} | {final:.2f} | {held} | {packed} | {freed:.2f} |")
    means = [statistics.fmean(v) for v in freed_by_trace.values()]
    print(f"\nmean freed over traces: {statistics.fmean(means):.2f} points")


if __name__ == "__main__":
    main()
