"""The pod-resources API v1alpha1 (kubelets before 1.20 too), generated from api.proto."""
