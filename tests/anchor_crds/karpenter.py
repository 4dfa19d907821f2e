"""Karpenter's NodePool and NodeClaim CRDs (``karpenter.sh/v1``), structural, with the fields
kgpu reads typed and the rest (nodeClassRef's provider parts, disruption) kept open."""

from __future__ import annotations

from typing import Any

from tests.anchor_crds import crd

GROUP = "karpenter.sh"
_OPEN: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_REQUIREMENTS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "key": {"type": "string"},
            "operator": {"type": "string"},
            "values": {"type": "array", "items": {"type": "string"}},
            "minValues": {"type": "integer"},
        },
    },
}
_TAINTS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "key": {"type": "string"},
            "value": {"type": "string"},
            "effect": {"type": "string"},
        },
    },
}
_NODE_SPEC = {
    "type": "object",
    "properties": {
        "requirements": _REQUIREMENTS,
        "taints": _TAINTS,
        "startupTaints": _TAINTS,
        "nodeClassRef": _OPEN,
        "expireAfter": {"type": "string"},
        "terminationGracePeriod": {"type": "string"},
    },
}

NODEPOOL = crd(
    GROUP,
    "v1",
    "NodePool",
    "nodepools",
    "Cluster",
    {
        "type": "object",
        "properties": {
            "template": {
                "type": "object",
                "properties": {
                    "metadata": {
                        "type": "object",
                        "properties": {
                            "labels": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                            "annotations": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                    "spec": _NODE_SPEC,
                },
            },
            "disruption": _OPEN,
            "limits": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "weight": {"type": "integer"},
        },
    },
)

NODECLAIM = crd(GROUP, "v1", "NodeClaim", "nodeclaims", "Cluster", _NODE_SPEC)

CRDS = [NODEPOOL, NODECLAIM]
