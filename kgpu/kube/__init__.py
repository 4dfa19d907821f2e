"""The Kubernetes edge: Kubernetes objects to model objects, and (later) the live scheduler."""
