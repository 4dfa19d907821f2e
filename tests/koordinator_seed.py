"""Koordinator's seed examples (seed 002, "Fine-grained Device Scheduling"), literally as
the seed writes them: its five pod requests, its Device, and its node's resources (with
``"32GB"``, which is no Kubernetes quantity, written ``32Gi`` where an API server must take
it). Shared by the unit, simulation and end-to-end tests of kgpu.kube.anchors.koordinator.
"""

from __future__ import annotations

from typing import Any

import yaml

Obj = dict[str, Any]

# "Device resource dimensions": node A's 4 GPUs of 8GB each, as koordlet reports them.
NODE_STATUS = """
status:
  capacity:
    kubernetes.io/gpu-core: 400
    kubernetes.io/gpu-memory: "32GB"
    kubernetes.io/gpu-memory-ratio: 400
  allocatable:
    kubernetes.io/gpu-core: 400
    kubernetes.io/gpu-memory: "32GB"
    kubernetes.io/gpu-memory-ratio: 400
"""

# "User apply device resources scenarios", in the seed's order.
REQUESTS = {
    "compatible": """
resources:
  requests:
    nvidia.com/gpu: "2"
    cpu: "4"
    memory: "8Gi"
""",
    "half": """
resources:
   requests:
    kubernetes.io/gpu: "50"
    cpu: "4"
    memory: "8Gi"
""",
    "core-ratio": """
resources:
  requests:
    kubernetes.io/gpu-core: "50"
    kubernetes.io/gpu-memory-ratio: "60"
    cpu: "4"
    memory: "8Gi"
""",
    "core-memory": """
resources:
  requests:
    kubernetes.io/gpu-core: "60"
    kubernetes.io/gpu-memory: "4Gi"
    cpu: "4"
    memory: "8Gi"
""",
    "rdma": """
resources:
  requests:
    kubernetes.io/rdma: "100"
    cpu: "4"
    memory: "8Gi"
""",
}

# "CRD Example".
DEVICE = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata:
  name: node-1
  annotations:
    node.koordinator.sh/gpu-checkpoints: |-
      [
        {
          "podUID": "fa8983dc-bb76-4eeb-8dcc-556fbd44d7ce",
          "containerName": "cuda-container",
          "resourceName": "nvidia.com/gpu",
          "deviceIDs": ["GPU-36b27e44-b086-46f7-f2dc-73c36dc65991"]
        }
      ]
spec:
  devices:
  - health: true
    id: GPU-98583a5c-c155-9cf6-f955-03c189d3dbfb
    minor: 0
    resources:
      kubernetes.io/gpu-core: "100"
      kubernetes.io/gpu-memory: 15472384Ki
      kubernetes.io/gpu-memory-ratio: "100"
    type: gpu
  - health: true
    id: GPU-7f6410b9-bdf7-f9a5-de09-aa5ec31a7124
    minor: 1
    resources:
      kubernetes.io/gpu-core: "100"
      kubernetes.io/gpu-memory: 15472384Ki
      kubernetes.io/gpu-memory-ratio: "100"
    type: gpu
status: {}
"""


def seed_status(memory: str = "32Gi") -> Obj:
    """The seed's node status, its ``32GB`` written ``memory``."""
    status: Obj = yaml.safe_load(NODE_STATUS.replace('"32GB"', f'"{memory}"'))["status"]
    return status


def node(name: str, allocatable: Obj, labels: dict[str, str] | None = None) -> Obj:
    """A Node whose status koordlet (and the kubelet) filled: CPU, memory and ``allocatable``."""
    resources = {"cpu": "64", "memory": "256Gi", "pods": "110", **allocatable}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def node_a(name: str = "node-a") -> Obj:
    """The seed's node A (4 GPUs of 8Gi, Koordinator's resources only) with its RDMA and
    FPGA ("kubernetes.io/rdma: 100, kubernetes.io/fpga: 100")."""
    allocatable = {k: str(v) for k, v in seed_status()["allocatable"].items()}
    return node(name, {**allocatable, "kubernetes.io/rdma": "100", "kubernetes.io/fpga": "100"})


def node_1(name: str = "node-1") -> Obj:
    """The node of the seed's Device: two GPUs of 15472384Ki, as koordlet sums them."""
    return node(
        name,
        {
            "kubernetes.io/gpu-core": "200",
            "kubernetes.io/gpu-memory": "30944768Ki",
            "kubernetes.io/gpu-memory-ratio": "200",
        },
    )


def device(name: str = "node-1") -> Obj:
    obj: Obj = yaml.safe_load(DEVICE)
    obj["metadata"]["name"] = name
    return obj


def pod(kind: str, name: str = "", namespace: str = "default", scheduler: str = "") -> Obj:
    """A pod of one container whose ``resources`` are the seed's ``kind`` request. Its
    extended resources are also its limits: the API server refuses a pod without them
    ("Limit must be set for non overcommitable resources"), whoever schedules it."""
    container: Obj = {"name": "main", "image": "busybox", **yaml.safe_load(REQUESTS[kind])}
    requests = container["resources"]["requests"]
    container["resources"]["limits"] = {
        k: v for k, v in requests.items() if k not in ("cpu", "memory")
    }
    spec: Obj = {"containers": [container]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name or kind, "namespace": namespace},
        "spec": spec,
    }
