"""Where the admission webhook reads the cluster's Nodes to place a Workspace.

The webhook answers the API server within the hook's ``timeoutSeconds`` (5 s in the
install), so every read here is bounded: :class:`ListedNodes` lists Nodes with a short
connect and request timeout, and keeps the list for ``ttl`` seconds. Workspaces are created
rarely and by people; a list a few seconds old places them as well as a fresh one, and a
burst of creations (``kubectl apply -f dir/``) costs one list, not one each. One list at a
time: concurrent reviews wait for the list in flight rather than start their own.

A list rather than an informer: the webhook's memory limit is small, a watch held open for
a decision made a few times a day would keep every Node in memory for nothing, and a list
that fails says so at once (:class:`NodesUnavailable`) instead of answering from a cache of
unknown age.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from kgpu.kube.api.client import KubeClient, Timeouts, load_configuration
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import NODES

# Inside the hook's 5 s, with room for the TLS round trip back to the API server.
WEBHOOK_TIMEOUTS: Final = Timeouts(connect=2.0, request=3.0)
DEFAULT_TTL_S: Final = 5.0


class NodesUnavailable(Exception):
    """The Nodes could not be read; the message says why."""


class NodeSource(Protocol):
    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's Nodes as the API returns them; NodesUnavailable if unreadable."""
        ...


class ListedNodes:
    """Nodes listed from the API server, kept for ``ttl`` seconds."""

    def __init__(
        self,
        client: KubeClient,
        *,
        ttl: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []
        self._listed_at: float | None = None
        self.lists = 0  # how many lists were made, for tests and logs

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, **kwargs: Any) -> ListedNodes:
        """In a pod, its service account; else ``kubeconfig``, $KUBECONFIG or ~/.kube/config.
        BadConfig (a KubeError) when none can be used."""
        client = KubeClient(
            load_configuration(kubeconfig), timeouts=WEBHOOK_TIMEOUTS, user_agent="kgpu-webhook"
        )
        return cls(client, **kwargs)

    def nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            now = self.clock()
            if self._listed_at is not None and now - self._listed_at < self.ttl:
                return self._items
            try:
                listed = self.client.list(NODES)
            except KubeError as exc:
                # Not kept: the next review tries again rather than repeat a stale failure.
                raise NodesUnavailable(f"cannot list Nodes: {exc}") from exc
            self.lists += 1
            self._items, self._listed_at = listed.items, now
            return self._items

    def close(self) -> None:
        self.client.close()
