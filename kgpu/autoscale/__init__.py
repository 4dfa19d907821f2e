"""Autoscaling for GPU demand: plan the nodes that pending GPU pods are missing.

Pure, like the rest of the core: pods and node pools in, trigger pods to create (and a
state machine's actions) out. The Kubernetes edge renders and applies them
(:mod:`kgpu.kube.scaling.trigger_pods`); the simulator plays the autoscaler
(:mod:`kgpu.sim.provisioner`).
"""
