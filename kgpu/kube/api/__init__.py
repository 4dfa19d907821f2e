"""Calls to the Kubernetes API server: the client and its watches, informers (cached lists),
leader election on a Lease, Events, back-off, the resource types and the error tree."""
