"""KAITO's ``kaito.sh`` Workspace for the tests: a structural CRD written after KAITO's
``api/v1beta1/workspace_types.go`` as it stood when seed 000 was written (with
``inference.replicas``), and the seed's Workspace and denial case.

Not shipped by ``kgpu manifests``: KAITO installs its own CRD. The schema keeps what kgpu
reads and writes typed (so the API server prunes and validates as KAITO's does) and the
pod template and volume sources schemaless, as KAITO's generator marks them.
"""

from __future__ import annotations

from typing import Any

from tests.anchor_crds import crd_of

Obj = dict[str, Any]

GROUP, VERSION = "kaito.sh", "v1beta1"

_STRINGS: Obj = {"type": "array", "items": {"type": "string"}}
_LABEL_SELECTOR: Obj = {
    "type": "object",
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": _STRINGS,
                },
            },
        },
    },
}
_PRESET: Obj = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "accessMode": {"type": "string", "enum": ["public", "private"]},
        "presetOptions": {
            "type": "object",
            "properties": {
                "image": {"type": "string"},
                "imagePullSecrets": _STRINGS,
                "modelAccessSecret": {"type": "string"},
            },
        },
    },
}
_DATA_SOURCE: Obj = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "urls": _STRINGS,
        "volumeSource": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "image": {"type": "string"},
        "imagePullSecrets": _STRINGS,
    },
}
# metav1.Condition as controller-gen writes it.
_CONDITION: Obj = {
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": {"type": "string", "maxLength": 32768},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "reason": {
            "type": "string",
            "maxLength": 1024,
            "minLength": 1,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "type": {"type": "string", "maxLength": 316},
    },
}


def workspace_crd() -> Obj:
    schema: Obj = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "resource": {
                "type": "object",
                "required": ["labelSelector"],
                "properties": {
                    "count": {"type": "integer", "default": 1},
                    "instanceType": {"type": "string"},
                    "labelSelector": _LABEL_SELECTOR,
                    "preferredNodes": _STRINGS,
                },
            },
            "inference": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer", "format": "int32"},
                    "preset": _PRESET,
                    "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "config": {"type": "string"},
                    "adapters": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"source": _DATA_SOURCE, "strength": {"type": "string"}},
                        },
                    },
                },
            },
            "tuning": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {
                "type": "object",
                "properties": {
                    "workerNodes": _STRINGS,
                    "conditions": {"type": "array", "items": _CONDITION},
                    "inference": {
                        "type": "object",
                        "properties": {
                            "replicas": {"type": "integer", "format": "int32"},
                            "selector": {"type": "string"},
                            "perReplicaNodeCount": {"type": "integer", "format": "int32"},
                            "targetNodeCount": {"type": "integer", "format": "int32"},
                        },
                    },
                },
            },
        },
    }
    # KAITO's marker also declares a scale subresource at .spec.inference.replicas, a path
    # its objects do not have (their fields are top-level); the API server refuses paths
    # outside .spec, so it is left out here.
    return crd_of(GROUP, VERSION, "Workspace", "workspaces", "Namespaced", schema["properties"])


# The seed's example: "a preset model requiring 8GB of GPU memory per replica (e.g. 8GB for
# phi-4-mini-instruct), with workspace.inference.replicas set to 2", on BYO nodes
# (instanceType empty), selected by workspace.resource.labelSelector.
SEED_PRESET = "phi-4-mini-instruct"
SEED_REPLICAS = 2
# The seed's denial, word for word ("Raise a descriptive denial message: ...").
SEED_DENIAL = (
    "No suitable node group found: insufficient capacity or no matching configurations "
    "after filtering."
)


def seed_workspace(
    name: str = "workspace-phi-4-mini",
    namespace: str = "default",
    replicas: int = SEED_REPLICAS,
    labels: dict[str, str] | None = None,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workspace",
        "metadata": meta,
        "resource": {"labelSelector": {"matchLabels": {"apps": "phi-4-mini"}}},
        "inference": {"replicas": replicas, "preset": {"name": SEED_PRESET}},
    }
