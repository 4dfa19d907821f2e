"""ClusterState: the mutable snapshot that a session reads and changes."""
