"""Turn a pod list into the arrival sequence the paper's simulator replays.

Tuning scales the workload to ``tune`` × the cluster's GPU capacity. Above 1, pods are
sampled uniformly with replacement and appended as copies until the next sample would pass
the target; the check compares the candidate's per-GPU milli, as the paper's simulator
does, so the figures stay comparable. Below 1, pods are removed at random until the total
is within the target. The original pods arrive in a seeded random order, followed by the
copies in sampling order.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kgpu.sim.openb import TracePod


def tune_workload(
    pods: list[TracePod], capacity_milli: int, tune: float, seed: int
) -> list[TracePod]:
    rng = np.random.default_rng(seed)
    order = [pods[i] for i in rng.permutation(len(pods))]
    target = tune * capacity_milli
    total = sum(p.gpu_request_milli for p in pods)
    if total > target:
        # Drop pods at random, keeping arrival order, until the total is within target.
        keep = np.ones(len(order), dtype=np.bool_)
        for i in rng.permutation(len(order)):
            if total <= target:
                break
            if order[i].gpu_request_milli:
                keep[i] = False
                total -= order[i].gpu_request_milli
        return [p for p, k in zip(order, keep, strict=True) if k]
    copies: list[TracePod] = []
    if not any(p.gpu_milli for p in pods):
        return order  # CPU-only pods never move the total; sampling would not end
    while True:
        base = pods[int(rng.integers(len(pods)))]
        if total + base.gpu_milli > target:
            break
        copies.append(replace(base, name=f"{base.name}-tuned-{len(copies)}"))
        total += base.gpu_request_milli
    return order + copies
