"""The custom resources of group ``kgpu.io``, version ``v1alpha1``, as CRD objects.

Each schema is structural (every field typed, no ``type`` inside ``anyOf``), because
``apiextensions.k8s.io/v1`` requires it, and because only then does the API server prune
unknown fields and reject malformed ones before any controller sees them:

- ``Queue`` (cluster-scoped): ``spec.parent``, ``spec.priority``, ``spec.overQuotaWeight``,
  ``spec.deserved``/``spec.limit`` per resource (quantities), ``spec.cards`` per card name
  (``deserved``/``limit`` card counts), ``spec.cardUnlimitedCpuMemory``, ``spec.namespaces``
  (who may use it: :mod:`kgpu.kube.objects.queue_tenancy`); status with
  allocated, deserved, fair share, per-card figures and conditions.
- ``PodGroup``: ``spec.minMember`` (the gang), ``spec.maxMember`` (elastic jobs run between
  the two), ``spec.queue``, ``spec.priorityClassName``, ``spec.minResources``; status with
  phase, pod counts and conditions.
- ``Device`` (cluster-scoped, one per node, named after it): ``spec.devices[]`` with
  ``uuid``, ``minor``, ``type`` (gpu, rdma, fpga), ``health``, ``resources`` and
  ``topology`` (socket, NUMA node, PCIe, bus id, NVLink peers).
- ``Workspace`` (KAITO's shape: ``resource`` and ``inference`` at the top level, not under
  ``spec``): ``resource.instanceType`` (optional), ``resource.count``,
  ``resource.labelSelector``; ``inference.replicas`` and ``inference.preset.name`` or
  ``inference.gpuMemoryPerReplica`` (at least one of the two).

Cross-field rules that OpenAPI cannot state on Kubernetes 1.20 (``maxMember >= minMember``,
a card's ``limit >= deserved``, the ``volcano.sh/card.quota`` annotation's JSON) are checked
by the admission webhook (:mod:`kgpu.kube.admission.review`).
"""

from __future__ import annotations

from typing import Any, Final

GROUP: Final = "kgpu.io"
VERSION: Final = "v1alpha1"

Schema = dict[str, Any]

# Kubernetes' own quantity grammar, less the sign: quotas and capacities are never negative.
QUANTITY_PATTERN: Final = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# A DNS-1123 subdomain: what a queue's or a PriorityClass' name can be.
NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A DNS-1123 label: what a namespace's name can be.
NAMESPACE_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


def _string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _integer(description: str, minimum: int | None = 0, **extra: Any) -> Schema:
    schema: Schema = {"type": "integer", "format": "int64", "description": description, **extra}
    if minimum is not None:
        schema["minimum"] = minimum
    return schema


