"""Holding what a node has left for a bound pod that cannot be accounted exactly.

A pod bound to a node that kgpu cannot read, or that does not fit there by kgpu's count (an
overcommitted node, a record naming GPUs that are taken), may be using anything the node
has left. Handing any of it out could overcommit a GPU; holding all of it only keeps new
pods off the node until that pod goes. So it is held: CPU, memory, every GPU's remaining
compute and memory, MIG instances, RDMA and FPGA devices.
"""

from __future__ import annotations

from kgpu.model.gpu import GpuRequest, mig_instances
from kgpu.model.pod import PodKey, PodSpec
from kgpu.state.cluster import ClusterState
from kgpu.state.device_tables import free_devices


def hold_rest(state: ClusterState, key: PodKey, node: int) -> int:
    """Reserve everything ``node`` has left for pod ``key`` (a bound pod that cannot be
    read or does not fit): what a running pod may be using is never handed out.

    Holders are pods named ``key#held...``; returns how many were placed (none past
    the node's pod limit, which already keeps every new pod off it).
    """
    rdma = [i for i, _, _ in free_devices(state.devices[node].rdma, state.busy("rdma", node))]
    fpga = [i for i, _, _ in free_devices(state.devices[node].fpga, state.busy("fpga", node))]
    rest = GpuRequest(rdma=len(rdma), fpga=len(fpga))
    holders: list[tuple[PodSpec, tuple[int, ...], tuple[int, int] | None]] = [
        (PodSpec(PodKey(f"{key}#held"), int(state.cpu_free[node]), int(state.mem_free[node]),
                 rest), (), None)
    ]  # fmt: skip
    for p, profile in enumerate(state.mig_profiles):
        left = int(state.mig_free[node, p])
        if left:
            spec = PodSpec(PodKey(f"{key}#held-{profile}"), gpu=mig_instances(profile, left))
            holders.append((spec, (), None))
    memory = state.node_gpus_memory_free(node)
    for g, milli in enumerate(state.node_gpus_free(node)):
        if milli > 0:
            spec = PodSpec(PodKey(f"{key}#held-gpu{g}"), gpu=GpuRequest(1, milli, (), 0))
            holders.append((spec, (g,), (milli, memory[g])))
    placed = 0
    for holder, gpus, need in holders:
        if holder.key in state.allocations or state.pods[node] >= state.max_pods[node]:
            continue
        state.allocate(holder, node, gpus, need=need, rdma=rdma, fpga=fpga)
        rdma, fpga = [], []
        placed += 1
    return placed
