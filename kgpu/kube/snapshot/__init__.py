"""The informers' caches into one session's input: a fresh cluster state with every bound pod on
the devices its annotation records, the pending pods, and the queues and jobs they belong to
(shared by the live scheduler, ``kgpu explain`` and ``kgpu simulate manifests``)."""
