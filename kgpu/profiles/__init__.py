"""The built-in profiles, as package data: the placement policies (``policies.yaml``) and
the node-group profiles of workspaces (``workspaces.yaml``, read by the workspace
placement check)."""
