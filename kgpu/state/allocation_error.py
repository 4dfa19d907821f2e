"""The error for an impossible change to a ClusterState.

Beside :mod:`kgpu.state.records`, not in it: that module is compiled, and the compiled
build cannot derive a class from ``RuntimeError``."""

from __future__ import annotations


class AllocationError(RuntimeError):
    """An allocate or release that would break the state's invariants (a bug, not bad input)."""
