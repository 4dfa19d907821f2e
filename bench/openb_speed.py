"""Wall time of one full openb replay per policy.

    .venv/bin/python bench/openb_speed.py [--trace default] [--seed 42] [--policies fgd,...]

Prints, per policy, the pods replayed, the final GPU allocation, the replay's own wall time
(``ReplayResult.elapsed_s``: scheduling and allocating every arrival) and the total wall
time including reading the CSV files, tuning the workload and the closing fragmentation
figure, and the process's peak resident memory during the replay (``peak MiB``:
:mod:`peak_memory`, Linux). The targets: FGD at most 1.0 s and kgpu at most 1.2 s of replay
on the default trace (compiled), at most 500 MB.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import peak_memory

from kgpu import core_build
from kgpu.config import POLICIES
from kgpu.sim.openb_run import run_openb

OPENB = Path(__file__).resolve().parents[2] / "shared" / "data" / "openb"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--policies", default=",".join(POLICIES))
    opts = parser.parse_args()
    nodes_csv = OPENB / "openb_node_list_gpu_node.csv"
    pods_csv = OPENB / f"openb_pod_list_{opts.trace}.csv"
    print(f"kgpu scheduling core: {core_build()}")
    print(f"trace {opts.trace}, seed {opts.seed}")
    print(
        f"{'policy':<14} {'pods':>6} {'alloc %':>8} {'replay s':>9} {'total s':>8} {'peak MiB':>9}"
    )
    for policy in opts.policies.split(","):
        peak_memory.reset()
        start = time.perf_counter()
        run = run_openb(nodes_csv, pods_csv, policy, opts.seed)
        total = time.perf_counter() - start
        result = run.result
        print(
            f"{policy:<14} {result.pods:>6} {result.final_alloc_pct:>8.2f} "
            f"{result.elapsed_s:>9.2f} {total:>8.2f} {peak_memory.shown(peak_memory.peak_mib()):>9}",
            flush=True,
        )


if __name__ == "__main__":
    main()
