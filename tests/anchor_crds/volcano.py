"""Structural CRDs for Volcano's groups, written for the tests (Volcano installs its own):
``queues`` and ``podgroups`` of ``scheduling.volcano.sh/v1beta1`` and ``jobs`` of
``batch.volcano.sh/v1alpha1``, with the fields kgpu reads typed as Volcano types them (so
the API server keeps and prunes as it would in a Volcano cluster) and a pod template kept
whole, as Volcano's own CRD keeps it."""

from __future__ import annotations

from typing import Any

from tests.anchor_crds import crd

Obj = dict[str, Any]

_QUANTITY: Obj = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
_RESOURCES: Obj = {"type": "object", "additionalProperties": _QUANTITY}
_ANY: Obj = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_CONDITIONS: Obj = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            k: {"type": "string"}
            for k in ("type", "status", "reason", "message", "transitionID", "lastTransitionTime")
        },
    },
}


QUEUE_SPEC: Obj = {
    "type": "object",
    "properties": {
        "capability": _RESOURCES,
        "deserved": _RESOURCES,
        "guarantee": {"type": "object", "properties": {"resource": _RESOURCES}},
        "weight": {"type": "integer", "format": "int32"},
        "reclaimable": {"type": "boolean"},
        "parent": {"type": "string"},
        "priority": {"type": "integer", "format": "int32"},
        "type": {"type": "string"},
        "extendClusters": {"type": "array", "items": _ANY},
        "affinity": _ANY,
    },
}
QUEUE_STATUS: Obj = {
    "type": "object",
    "properties": {
        "state": {"type": "string"},
        **{k: {"type": "integer", "format": "int32"}
           for k in ("pending", "running", "unknown", "inqueue", "completed")},
        "allocated": _RESOURCES,
        "reservation": _ANY,
    },
}  # fmt: skip
PODGROUP_SPEC: Obj = {
    "type": "object",
    "properties": {
        "minMember": {"type": "integer", "format": "int32"},
        "minTaskMember": {"type": "object", "additionalProperties": {"type": "integer"}},
        "queue": {"type": "string"},
        "priorityClassName": {"type": "string"},
        "minResources": _RESOURCES,
        "networkTopology": _ANY,
    },
}
PODGROUP_STATUS: Obj = {
    "type": "object",
    "properties": {
        "phase": {"type": "string"},
        "conditions": _CONDITIONS,
        **{k: {"type": "integer", "format": "int32"} for k in ("running", "succeeded", "failed")},
    },
}
JOB_SPEC: Obj = {
    "type": "object",
    "properties": {
        "schedulerName": {"type": "string"},
        "minAvailable": {"type": "integer", "format": "int32"},
        "queue": {"type": "string"},
        "priorityClassName": {"type": "string"},
        "maxRetry": {"type": "integer", "format": "int32"},
        "plugins": _ANY,
        "policies": {"type": "array", "items": _ANY},
        "volumes": {"type": "array", "items": _ANY},
        "tasks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "replicas": {"type": "integer", "format": "int32"},
                    "minAvailable": {"type": "integer", "format": "int32"},
                    "policies": {"type": "array", "items": _ANY},
                    # A PodTemplateSpec: kept whole, as Volcano's CRD keeps it.
                    "template": _ANY,
                },
            },
        },
    },
}
JOB_STATUS: Obj = _ANY


def volcano_crds() -> list[Obj]:
    return [
        crd("scheduling.volcano.sh", "v1beta1", "Queue", "queues", "Cluster",
             QUEUE_SPEC, QUEUE_STATUS),
        crd("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups", "Namespaced",
             PODGROUP_SPEC, PODGROUP_STATUS),
        crd("batch.volcano.sh", "v1alpha1", "Job", "jobs", "Namespaced", JOB_SPEC, JOB_STATUS),
    ]  # fmt: skip
