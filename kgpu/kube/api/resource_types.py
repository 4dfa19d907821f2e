"""The Kubernetes resource types kgpu reads and writes, the URL paths that name them, and the
path its admission webhook is called at."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource type of the API: where it lives and whether it is namespaced."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str = "", subresource: str = "") -> str:
        """The URL path of the collection (all namespaces when ``namespace`` is None), or
        of one object and optionally one of its subresources."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{_segment(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{_segment(name)}"
            if subresource:
                base += f"/{subresource}"
        return base


# What ``quote(text, safe="")`` leaves as it is: every name the API server accepts is such.
_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*")


def _segment(text: str) -> str:
    """``text`` as one segment of a URL path (a name with "/" or "%" does not reach past
    its segment). Names are nearly always plain: they are not quoted (a path a call)."""
    return text if _PLAIN.fullmatch(text) else quote(text, safe="")


NODES: Final = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS: Final = Resource("", "v1", "pods", "Pod", namespaced=True)
EVENTS: Final = Resource("", "v1", "events", "Event", namespaced=True)
# A share's GPU environment (kgpu.kube.objects.gpu_env), in the share's namespace.
CONFIGMAPS: Final = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
# The key that signs kgpu's records on pods (kgpu.kube.live.record_key), in kgpu's namespace.
SECRETS: Final = Resource("", "v1", "secrets", "Secret", namespaced=True)
# kgpu's own namespace (reservation pods), created by `kgpu run` outside the cluster.
NAMESPACES: Final = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
# Cached by the loop (a PodGroup's spec.priorityClassName is its job's priority) and written
# by the autoscaler (its trigger pods' class).
PRIORITY_CLASSES: Final = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
# Read by defragmentation (kgpu.kube.live.defrag_live): policy/v1 where served (1.21 on),
# else policy/v1beta1 (the v1.20 server); its Evictions are posted in the same version.
POD_DISRUPTION_BUDGETS_V1: Final = Resource(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True
)
POD_DISRUPTION_BUDGETS_V1BETA1: Final = Resource(
    "policy", "v1beta1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True
)
# Asked by the webhook whether a Workspace's creator may list Nodes (then its denial shows
# the node groups; kgpu.kube.admission.node_access).
SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)

# kgpu's own custom resources. Queues and Devices belong to the cluster (a queue tree spans
# namespaces; a Device describes one node), PodGroups to the namespace of their pods, as in
# Volcano, KAI and Koordinator.
CRD_GROUP: Final = "kgpu.io"
CRD_VERSION: Final = "v1alpha1"
QUEUES: Final = Resource(CRD_GROUP, CRD_VERSION, "queues", "Queue", namespaced=False)
PODGROUPS: Final = Resource(CRD_GROUP, CRD_VERSION, "podgroups", "PodGroup", namespaced=True)
DEVICES: Final = Resource(CRD_GROUP, CRD_VERSION, "devices", "Device", namespaced=False)
CUSTOM_RESOURCES: Final = (QUEUES, PODGROUPS, DEVICES)
# KAI Scheduler's Queues and PodGroups, read beside kgpu's own (kgpu.kube.anchors.kai).
KAI_QUEUES: Final = Resource("scheduling.run.ai", "v2", "queues", "Queue", namespaced=False)
KAI_PODGROUPS: Final = Resource(
    "scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", namespaced=True
)
# Cached by the Workspace controller's runner (kgpu.kube.workspaces.runner), not the loop.
WORKSPACES: Final = Resource(CRD_GROUP, CRD_VERSION, "workspaces", "Workspace", namespaced=True)
# KAITO's Workspace, reconciled beside kgpu's with `kgpu run --kaito-workspaces`
# (kgpu.kube.anchors.kaito); its CRD is KAITO's to install.
KAITO_WORKSPACES: Final = Resource(
    "kaito.sh", "v1beta1", "workspaces", "Workspace", namespaced=True
)

# The path the API server posts AdmissionReviews to: served by the webhook
# (kgpu.kube.admission.webhook_server), registered by the install (kgpu.kube.install.bundle).
WEBHOOK_PATH: Final = "/validate"
# The mutating webhook's path (kgpu.kube.admission.pod_env): a pod's GPU environment.
MUTATE_PATH: Final = "/mutate"
# The label on a share's GPU-environment ConfigMaps (kgpu.kube.objects.gpu_env), which the
# install's webhook rules select.
GPU_ENV_LABEL: Final = "kgpu.io/gpu-env"
# Registered by `kgpu run` when it serves the webhook itself (kgpu.kube.live.webhook_registration).
MUTATING_WEBHOOKS: Final = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING_WEBHOOKS: Final = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``metadata`` of an object as the API returns it (an empty mapping if missing)."""
    value = obj.get("metadata")
    if type(value) is dict:  # as decoded from JSON: skip the slower ABC check
        return value
    return value if isinstance(value, Mapping) else {}


def object_key(obj: Mapping[str, Any]) -> str:
    """ "namespace/name" for namespaced objects, "name" for the others: the cache key."""
    m = meta(obj)
    namespace = m.get("namespace")
    name = str(m.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


def resource_version(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion", ""))


def uid(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid", ""))


def parse_time(value: object) -> float:
    """An RFC 3339 timestamp ("2025-01-02T03:04:05Z") as seconds since the epoch; 0 if absent."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
