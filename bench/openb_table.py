"""The paper's table, reproduced: mean final GPU allocation per trace and policy over seeds.

    .venv/bin/python bench/openb_table.py [--seeds 42-51] [--traces default,...] [--jobs 2]

Prints, per trace and policy, kgpu's mean final allocation (at 130% arrived GPU demand),
the paper's figure (DESIGN.md) and the difference, as a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from kgpu.config import POLICIES
from kgpu.sim.openb_run import run_openb

OPENB = Path(__file__).resolve().parents[2] / "shared" / "data" / "openb"
TRACES = ("default", "gpushare40", "multigpu30", "gpuspec10", "cpu100")
# The FGD paper's table: one column per policy it compares, in this order.
PAPER_POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
PAPER = {
    "default": (87.47, 90.85, 91.88, 92.00, 93.08, 95.39),
    "gpushare40": (86.00, 89.56, 90.02, 90.03, 91.69, 94.15),
    "multigpu30": (89.27, 93.28, 94.72, 94.87, 94.72, 96.46),
    "gpuspec10": (87.43, 90.39, 92.18, 92.46, 93.31, 94.95),
    "cpu100": (89.11, 91.95, 92.64, 92.72, 93.44, 95.35),
}


def paper_figure(trace: str, policy: str) -> float | None:
    if policy not in PAPER_POLICIES:
        return None
    return PAPER[trace][PAPER_POLICIES.index(policy)]


def one(args: tuple[str, str, int]) -> tuple[str, str, int, float, float]:
    trace, policy, seed = args
    run = run_openb(
        OPENB / "openb_node_list_gpu_node.csv", OPENB / f"openb_pod_list_{trace}.csv", policy, seed
    )
    return trace, policy, seed, run.result.final_alloc_pct, run.result.elapsed_s


def seeds_from(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=2)
    opts = parser.parse_args()
    traces, policies = opts.traces.split(","), opts.policies.split(",")
    jobs = [(t, p, s) for t in traces for p in policies for s in seeds_from(opts.seeds)]
    start = time.perf_counter()
    results: dict[tuple[str, str], list[float]] = {}
    with ProcessPoolExecutor(max_workers=opts.jobs) as pool:
        for trace, policy, _seed, final, _elapsed in pool.map(one, jobs):
            results.setdefault((trace, policy), []).append(final)
    print(f"seeds {opts.seeds}; {len(jobs)} replays in {time.perf_counter() - start:.0f} s\n")
    print("| trace | " + " | ".join(policies) + " |")
    print("| --- |" + " --- |" * len(policies))
    for trace in traces:
        cells = []
        for policy in policies:
            mean = statistics.fmean(results[(trace, policy)])
            paper = paper_figure(trace, policy)
            cells.append(f"{mean:.2f}" + (f" ({mean - paper:+.2f})" if paper is not None else ""))
        print(f"| {trace} | " + " | ".join(cells) + " |")
    if "kgpu" in policies and "fgd" in policies:
        gains = [
            statistics.fmean(results[(t, "kgpu")]) - statistics.fmean(results[(t, "fgd")])
            for t in traces
        ]
        print(f"\nkgpu − fgd, mean over traces: {statistics.fmean(gains):+.2f} points")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
