"""Whether the user behind an admission request may list Nodes.

A Workspace that no node group fits is denied with every group's reason: the GPU models,
sizes and node counts of the cluster. That is the cluster's shape, which RBAC shows only to
those who may list Nodes; the webhook, which lists them with its own account, must not show
more. So it asks the API server (a SubjectAccessReview, as ``kubectl auth can-i list nodes
--as`` does) and shows the groups only when the answer is yes. Anything else (no, or no
answer) gets KAITO's sentence alone, with what the Workspace asked for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import SUBJECT_ACCESS_REVIEWS

log = logging.getLogger(__name__)

# A request's userInfo -> whether that user may list Nodes.
NodeAccess = Callable[[Mapping[str, Any]], bool]


def subject_access(client: KubeClient) -> NodeAccess:
    """Ask the API server, through ``client`` (the webhook's account, which may create
    SubjectAccessReviews)."""

    def may_list_nodes(user: Mapping[str, Any]) -> bool:
        spec: dict[str, Any] = {
            "resourceAttributes": {"verb": "list", "group": "", "resource": "nodes"}
        }
        for key in ("username", "uid", "groups", "extra"):
            if user.get(key):
                spec["user" if key == "username" else key] = user[key]
        body = {
            "apiVersion": SUBJECT_ACCESS_REVIEWS.api_version,
            "kind": SUBJECT_ACCESS_REVIEWS.kind,
            "spec": spec,
        }
        try:
            status = client.create(SUBJECT_ACCESS_REVIEWS, body).get("status")
        except KubeError as exc:
            log.warning("cannot ask whether %s may list nodes: %s", user.get("username"), exc)
            return False
        return isinstance(status, Mapping) and status.get("allowed") is True

    return may_list_nodes
