"""``kgpu run``'s RunningScheduler against the API double, with timings short enough for
tests: every scheduler a test starts is stopped when it ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kgpu.kube.api.client import Timeouts
from kgpu.kube.api.leader_election import LeaseTiming
from kgpu.kube.live.scheduler_process import RunningScheduler, RunOptions
from tests.kube_double import KubeDouble


def fast_options(
    double: KubeDouble, directory: Path, identity: str = "s1", **overrides: Any
) -> RunOptions:
    """Options for a scheduler of ``double``; ``overrides`` replace any field."""
    options = RunOptions(
        kubeconfig=double.kubeconfig(directory),
        metrics_port=None,
        identity=identity,
        lease=LeaseTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.2),
        timeouts=Timeouts(connect=1.0, request=1.0, watch=30, watch_grace=2.0),
    )
    return dataclasses.replace(options, **overrides)


@contextmanager
def schedulers() -> Iterator[Callable[[RunOptions], RunningScheduler]]:
    """Start schedulers with the function this yields; all are stopped on the way out."""
    running: list[RunningScheduler] = []

    def start(options: RunOptions) -> RunningScheduler:
        scheduler = RunningScheduler(options).start()
        running.append(scheduler)
        return scheduler

    try:
        yield start
    finally:
        for scheduler in running:
            scheduler.stop()
