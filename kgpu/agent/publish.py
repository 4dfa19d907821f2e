"""Writes a node's ``Device`` when what the agent found differs from what the API holds.

Each write is read-modify-write on the object's resourceVersion: a 409 (someone else wrote
the object, or created it first) reads it again and retries, a few times, so another
writer's RDMA entries or annotations are never overwritten by a stale copy. Other errors
go to the caller, which tries again next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from kgpu.agent.device_object import desired, health_status, node_owner, without_status
from kgpu.agent.inventory import Inventory
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, Forbidden, NotFound
from kgpu.kube.api.event_recorder import now_rfc3339
from kgpu.kube.api.resource_types import DEVICES, NODES, resource_version

log = logging.getLogger(__name__)
_ATTEMPTS: Final = 5


class DevicePublisher:
    def __init__(self, client: KubeClient, node: str, now: Callable[[], str] = now_rfc3339) -> None:
        self.client = client
        self.node = node
        self._now = now
        self._owner: dict[str, Any] | None = None

    def publish(self, inventory: Inventory, checkpoints: list[dict[str, Any]] | None) -> bool:
        """Brings the Device up to date; True if anything was written."""
        for _ in range(_ATTEMPTS):
            try:
                return self._attempt(inventory, checkpoints)
            except Conflict as exc:
                log.info(
                    "Device %s changed while it was written (%s): reading it again", self.node, exc
                )
        raise Conflict(f"Device {self.node}: still changing after {_ATTEMPTS} attempts to write it")

    def _attempt(self, inventory: Inventory, checkpoints: list[dict[str, Any]] | None) -> bool:
        try:
            current: dict[str, Any] | None = self.client.get(DEVICES, self.node)
        except NotFound:
            current = None
        want = desired(self.node, inventory, checkpoints, current, self._node_owner())
        wrote = False
        if current is None:
            try:
                stored = self.client.create(DEVICES, want)
            except NotFound as exc:
                # Not the object: its type. The GET's 404 could not tell the two apart.
                raise NotFound(
                    f"Device {self.node} cannot be created: the API server has no "
                    f"{DEVICES.api_version} {DEVICES.plural} ({exc}); install the CRDs with "
                    "`kgpu manifests --crds-only | kubectl apply -f -`",
                    exc.status,
                    exc.reason,
                ) from exc
            wrote = True
        elif want != without_status(current):
            stored = self.client.replace(DEVICES, self.node, want)
            wrote = True
        else:
            stored = current
        status = health_status(inventory, stored, self._now())
        if status != stored.get("status"):
            patch = {"metadata": {"resourceVersion": resource_version(stored)}, "status": status}
            self.client.patch(DEVICES, self.node, patch, subresource="status")
            wrote = True
        return wrote

    def node_ref(self) -> dict[str, Any]:
        """The Node, as an Event's involved object."""
        owner = self._node_owner() or {}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node, "uid": owner.get("uid", "")},
        }

    def _node_owner(self) -> dict[str, Any] | None:
        # Read once: a Node's uid never changes, and a Device is only created once.
        if self._owner is None:
            try:
                self._owner = node_owner(self.client.get(NODES, self.node))
            except NotFound:
                log.warning(
                    "Node %s does not exist: its Device is written without an owner, so it "
                    "stays when the node is deleted (is --node the node's name?)",
                    self.node,
                )
                self._owner = {}
            except Forbidden as exc:
                log.warning("Node %s cannot be read (%s): its Device gets no owner", self.node, exc)
                self._owner = {}
        return self._owner or None
