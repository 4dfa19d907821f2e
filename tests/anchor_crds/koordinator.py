"""A structural CRD for Koordinator's ``Device`` (``scheduling.koordinator.sh/v1alpha1``),
written for the tests after Koordinator's ``apis/scheduling/v1alpha1/device_types.go``:
Koordinator installs its own; kgpu only reads Devices (``kgpu manifests`` does not ship it).
"""

from __future__ import annotations

from typing import Any

from tests.anchor_crds import crd

Obj = dict[str, Any]

GROUP = "scheduling.koordinator.sh"
NAME = f"devices.{GROUP}"

_QUANTITY: Obj = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
    "x-kubernetes-int-or-string": True,
}
_LABELS: Obj = {"type": "object", "additionalProperties": {"type": "string"}}
_DEVICE_INFO: Obj = {
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "labels": _LABELS,
        "id": {"type": "string"},
        "minor": {"type": "integer", "format": "int32"},
        "moduleID": {"type": "integer", "format": "int32"},
        "health": {"type": "boolean", "default": False},
        "resources": {"type": "object", "additionalProperties": _QUANTITY},
        "topology": {
            "type": "object",
            "required": ["nodeID", "pcieID", "socketID"],
            "properties": {
                "socketID": {"type": "integer", "format": "int32"},
                "nodeID": {"type": "integer", "format": "int32"},
                "pcieID": {"type": "string"},
                "busID": {"type": "string"},
            },
        },
        "vfGroups": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "labels": _LABELS,
                    "vfs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["minor"],
                            "properties": {
                                "minor": {"type": "integer", "format": "int32"},
                                "busID": {"type": "string"},
                            },
                        },
                    },
                },
            },
        },
        "conditions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "status", "lastTransitionTime", "reason", "message"],
                "properties": {
                    "type": {"type": "string"},
                    "status": {"type": "string"},
                    "observedGeneration": {"type": "integer", "format": "int64"},
                    "lastTransitionTime": {"type": "string", "format": "date-time"},
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                },
            },
        },
    },
}
_STATUS: Obj = {
    "type": "object",
    "properties": {
        "allocations": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    "entries": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "namespace": {"type": "string"},
                                "uuid": {"type": "string"},
                                "minors": {
                                    "type": "array",
                                    "items": {"type": "integer", "format": "int32"},
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}


def device_crd() -> Obj:
    """The CustomResourceDefinition of Koordinator's Device, cluster-scoped as Koordinator's."""
    spec = {"type": "object", "properties": {"devices": {"type": "array", "items": _DEVICE_INFO}}}
    return crd(GROUP, "v1alpha1", "Device", "devices", "Cluster", spec, _STATUS)