def _object(
    description: str, properties: dict[str, Schema], required: list[str] | None = None
) -> Schema:
    schema: Schema = {"type": "object", "description": description, "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _map(description: str, values: Schema) -> Schema:
    return {"type": "object", "description": description, "additionalProperties": values}


def quantity(description: str) -> Schema:
    """A non-negative resource quantity, written as a string ("500m", "8Gi") or an integer.

    The ``anyOf`` of integer and string is the one form of ``anyOf`` with types that a
    structural schema allows, only with ``x-kubernetes-int-or-string`` and only exactly so:
    the bounds sit beside it, where each applies to the values of its type.
    """
    return {
        "description": description,
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,  # applies to strings only
        "minimum": 0,  # applies to integers only
    }


def _resources(description: str) -> Schema:
    return _map(description, quantity("a quantity of the resource named by the key"))


def conditions() -> Schema:
    """``metav1.Condition`` as a list keyed by ``type``, so status patches merge per type."""
    condition = _object(
        "one aspect of the object's state",
        {
            "type": _string("what the condition is about, such as Ready or Schedulable"),
            "status": _string("whether it holds", enum=["True", "False", "Unknown"]),
            "reason": _string("a CamelCase code for the last transition"),
            "message": _string("what a person reads about the last transition"),
            "lastTransitionTime": _string("when status last changed", format="date-time"),
            "observedGeneration": _integer("the generation the condition was computed from"),
        },
        ["type", "status"],
    )
    return {
        "type": "array",
        "description": "the latest observations of the object's state",
        "items": condition,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }


# ---------------------------------------------------------------------------- kinds


def queue_schema() -> Schema:
    card = _object(
        "the queue's share of one card (GPU model, MIG or MPS slice)",
        {
            "deserved": _integer("cards the queue is guaranteed"),
            "limit": _integer("cards the queue may never exceed; absent: no limit"),
        },
    )
    card_status = _object(
        "the queue's figures for one card",
        {
            name: _integer(f"{name} cards")
            for name in ("deserved", "allocated", "request", "capacity")
        },
    )
    spec = _object(
        "the queue's place in the hierarchy and its quota",
        {
            "parent": _string("the parent queue; absent: a root queue", pattern=NAME_PATTERN),
            "priority": _integer("queues of higher priority are served first", minimum=None),
            "overQuotaWeight": {
                "type": "number",
                "minimum": 0,
                "default": 1,
                "description": "the share of unused resources beyond deserved, relative to siblings",
            },
            "deserved": _resources("resources the queue is guaranteed (its quota)"),
            "limit": _resources("resources the queue may never exceed; absent: no limit"),
            "cards": _map("card name to the queue's card quota", card),
            "cardUnlimitedCpuMemory": {
                "type": "boolean",
                "description": "do not check cpu and memory quota for pods that request cards",
            },
            "namespaces": {
                "type": "array",
                "description": "the namespaces whose pods may use the queue (and its "
                "children); absent: every namespace",
                "items": _string("a namespace name", pattern=NAMESPACE_PATTERN),
            },
        },
    )
    status = _object(
        "what the scheduler observed",
        {
            "allocated": _resources("resources held by the queue's running pods"),
            "deserved": _resources("the quota in force after the hierarchy is resolved"),
            "fairShare": _resources("the queue's fair share now"),
            "cards": _map("card name to the queue's card figures", card_status),
            "conditions": conditions(),
        },
    )
    return _root(spec, status)


def podgroup_schema() -> Schema:
    spec = _object(
        "pods scheduled together",
        {
            "minMember": _integer("pods that must be placed together before any runs", 1),
            "maxMember": _integer("an elastic job grows up to this many pods", 1),
            "queue": _string("the queue the group is charged to", pattern=NAME_PATTERN),
            "priorityClassName": _string("the PriorityClass of the group's pods"),
            "minResources": _resources("resources the whole gang needs to start"),
        },
        ["minMember"],
    )
    status = _object(
        "what the scheduler observed",
        {
            "phase": _string(
                "the group's phase", enum=["Pending", "Inqueue", "Running", "Unknown", "Completed"]
            ),
            "scheduled": _integer("pods bound"),
            "running": _integer("pods running"),
            "succeeded": _integer("pods that succeeded"),
            "failed": _integer("pods that failed"),
            "conditions": conditions(),
        },
    )
    return _root(spec, status)


def device_schema() -> Schema:
    topology = _object(
        "where the device sits, for topology-aware choice",
        {
            "socketID": _integer("CPU socket", minimum=-1),
            "nodeID": _integer("NUMA node", minimum=-1),
            "pcieID": _string("PCIe switch"),
            "busID": _string("PCI bus id, such as 0000:3b:00.0"),
            "nvlinkPeers": {
                "type": "array",
                "description": "minors of the GPUs this one reaches over NVLink",
                "items": _integer("a GPU minor"),
            },
        },
    )
    device = _object(
        "one device of the node",
        {
            "uuid": _string("the device's id, such as GPU-4b6d…", minLength=1),
            "minor": _integer("the device's minor number (GPU index)"),
            "type": _string("the kind of device", enum=["gpu", "rdma", "fpga"]),
            "health": {"type": "boolean", "description": "false: never allocate it"},
            "resources": _resources("what the device offers, such as kubernetes.io/gpu-core"),
            "topology": topology,
        },
        ["minor", "type"],
    )
    spec = _object(
        "the node's devices as its agent reports them",
        {
            "devices": {
                "type": "array",
                "description": "the node's devices",
                "items": device,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type", "minor"],
            }
        },
    )
    return _root(spec, _object("what the agent observed", {"conditions": conditions()}))


def workspace_schema() -> Schema:
    requirement = _object(
        "a label selector requirement",
        {
            "key": _string("the label key", minLength=1),
            "operator": _string(
                "how values relate", enum=["In", "NotIn", "Exists", "DoesNotExist"]
            ),
            "values": {"type": "array", "items": {"type": "string"}},
        },
        ["key", "operator"],
    )
    selector = _object(
        "the nodes the workspace may use",
        {
            "matchLabels": _map("labels the node must carry", {"type": "string"}),
            "matchExpressions": {"type": "array", "items": requirement},
        },
    )
    resource = _object(
        "where the workspace runs",
        {
            "instanceType": _string(
                "a node instance type to provision; absent: use existing nodes"
            ),
            "count": _integer("nodes to use", 1),
            "labelSelector": selector,
        },
        ["labelSelector"],
    )
    inference = _object(
        "the inference service",
        {
            "replicas": _integer("replicas of the service", 1),
            "preset": _object(
                "a known model", {"name": _string("the preset's name", minLength=1)}, ["name"]
            ),
            "gpuMemoryPerReplica": quantity("GPU memory each replica needs, such as 80Gi"),
        },
    )
    # A preset knows its GPU memory; without one the workspace must say it.
    inference["anyOf"] = [{"required": ["preset"]}, {"required": ["gpuMemoryPerReplica"]}]
    status = _object(
        "what the controller observed",
        {
            "workerNodes": {"type": "array", "items": {"type": "string"}},
            "nodeGroup": _string("the homogeneous node group chosen"),
            "conditions": conditions(),
        },
    )
    schema = _root(None, status)
    schema["properties"].update({"resource": resource, "inference": inference})
    schema["required"] = ["resource", "inference"]
    return schema


def _root(spec: Schema | None, status: Schema) -> Schema:
    properties: dict[str, Schema] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "status": status,
    }
    if spec is not None:
        properties["spec"] = spec
    schema: Schema = {"type": "object", "properties": properties}
    if spec is not None:
        schema["required"] = ["spec"]
    return schema


