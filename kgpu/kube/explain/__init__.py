"""``kgpu explain``: where a pod runs and on which GPUs, or why it is pending, and the nodes
that came closest to taking it."""
