"""The agent's loop: discover, read what the kubelet gave pods, publish when anything changed.

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
from typing import Any, Final

from kgpu.agent.health import AgentMetrics
from kgpu.agent.inventory import Inventory, discover
from kgpu.agent.kubelet import CheckpointError, read_checkpoint
from kgpu.agent.pod_resources_client import PodResourcesClient, PodResourcesError
from kgpu.agent.probe import GpuProbe, GpuUnreadable, ProbeError
from kgpu.agent.publish import DevicePublisher
from kgpu.agent.sysfs import rdma_devices
from kgpu.kube.api.backoff import Backoff
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.event_recorder import EventRecorder, now_rfc3339

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentOptions:
    node: str
    interval: float = 10.0  # seconds between rounds
    resync: float = 300.0  # seconds after which the Device is read back even if nothing changed


# XIDs that report an application's error, not the GPU's: NVIDIA's device plugin leaves
# a GPU healthy on these (graphics engine exception, memory page fault, GPU stopped
# processing, preemptive cleanup, NVDEC exception, context switch timeout).
APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
XID_MEANINGS: Final = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


class Observer:
    """Reads the GPUs and which devices the kubelet gave pods: from its pod-resources API
    where its socket is there, else from its checkpoint file. Keeps the last inventory, so
    a GPU that stops answering is reported with its last known facts, and the critical
    XIDs seen, so a GPU that raised one stays unhealthy until the agent restarts (after
    the GPU's reset), as NVIDIA's device plugin keeps it."""

    def __init__(
        self,
        probe: GpuProbe,
        checkpoint: Path | None,  # None: the checkpoint annotation is left alone
        sysfs: Path | None = None,
        ignored_xids: frozenset[int] = frozenset(),
        now: Callable[[], str] = now_rfc3339,
        metrics: AgentMetrics | None = None,
        pod_resources: PodResourcesClient | None = None,  # None: the checkpoint file only
    ) -> None:
        self.probe = probe
        self.metrics = metrics
        self.checkpoint = checkpoint
        self.pod_resources = pod_resources
        self.allocations_source = ""  # where the last round read what pods hold
        self.sysfs = sysfs  # where RDMA devices are looked for; None: not looked for
        self.ignored_xids = APPLICATION_XIDS | ignored_xids
        self.inventory: Inventory | None = None
        self.xid_problems: dict[int, str] = {}  # by the probe's GPU index
        self._checkpoint_problem = ""
        self._now = now

    def watch(self, timeout: float) -> bool | None:
        """Waits up to ``timeout`` seconds for critical XIDs: True if one made a GPU
        unhealthy, None where the probe cannot report them (and did not wait)."""
        events = self.probe.xids(timeout)
        if events is None:
            return None
        changed = False
        for event in events:
            meaning = XID_MEANINGS.get(event.code, "see NVIDIA's XID catalogue")
            gpu = self._name(event.index)
            fatal = event.code not in self.ignored_xids
            if self.metrics is not None:
                self.metrics.xid(event.code, fatal)
            if not fatal:
                log.info("%s: XID %d (%s), not the GPU's fault", gpu, event.code, meaning)
                continue
            log.warning("%s: XID %d (%s)", gpu, event.code, meaning)
            if event.index not in self.xid_problems:
                self.xid_problems[event.index] = (
                    f"XID {event.code} ({meaning}) at {self._now()}; healthy again once the "
                    "GPU is reset and the agent restarted"
                )
                changed = True
        return changed

    def _name(self, index: int) -> str:
        for gpu in self.inventory.gpus if self.inventory else ():
            if gpu.index == index:
                return f"GPU {gpu.minor} ({gpu.uuid})"
        return f"the GPU at NVML index {index}"

    def observe(self) -> tuple[Inventory, list[dict[str, Any]] | None]:
        """One discovery, and the checkpoint's entries (None where it is not read)."""
        found = discover(self.probe, self.inventory)
        if self.xid_problems:
            gpus = tuple(
                dataclasses.replace(g, problem=self.xid_problems[g.index])
                if g.index in self.xid_problems and not g.problem
                else g
                for g in found.gpus
            )
            found = dataclasses.replace(found, gpus=gpus)
        if self.sysfs is not None:
            rdma = rdma_devices(self.sysfs)
            found = dataclasses.replace(found, rdma=None if rdma is None else tuple(rdma))
        known = {(g.uuid, g.problem) for g in self.inventory.unhealthy} if self.inventory else set()
        for gpu in found.unhealthy:
            if (gpu.uuid, gpu.problem) not in known:  # once, not every round
                log.warning("GPU %d (%s) is unhealthy: %s", gpu.minor, gpu.uuid, gpu.problem)
        self.inventory = found
        return found, self._checkpoints()

    def _checkpoints(self) -> list[dict[str, Any]] | None:
        if self.checkpoint is None:
            return None
        client = self.pod_resources
        found: list[dict[str, Any]] | None
        try:
            if client is not None and client.socket.exists():
                found = client.pod_devices()
                self._source(f"pod-resources API {client.api} at {client.socket}")
            else:
                found = read_checkpoint(self.checkpoint)
                absent = f" (no socket at {client.socket})" if client is not None else ""
                self._source(f"checkpoint file {self.checkpoint}{absent}")
        except (CheckpointError, PodResourcesError) as exc:
            # Once per distinct problem: the loop runs on, and the kubelet may mend it.
            if str(exc) != self._checkpoint_problem:
                log.warning("%s; the Device's checkpoint annotation is left as it is", exc)
            self._checkpoint_problem = str(exc)
            return None
        self._checkpoint_problem = ""
        return found

    def _source(self, source: str) -> None:
        if source != self.allocations_source:  # once, and again when it changes
            log.info("which devices the kubelet gave pods: read from its %s", source)
            self.allocations_source = source


class Agent:
    """Rounds of observe-and-publish. With ``events``, a GPU that turns unhealthy (or
    healthy again) is also told as an Event on the Node, where ``kubectl describe node``
    shows it."""

    def __init__(
        self,
        observer: Observer,
        publisher: DevicePublisher,
        options: AgentOptions,
        clock: Callable[[], float] = time.monotonic,
        events: EventRecorder | None = None,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self.observer = observer
        self.metrics = metrics
        self.publisher = publisher
        self.options = options
        self.events = events
        self._clock = clock
        self._published: tuple[Inventory, Any] | None = None
        self._synced_at = 0.0

    def round(self) -> bool:
        """Observe, and publish if needed; True if the Device was written."""
        seen = self.observer.observe()
        due = self._clock() - self._synced_at >= self.options.resync
        if seen == self._published and not due:
            self._count("unchanged", seen[0])
            return False
        try:
            wrote = self.publisher.publish(*seen)
        except KubeError:
            self._count("failed", seen[0])
            raise
        self._count("written" if wrote else "unchanged", seen[0])
        before = self._published[0] if self._published else None
        self._published, self._synced_at = seen, self._clock()
        if wrote:
            log.info("Device %s written: %d GPUs", self.options.node, len(seen[0].gpus))
        self._tell(before, seen[0])
        return wrote

    def _count(self, result: str, inventory: Inventory | None) -> None:
        if self.metrics is not None:
            self.metrics.round_done(result, inventory)

    def _tell(self, before: Inventory | None, after: Inventory) -> None:
        if self.events is None:
            return
        was = {g.uuid: g.problem for g in before.gpus} if before else {}
        node = self.publisher.node_ref()
        for gpu in after.gpus:
            old = was.get(gpu.uuid, "")
            name = f"GPU {gpu.minor} ({gpu.uuid})"
            if gpu.problem and gpu.problem != old:
                self.events.emit(node, "Warning", "GPUUnhealthy", f"{name}: {gpu.problem}")
            elif old and not gpu.problem:
                self.events.emit(node, "Normal", "GPUHealthy", f"{name} is healthy again")

    def run(self, stop: threading.Event) -> None:
        backoff = Backoff(initial=1.0, maximum=max(1.0, self.options.interval))
        while not stop.is_set():
            try:
                self.round()
            except (KubeError, ProbeError, GpuUnreadable) as exc:
                # A GPU that stops answering between two questions of one round is read
                # (and reported) as such by the next.
                if not isinstance(exc, KubeError):
                    self._count("failed", None)
                wait = backoff.next()
                log.warning(
                    "Device %s not written (%s); again in %.1fs", self.options.node, exc, wait
                )
            else:
                backoff.reset()
                wait = self.options.interval
            self._pause(stop, wait)

    def _pause(self, stop: threading.Event, seconds: float) -> None:
        """Until the next round: watching for XIDs meanwhile, in steps short enough to see
        ``stop``; a GPU an XID made unhealthy ends the pause, to be published at once."""
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            found = self.observer.watch(min(1.0, left))
            if found is None:
                stop.wait(left)
                return
            if found:
                return
