"""Typed, Kubernetes-free data: resources, GPU requests, nodes, pods, taints."""
