"""Node plugins: the PreFilter, Filter, Score and GPU-choice plugins of the pod scheduler
(``kgpu.framework.interfaces``), which judge one pod against the cluster's nodes."""
