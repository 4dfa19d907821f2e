"""The pod-resources API v1 (kubelet 1.20+), generated from api.proto."""
