"""The capacity-card seed's (004) three examples, as its text writes them.

Example 1 (Queue and Job) is whole YAML and is used literally. Examples 2 and 3 show only
the parts that change: example 2's Job lacks ``apiVersion`` and ``kind`` and example 3's
Queue and Job lack those and their names, which are added here (and nothing else): example
3's Job names no queue, so it goes to ``default`` as Volcano's webhook makes it, and its
Queue is named ``default``.
"""

from __future__ import annotations

from typing import Any

import yaml

A100 = "NVIDIA-A100-80GB"
H100 = "NVIDIA-H100-80GB"
MPS = f"{A100}/mps-80g*1/8"

EXAMPLE_1_QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: team-a
  annotations:
    volcano.sh/card.quota: '{"NVIDIA-A100-80GB": 5}'
spec:
  capability:
    cpu: "100"
    memory: "500Gi"
"""

EXAMPLE_1_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: training
  annotations:
    volcano.sh/card.request: '{"NVIDIA-A100-80GB": 4}'
spec:
  queue: team-a
  minAvailable: 4
  tasks:
    - replicas: 4
      template:
        metadata:
          annotations:
            volcano.sh/card.name: "NVIDIA-A100-80GB"
        spec:
          containers:
            - name: worker
              resources:
                limits:
                  nvidia.com/gpu: 1
"""

EXAMPLE_2_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: flexible-training
  annotations:
    volcano.sh/card.request: '{"NVIDIA-A100-80GB|NVIDIA-H100-80GB": 4}'
spec:
  queue: team-a
  minAvailable: 1
  tasks:
    - replicas: 4
      template:
        metadata:
          annotations:
            volcano.sh/card.name: "NVIDIA-A100-80GB|NVIDIA-H100-80GB"
        spec:
          containers:
            - name: worker
              resources:
                limits:
                  nvidia.com/gpu: 1
"""

EXAMPLE_3_NODE_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-A100-80GB",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/gpu.replicas": "8",
}
EXAMPLE_3_ALLOCATABLE = {"nvidia.com/gpu.shared": "32"}

EXAMPLE_3_QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: default
  annotations:
    volcano.sh/card.quota: '{"NVIDIA-A100-80GB/mps-80g*1/8": 32}'
"""

EXAMPLE_3_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: inference
  annotations:
    volcano.sh/card.request: '{"NVIDIA-A100-80GB/mps-80g*1/8": 16}'
spec:
  tasks:
    - replicas: 16
      template:
        metadata:
          annotations:
            volcano.sh/card.name: "NVIDIA-A100-80GB/mps-80g*1/8"
        spec:
          containers:
            - resources:
                limits:
                  nvidia.com/gpu.shared: 1
"""


def load(text: str) -> dict[str, Any]:
    obj = yaml.safe_load(text)
    assert isinstance(obj, dict)
    return obj


def with_replicas(text: str, replicas: int) -> str:
    """The job with ``replicas`` pods in its task (the seed's quota test: 6 asked of 5)."""
    return text.replace("- replicas: 4", f"- replicas: {replicas}")
