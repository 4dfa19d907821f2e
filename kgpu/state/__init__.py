"""ClusterState: the mutable snapshot that a session reads and changes; and the models of
GPU fragmentation measured over it (``fragmentation``, ``leftover``)."""