# ---------------------------------------------------------------------------- CRDs


def _crd(
    kind: str,
    plural: str,
    scope: str,
    schema: Schema,
    short: list[str],
    columns: list[tuple[str, str, str]],
) -> dict[str, Any]:
    printer = [{"name": n, "type": t, "jsonPath": p} for n, t, p in columns]
    printer.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "kgpu"}},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
                "categories": ["kgpu"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer,
                }
            ],
        },
    }


def custom_resource_definitions() -> list[dict[str, Any]]:
    """The four CRDs, in the order ``kubectl apply`` should create them."""
    return [
        _crd(
            "Queue",
            "queues",
            "Cluster",
            queue_schema(),
            ["kq"],
            [("Parent", "string", ".spec.parent"), ("Priority", "integer", ".spec.priority")],
        ),
        _crd(
            "PodGroup",
            "podgroups",
            "Namespaced",
            podgroup_schema(),
            ["kpg"],
            [
                ("MinMember", "integer", ".spec.minMember"),
                ("Queue", "string", ".spec.queue"),
                ("Phase", "string", ".status.phase"),
            ],
        ),
        _crd(
            "Device",
            "devices",
            "Cluster",
            device_schema(),
            ["kdev"],
            # What the node agent last found: `kubectl get devices` lists the sick nodes.
            [
                ("Healthy", "string", '.status.conditions[?(@.type=="GpusHealthy")].status'),
                ("Why", "string", '.status.conditions[?(@.type=="GpusHealthy")].reason'),
            ],
        ),
        _crd(
            "Workspace",
            "workspaces",
            "Namespaced",
            workspace_schema(),
            ["kws"],
            [
                ("Instance", "string", ".resource.instanceType"),
                ("Preset", "string", ".inference.preset.name"),
                ("Replicas", "integer", ".inference.replicas"),
            ],
        ),
    ]
