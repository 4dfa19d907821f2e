"""The install (``kgpu manifests``): every object ``kubectl apply -f`` creates: the CRDs, the
scheduler and webhook Deployments, the agent DaemonSet, RBAC, and the webhook's certificate."""
