"""Objects of one kind listed from the API server and kept a few seconds: what the
admission webhook reads the cluster through (Nodes to place a Workspace, Queues to know
who may use them).

The webhook answers the API server within the hook's ``timeoutSeconds`` (5 s in the
install), so every read here is bounded: the client's connect and request timeouts are
short, and a list is kept for ``ttl`` seconds. A list a few seconds old judges as well as a
fresh one, and a burst of creations (``kubectl apply -f dir/``) costs one list, not one
each. One list at a time: concurrent reviews wait for the list in flight rather than start
their own.

A list rather than an informer: the webhook's memory limit is small, a watch held open for
decisions made now and then would keep every object in memory for nothing, and a list that
fails says so at once (:class:`ListUnavailable`) instead of answering from a cache of
unknown age.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

from kgpu.kube.api.client import KubeClient, Timeouts, load_configuration
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import Resource

# Inside the hook's 5 s, with room for the TLS round trip back to the API server.
WEBHOOK_TIMEOUTS: Final = Timeouts(connect=2.0, request=3.0)
DEFAULT_TTL_S: Final = 5.0


class ListUnavailable(Exception):
    """The objects could not be listed; the message says why."""


def webhook_client(kubeconfig: str | None = None) -> KubeClient:
    """In a pod, its service account; else ``kubeconfig``, $KUBECONFIG or ~/.kube/config.
    BadConfig (a KubeError) when none can be used."""
    return KubeClient(
        load_configuration(kubeconfig), timeouts=WEBHOOK_TIMEOUTS, user_agent="kgpu-webhook"
    )


class Listed:
    """The objects of ``resource``, listed from the API server and kept for ``ttl`` seconds."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        ttl: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.resource = resource
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []
        self._listed_at: float | None = None
        self.lists = 0  # how many lists were made, for tests and logs

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            now = self.clock()
            if self._listed_at is not None and now - self._listed_at < self.ttl:
                return self._items
            try:
                listed = self.client.list(self.resource)
            except KubeError as exc:
                # Not kept: the next review tries again rather than repeat a stale failure.
                raise ListUnavailable(f"cannot list {self.resource.kind}s: {exc}") from exc
            self.lists += 1
            self._items, self._listed_at = listed.items, now
            return self._items

    def close(self) -> None:
        self.client.close()
