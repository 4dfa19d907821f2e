"""The agent's loop: discover, read the kubelet's checkpoint, publish when anything changed.

A round that finds nothing new makes no API call; every ``resync`` seconds the Device is
read and rewritten if it drifted (deleted, or edited by hand). An API error is logged and
the round is retried with back-off; the GPUs are read again each time, so a GPU that fails
meanwhile is reported with the next write.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgpu.agent.inventory import Inventory, discover
from kgpu.agent.kubelet import DEFAULT_CHECKPOINT, CheckpointError, read_checkpoint
from kgpu.agent.probe import GpuProbe, ProbeError
from kgpu.agent.publish import DevicePublisher
from kgpu.agent.sysfs import rdma_devices
from kgpu.kube.backoff import Backoff
from kgpu.kube.errors import KubeError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentOptions:
    node: str
    interval: float = 10.0  # seconds between rounds
    resync: float = 300.0  # seconds after which the Device is read back even if nothing changed
    checkpoint: Path | None = DEFAULT_CHECKPOINT  # None: leave the checkpoint annotation alone


class Observer:
    """Reads the GPUs and the kubelet's checkpoint; keeps the last inventory, so a GPU that
    stops answering is reported with its last known facts."""

    def __init__(self, probe: GpuProbe, checkpoint: Path | None, sysfs: Path | None = None) -> None:
        self.probe = probe
        self.checkpoint = checkpoint
        self.sysfs = sysfs  # where RDMA devices are looked for; None: not looked for
        self.inventory: Inventory | None = None
        self._checkpoint_problem = ""

    def observe(self) -> tuple[Inventory, list[dict[str, Any]] | None]:
        """One discovery, and the checkpoint's entries (None where it is not read)."""
        found = discover(self.probe, self.inventory)
        if self.sysfs is not None:
            rdma = rdma_devices(self.sysfs)
            found = dataclasses.replace(found, rdma=None if rdma is None else tuple(rdma))
        self.inventory = found
        for gpu in self.inventory.unhealthy:
            log.warning("GPU %d (%s) is unhealthy: %s", gpu.minor, gpu.uuid, gpu.problem)
        return self.inventory, self._checkpoints()

    def _checkpoints(self) -> list[dict[str, Any]] | None:
        if self.checkpoint is None:
            return None
        try:
            found = read_checkpoint(self.checkpoint)
        except CheckpointError as exc:
            # Once per distinct problem: the file is rewritten often and the loop runs on.
            if str(exc) != self._checkpoint_problem:
                log.warning("%s; the Device's checkpoint annotation is left as it is", exc)
            self._checkpoint_problem = str(exc)
            return None
        self._checkpoint_problem = ""
        return found


class Agent:
    def __init__(
        self,
        observer: Observer,
        publisher: DevicePublisher,
        options: AgentOptions,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.observer = observer
        self.publisher = publisher
        self.options = options
        self._clock = clock
        self._published: tuple[Inventory, Any] | None = None
        self._synced_at = 0.0

    def round(self) -> bool:
        """Observe, and publish if needed; True if the Device was written."""
        seen = self.observer.observe()
        due = self._clock() - self._synced_at >= self.options.resync
        if seen == self._published and not due:
            return False
        wrote = self.publisher.publish(*seen)
        self._published, self._synced_at = seen, self._clock()
        if wrote:
            log.info("Device %s written: %d GPUs", self.options.node, len(seen[0].gpus))
        return wrote

    def run(self, stop: threading.Event) -> None:
        backoff = Backoff(initial=1.0, maximum=max(1.0, self.options.interval))
        while not stop.is_set():
            try:
                self.round()
            except (KubeError, ProbeError) as exc:
                wait = backoff.next()
                log.warning(
                    "Device %s not written (%s); again in %.1fs", self.options.node, exc, wait
                )
            else:
                backoff.reset()
                wait = self.options.interval
            stop.wait(wait)
