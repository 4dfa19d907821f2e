"""Kubernetes Events about pods and nodes, sent in the background.

Events are core/v1 Events (what ``kubectl describe`` and ``kubectl get events`` show, and
what client-go's recorder writes). Scheduling must not wait on them: ``emit`` puts the
event on a bounded queue and returns; worker threads create them, retrying a temporary
failure a few times. When the queue is full the event is dropped and counted, as
client-go's broadcaster does, rather than slowing binding down.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kgpu.kube.api.backoff import Backoff
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, TemporaryError
from kgpu.kube.api.printable import printable
from kgpu.kube.api.resource_types import EVENTS, meta

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
_MAX_MESSAGE = 1024  # the API server's limit on an event's message
_ATTEMPTS = 3


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    obj: Mapping[str, Any], type_: str, reason: str, message: str, component: str, instance: str
) -> dict[str, Any]:
    """A core/v1 Event about ``obj``; events about cluster-scoped objects go to "default",
    where kubectl looks for them."""
    m = meta(obj)
    name = str(m.get("name", ""))
    namespace = str(m.get("namespace") or "default")
    stamp = now_rfc3339()
    involved = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "name": name,
        "uid": m.get("uid", ""),
    }
    if m.get("namespace"):
        involved["namespace"] = namespace
    # The message quotes objects' names and values: escaped, as `kubectl describe` prints it.
    message = printable(message)
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        # client-go's naming: the object's name and a unique hexadecimal suffix.
        "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        *,
        component: str = "kgpu-scheduler",
        instance: str = "",
        workers: int = 2,
        capacity: int = 20000,
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(capacity)
        self._threads = [
            threading.Thread(target=self._work, name=f"events-{i}", daemon=True)
            for i in range(workers)
        ]
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self._count_lock = threading.Lock()

    def start(self) -> EventRecorder:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (for up to ``timeout`` seconds), then stop the workers."""
        for _ in self._threads:
            try:
                self._queue.put(None, timeout=timeout)
            except queue.Full:
                break
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def queued(self) -> int:
        """Events emitted and not yet taken by a worker (benchmarks report the backlog)."""
        return self._queue.qsize()

    def emit(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        body = event_body(obj, type_, reason, message, self.component, self.instance)
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            with self._count_lock:
                self.dropped += 1

    def _work(self) -> None:
        while True:
            body = self._queue.get()
            if body is None:
                return
            self._send(body)

    def _send(self, body: dict[str, Any]) -> None:
        # Made at the first retry: a Backoff seeds a random generator from the system's
        # entropy, which cost about a tenth of an event's CPU when made for every event.
        backoff: Backoff | None = None
        namespace = body["metadata"]["namespace"]
        for attempt in range(_ATTEMPTS):
            try:
                self.client.create(EVENTS, body, namespace, read_answer=False)
            except Conflict:
                body["metadata"]["name"] += "0"  # the same name twice in a nanosecond
            except TemporaryError as exc:
                if attempt + 1 < _ATTEMPTS:
                    backoff = backoff or Backoff(initial=0.2, maximum=2.0)
                    time.sleep(backoff.next())
                    continue
                log.warning("event %s not sent: %s", body["reason"], exc)
            except KubeError as exc:
                log.warning("event %s not sent: %s", body["reason"], exc)
                break
            else:
                with self._count_lock:
                    self.sent += 1
                return
        with self._count_lock:
            self.failed += 1
