"""Where the admission webhook reads the cluster's Nodes to place a Workspace: listed, with
short timeouts, and kept a few seconds (:class:`kgpu.kube.api.listed.Listed` says why).
Workspaces are created rarely and by people; a list a few seconds old places them as well
as a fresh one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.listed import DEFAULT_TTL_S, Listed, ListUnavailable, webhook_client
from kgpu.kube.api.resource_types import NODES


class NodesUnavailable(Exception):
    """The Nodes could not be read; the message says why."""


class NodeSource(Protocol):
    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's Nodes as the API returns them; NodesUnavailable if unreadable."""
        ...


class ListedNodes(Listed):
    """Nodes listed from the API server, kept for ``ttl`` seconds."""

    def __init__(
        self,
        client: KubeClient,
        *,
        ttl: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(client, NODES, ttl=ttl, clock=clock)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, **kwargs: Any) -> ListedNodes:
        """In a pod, its service account; else ``kubeconfig``, $KUBECONFIG or ~/.kube/config.
        BadConfig (a KubeError) when none can be used."""
        return cls(webhook_client(kubeconfig), **kwargs)

    def nodes(self) -> list[dict[str, Any]]:
        try:
            return self.items()
        except ListUnavailable as exc:
            raise NodesUnavailable(str(exc)) from exc
