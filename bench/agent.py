"""What one round of the node agent's discovery costs on this machine's GPUs.

    python bench/agent.py [--rounds 200]

Times ``discover`` (every GPU's facts, health and the link matrix through NVML) over
``--rounds`` rounds, each fed the last, as ``kgpu agent`` runs them every ``--interval``
seconds. Needs the NVIDIA driver; without it, says so and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from kgpu.agent.inventory import Inventory, discover
from kgpu.agent.nvml import NvmlProbe
from kgpu.agent.probe import ProbeError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        probe = NvmlProbe()
    except ProbeError as exc:
        print(f"bench/agent.py: {exc}", file=sys.stderr)
        return 2
    opened = time.perf_counter() - started
    with probe:
        inventory: Inventory | None = None
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.rounds):
            inventory = discover(probe, inventory)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert inventory is not None
    products = sorted({g.product for g in inventory.gpus})
    print(f"{len(inventory.gpus)} GPUs ({', '.join(products)}), driver {inventory.driver}")
    print(f"NVML opened in {opened * 1000:.1f} ms")
    print(
        f"one round: {wall / args.rounds * 1000:.2f} ms wall, "
        f"{cpu / args.rounds * 1000:.2f} ms CPU (mean of {args.rounds})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
