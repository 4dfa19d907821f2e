"""Kubernetes Events about pods and nodes, sent in the background.

Events are core/v1 Events (what ``kubectl describe`` and ``kubectl get events`` show, and
what client-go's recorder writes). Scheduling must not wait on them: ``emit`` puts the
event on a bounded queue and returns; up to ``workers`` are being created at once, their
calls carried by the client's call thread (:meth:`KubeClient.request_async`), each retried
a few times after a temporary failure. When the queue is full the event is dropped and
counted, as client-go's broadcaster does, rather than slowing binding down. A few in
flight, behind the binds' many: the API server's CPU goes to binds first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kgpu.kube.api.backoff import Backoff
from kgpu.kube.api.client import Answer, KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, TemporaryError
from kgpu.kube.api.in_flight import InFlight
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
        # Events being created at once; those waiting, up to ``capacity``.
        self._flight: InFlight[dict[str, Any]] = InFlight(
            workers, self._first, capacity=capacity, paused=True
        )
        self._count_lock = threading.Lock()
        self.sent = 0
        self.dropped = 0
        self.failed = 0

    def start(self) -> EventRecorder:
        self._flight.resume()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (for up to ``timeout`` seconds), then send no more."""
        self._flight.wait(timeout)
        self._flight.pause()

    @property
    def queued(self) -> int:
        """Events emitted and not yet being sent (benchmarks report the backlog)."""
        return self._flight.queued

    def emit(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        body = event_body(obj, type_, reason, message, self.component, self.instance)
        if not self._flight.add(body):
            with self._count_lock:
                self.dropped += 1

    def _first(self, body: dict[str, Any]) -> None:
        self._send(body, 0, None)

    def _send(self, body: dict[str, Any], attempt: int, backoff: Backoff | None) -> None:
        namespace = body["metadata"]["namespace"]

        def then(answer: Answer) -> None:
            self._answered(body, attempt, backoff, answer)

        self.client.create_async(EVENTS, body, namespace, then, read_answer=False)

    def _answered(
        self, body: dict[str, Any], attempt: int, backoff: Backoff | None, answer: Answer
    ) -> None:
        again = attempt + 1 < _ATTEMPTS
        if not isinstance(answer, KubeError):
            self._done(sent=True)
        elif isinstance(answer, Conflict) and again:
            body["metadata"]["name"] += "0"  # the same name twice in a nanosecond
            self._send(body, attempt + 1, backoff)
        elif isinstance(answer, TemporaryError) and not isinstance(answer, Conflict) and again:
            # Made at the first retry: a Backoff seeds a random generator from the system's
            # entropy, which cost about a tenth of an event's CPU when made for every event.
            backoff = backoff or Backoff(initial=0.2, maximum=2.0)
            self.client.later(backoff.next(), lambda: self._send(body, attempt + 1, backoff))
        else:
            if not isinstance(answer, Conflict):
                log.warning("event %s not sent: %s", body["reason"], answer)
            self._done(sent=False)

    def _done(self, *, sent: bool) -> None:
        with self._count_lock:
            if sent:
                self.sent += 1
            else:
                self.failed += 1
        self._flight.finished()
