"""Typed, Kubernetes-free data: resources and quantities, GPU requests and devices, nodes,
pods, taints and topology, queues, jobs, cards and fair shares, workspaces, node pools,
and the decisions a session returns (``decision``)."""
