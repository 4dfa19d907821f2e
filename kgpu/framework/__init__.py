"""The scheduling framework: extension points as Protocols, Status and reasons, profiles,
the pod and node-group cycles, and the session: its callbacks and the rule each kind
combines by (``session_callbacks``), the actions' typed scratch (``session_scratch``), the
Statement that commits or discards its changes, and its result as data (``session_result``)."""
