"""The autoscaler's Kubernetes side (the planner itself is :mod:`kgpu.autoscale`): trigger pods,
Karpenter's NodePools and NodeClaims read, and the live loop that drives the controller."""
