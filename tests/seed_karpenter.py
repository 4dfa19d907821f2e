"""Seed 003's NodePool (TensorFusion's ``gpu-a100-pool``), as the seed writes it."""

from __future__ import annotations

NODEPOOL = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu-a100-pool
spec:
  template:
    metadata:
      labels:
        tensor-fusion.ai/gpu-type: "a100"
        tensor-fusion.ai/managed: "true"
    spec:
      requirements:
      - key: karpenter.k8s.aws/instance-gpu-name
        operator: In
        values: ["a100"]
      - key: karpenter.k8s.aws/instance-category
        operator: In
        values: ["p"]
      - key: node.kubernetes.io/instance-type
        operator: In
        values: ["p4d.24xlarge", "p5.48xlarge"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: gpu-a100-nodeclass
      taints:
      - key: nvidia.com/gpu
        value: "true"
        effect: NoSchedule
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 30s
"""
