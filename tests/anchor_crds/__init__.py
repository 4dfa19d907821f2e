"""Structural CRDs of the anchors' groups, written for the tests (each anchor installs its own
in a real cluster; ``kgpu manifests`` ships none of them), and how a test installs them."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict
from kgpu.kube.api.resource_types import Resource
from tests.kube_objects import wait_until

Obj = dict[str, Any]
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)


def crd(
    group: str,
    version: str,
    kind: str,
    plural: str,
    scope: str,
    spec: Obj,
    status: Obj | None = None,
) -> Obj:
    """One version, served and stored, with a status subresource; ``spec`` the schema of the
    object's spec, ``status`` of its status (by default the anchor's own, left open)."""
    status = status or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd_of(group, version, kind, plural, scope, {"spec": spec, "status": status})


def crd_of(group: str, version: str, kind: str, plural: str, scope: str, fields: Obj) -> Obj:
    """The same for an object whose top-level ``fields`` are not only spec and status
    (KAITO's Workspace)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": fields}},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def install(client: KubeClient, crds: list[Obj]) -> None:
    """Create the CRDs unless they exist (left installed: others on the same API server may
    use them) and wait until each is established."""
    for obj in crds:
        with contextlib.suppress(Conflict):
            client.create(CRDS, obj)
    for obj in crds:
        name = obj["metadata"]["name"]

        def established(name: str = name) -> bool:
            # null until the server has judged the CRD, then a list
            conditions = client.get(CRDS, name).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_until(established, timeout=30)
    time.sleep(1.0)  # the discovery of the new group reaches every handler of the server
