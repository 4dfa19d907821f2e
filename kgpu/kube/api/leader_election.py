"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Every ``retry_period`` each candidate reads the Lease. The holder renews it (``renewTime``);
another candidate takes it over only once the record has not changed for
``lease_duration`` by the candidate's own clock (so clocks need not agree across
machines). Updates carry the resourceVersion read, so of two candidates racing for an
expired lease exactly one wins (the other gets 409).

The holder counts itself leader until ``renew_deadline`` after the start of its last
successful renewal; that is shorter than ``lease_duration``, so a holder cut off from the
API server stops binding before anyone else may start. On a clean stop the holder gives
the lease up (holder cleared, duration 1 s) so a standby takes over at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.resource_types import LEASES

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """kube-scheduler's defaults: 15 s lease, 10 s renew deadline, retry every 2 s."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "expected 0 < retry_period < renew_deadline < lease_duration, got "
                f"{self.retry_period}, {self.renew_deadline}, {self.lease_duration}"
            )


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        identity: str,
        *,
        name: str = "kgpu-scheduler",
        namespace: str = "kube-system",
        timing: LeaseTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.identity = identity
        self.name = name
        self.namespace = namespace
        self.timing = timing or LeaseTiming()
        self._clock = clock
        self._leader_until = float("-inf")
        self._observed: tuple[str, str, str] | None = None  # (holder, renewTime, version)
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Set once the first attempt has answered: /readyz waits for it.
        self.status_known = threading.Event()
        self.holder = ""
        self.transitions = 0

    def is_leader(self) -> bool:
        return self._clock() < self._leader_until

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.is_leader():
            self._release()
        self._leader_until = float("-inf")

    def _run(self) -> None:
        leading = False
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except KubeError as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            leading = self._tell_change(leading)
            self.status_known.set()
            self._stop.wait(self.timing.retry_period)
        self._tell_change(leading, stopping=True)

    def _tell_change(self, was_leading: bool, *, stopping: bool = False) -> bool:
        """Log when this candidate became or stopped being the leader; whether it leads.
        Losing the lease is a warning: every write stops until it is won again."""
        leading = self.is_leader() and not stopping
        lease = f"{self.namespace}/{self.name}"
        if leading and not was_leading:
            log.info("leading: %s holds lease %s", self.identity, lease)
        elif was_leading and not leading:
            if stopping:
                log.info("stopped leading: %s gives up lease %s", self.identity, lease)
            else:
                holder = self.holder if self.holder != self.identity else "nobody, renewal failed"
                log.warning(
                    "lost leadership: %s no longer holds lease %s (holder: %s)",
                    self.identity,
                    lease,
                    holder or "nobody",
                )
        return leading

    def try_acquire_or_renew(self) -> bool:
        """One round: True if this candidate holds the lease afterwards."""
        started = self._clock()
        try:
            lease = self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            return self._create(started)
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        version = str(lease.get("metadata", {}).get("resourceVersion", ""))
        record = (holder, str(spec.get("renewTime") or ""), version)
        if record != self._observed:
            self._observed, self._observed_at = record, started
        self.holder = holder
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
        if holder and holder != self.identity and started < self._observed_at + duration:
            return False  # someone else holds a lease that has not expired
        now = micro_time()
        transitions = int(spec.get("leaseTransitions") or 0)
        taking_over = holder != self.identity
        new_spec: dict[str, Any] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.timing.lease_duration),
            "renewTime": now,
        }
        if taking_over:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = transitions + 1
        body = {**lease, "spec": new_spec}
        try:
            updated = self.client.replace(LEASES, self.name, body, self.namespace)
        except Conflict:
            return False  # another candidate wrote first; read again next round
        return self._won(updated, started, taking_over)

    def _create(self, started: float) -> bool:
        now = micro_time()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.timing.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = self.client.create(LEASES, body, self.namespace)
        except Conflict:
            return False
        return self._won(created, started, True)

    def _won(self, lease: dict[str, Any], started: float, taking_over: bool) -> bool:
        spec = lease.get("spec") or {}
        version = str(lease.get("metadata", {}).get("resourceVersion", ""))
        self._observed = (self.identity, str(spec.get("renewTime") or ""), version)
        self._observed_at = started
        self.holder = self.identity
        self._leader_until = started + self.timing.renew_deadline
        if taking_over:
            self.transitions += 1
            log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
        return True

    def _release(self) -> None:
        try:
            lease = self.client.get(LEASES, self.name, self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(),
            }
            self.client.replace(LEASES, self.name, {**lease, "spec": spec}, self.namespace)
        except KubeError as exc:
            log.info("lease %s/%s not released: %s", self.namespace, self.name, exc)
