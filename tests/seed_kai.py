"""KAI Scheduler's examples as seed 001 writes them (its ``gpu-memory.yaml`` and
``gpu-sharing.yaml``, indented as YAML needs; the seed's text lost its indentation), and the
queues its ``kai.scheduler/queue: test`` label needs: KAI's quick-start ``queues.yaml``, a
parent ``default`` and its child ``test``, unlimited."""

from __future__ import annotations

GPU_MEMORY = """\
# gpu-memory.yaml
apiVersion: v1
kind: Pod
metadata:
  name: gpu-sharing
  labels:
    kai.scheduler/queue: test
  annotations:
    gpu-memory: "2000" # in Mib
spec:
  schedulerName: kai-scheduler
  containers:
  - name: ubuntu
    image: ubuntu
    args: ["sleep", "infinity"]
"""

GPU_SHARING = """\
# gpu-sharing.yaml
apiVersion: v1
kind: Pod
metadata:
  name: gpu-sharing
  labels:
    kai.scheduler/queue: test
  annotations:
    gpu-fraction: "0.5"
spec:
  schedulerName: kai-scheduler
  containers:
  - name: ubuntu
    image: ubuntu
    args: ["sleep", "infinity"]
"""

QUEUES = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: default
spec:
  resources:
    cpu:
      quota: -1
      limit: -1
      overQuotaWeight: 1
    gpu:
      quota: -1
      limit: -1
      overQuotaWeight: 1
    memory:
      quota: -1
      limit: -1
      overQuotaWeight: 1
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: test
spec:
  parentQueue: default
  resources:
    cpu:
      quota: -1
      limit: -1
      overQuotaWeight: 1
    gpu:
      quota: -1
      limit: -1
      overQuotaWeight: 1
    memory:
      quota: -1
      limit: -1
      overQuotaWeight: 1
"""
