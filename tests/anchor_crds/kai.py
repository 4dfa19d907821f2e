"""KAI Scheduler's Queue (``scheduling.run.ai/v2``) and PodGroup (``v2alpha2``) CRDs, structural,
after KAI's Go types (pkg/apis/scheduling/v2/queue_types.go, v2alpha2/podgroup_types.go)."""

from __future__ import annotations

from typing import Any

from tests.anchor_crds import crd

GROUP = "scheduling.run.ai"
_NUMBER: dict[str, Any] = {"type": "number"}
_RESOURCE = {
    "type": "object",
    "properties": {
        "quota": _NUMBER,
        "limit": _NUMBER,
        "overQuotaWeight": _NUMBER,
        "lendingLimit": _NUMBER,
    },
}
_DURATION = {"type": "string"}  # metav1.Duration: "90s", "1h30m"

QUEUE = crd(
    GROUP,
    "v2",
    "Queue",
    "queues",
    "Cluster",
    {
        "type": "object",
        "properties": {
            "displayName": {"type": "string"},
            "parentQueue": {"type": "string"},
            "priority": {"type": "integer"},
            "preemptMinRuntime": _DURATION,
            "reclaimMinRuntime": _DURATION,
            "resources": {
                "type": "object",
                "properties": {"gpu": _RESOURCE, "cpu": _RESOURCE, "memory": _RESOURCE},
            },
        },
    },
)

PODGROUP = crd(
    GROUP,
    "v2alpha2",
    "PodGroup",
    "podgroups",
    "Namespaced",
    {
        "type": "object",
        "properties": {
            "minMember": {"type": "integer", "minimum": 1, "nullable": True},
            "minSubGroup": {"type": "integer", "minimum": 1},
            "queue": {"type": "string"},
            "priorityClassName": {"type": "string"},
            "preemptibility": {"type": "string", "enum": ["preemptible", "non-preemptible"]},
            "markUnschedulable": {"type": "boolean"},
            "schedulingBackoff": {"type": "integer"},
            "topologyConstraint": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "subGroups": {
                "type": "array",
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        },
    },
)

CRDS = [QUEUE, PODGROUP]
