"""The scheduler of a profile over a cluster with DRA objects.

With DRA objects (``PluginContext.dra``) the ``DraClaims`` filter is the profile's last.
What a pod's claims fit depends on devices taken anywhere (slices reachable from all nodes,
claims shared between pods), not only on the node: the scheduler asks it afresh in every
cycle of a pod with claims, after the verdicts kept per shape, which keep serving the pods
without claims (``PodFilterPlugin``). The simulations and ``kgpu explain`` build it so;
without DRA objects it is the profile's scheduler, unchanged.
"""

from __future__ import annotations

from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.plugins import names
from kgpu.plugins.registry import PluginContext, build_scheduler

__all__ = ["dra_scheduler"]


def dra_scheduler(profile: Profile, context: PluginContext) -> Scheduler:
    """The profile's scheduler; with DRA objects (``context.dra``), ``DraClaims`` is its
    last filter, asked afresh for the pods with claims. The simulation and its
    ``--explain`` both build it so."""
    if context.dra is None:
        return build_scheduler(profile, context)
    if names.DRA_CLAIMS not in profile.filters:
        profile = profile.model_copy(update={"filters": (*profile.filters, names.DRA_CLAIMS)})
    return build_scheduler(profile, context)
