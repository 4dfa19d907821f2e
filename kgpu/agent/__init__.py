"""The node agent: discovers a node's GPUs through NVML and reports them as its ``Device``.

``kgpu agent`` runs on every GPU node (a DaemonSet of ``kgpu manifests``). Each round it
reads the GPUs (:mod:`kgpu.agent.nvml` through the :class:`~kgpu.agent.probe.GpuProbe`
seam), builds the node's inventory with its GPU link matrix (:mod:`kgpu.agent.inventory`),
reads which devices the kubelet gave pods (:mod:`kgpu.agent.kubelet`), and writes the
``Device`` resource when any of it changed (:mod:`kgpu.agent.publish`): the scheduler reads
UUIDs, health and topology from there.
"""
