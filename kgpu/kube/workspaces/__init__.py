"""Workspaces (KAITO-style inference workloads): the placement check the webhook and the
simulator run, the workload objects a placed Workspace becomes, the controller and its runner."""
