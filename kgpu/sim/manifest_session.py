"""Manifests with kgpu Queues or PodGroups, placed by the session ``kgpu run`` would run.

Where the manifests hold a ``Queue`` or a ``PodGroup`` (``kgpu.io/v1alpha1``), pods are not
placed one by one: the pods bound in the manifests (already accounted on their nodes) are
the running tasks, the others the pending ones, and one session runs over them with the
profile's actions (by default enqueue, allocate, backfill, reclaim, preempt), through the
very code the live loop uses (:func:`kgpu.kube.snapshot.session_input.assemble`, then
:func:`kgpu.actions.session_runner.run_session`): the same queue tree, fair shares, gangs,
card quotas, PriorityClass of a PodGroup, victims, and DRA: the claims of the pods it
places are allocated (each pod's devices shown) and their GPUs count in their queues.
So a team can try a Queue or a gang on a copy of its cluster before it creates them.

Jobs of equal priority go by creation time (``metadata.creationTimestamp``), then name, as
live. Pods read without a start time started at the session's clock, so a queue's
min-runtime keeps no one from being a victim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kgpu.actions.session_runner import run_session, session_config
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot, PendingPod
from kgpu.kube.snapshot.session_input import QueueReader, assemble
from kgpu.sim.manifest_dra import render_claims
from kgpu.sim.manifest_results import ManifestRun, PodResult, PodStatus

Obj = Mapping[str, Any]
NOW = 0.0  # the session's clock; nothing in a manifest run depends on the wall clock


def session_results(
    run: ManifestRun,
    scheduler: Scheduler,
    profile: Profile,
    running: Sequence[PendingPod],
    waiting: Sequence[tuple[PendingPod, str]],
    groups: Sequence[Obj],
    classes: Mapping[str, int],
) -> list[PodResult]:
    """The ``waiting`` pods' results (each with its source) from one session over
    ``run.state``, where the ``running`` pods are already accounted. ``groups`` are the
    Queue and PodGroup objects, ``classes`` PriorityClass name → value. Running pods the
    session evicts are marked so among ``run.results``; what could not be used goes to
    ``run.notes``; the session's binds stay in ``run.state``."""

    objects = QueueReader().read(
        [g for g in groups if g.get("kind") == "Queue"],
        [g for g in groups if g.get("kind") == "PodGroup"],
        [{"metadata": {"name": name}, "value": value} for name, value in classes.items()],
    )
    pending = [p for p, _ in waiting]
    made = assemble(CacheSnapshot(run.state, bound=list(running)), pending, {}, objects, now=NOW)
    made.snapshot.dra = run.dra  # the session records the claims of the pods it places
    decided = run_session(made.snapshot, scheduler, session_config(profile))
    run.notes.extend(problem.message for problem in objects.problems)
    evicted = {str(e.pod): e.message for e in decided.evictions}
    run.results[:] = [
        replace(r, status=PodStatus.EVICTED, message=evicted[r.pod]) if r.pod in evicted else r
        for r in run.results
    ]
    binds = {str(b.pod): b for b in decided.binds}
    nominated = {str(n.pod): n for n in decided.nominations}
    why = {str(p.pod): p.message for p in decided.pending}
    why.update({str(k): text for k, (_, text) in made.blocked.items()})
    out: list[PodResult] = []
    for pod, source in waiting:
        key = pod.spec.key
        if key in binds:
            bind = binds[key]
            gpus = tuple(sorted(bind.gpus))
            claims = render_claims(decided.claims.get(key, {}))
            out.append(
                PodResult(
                    key,
                    source,
                    PodStatus.SCHEDULED,
                    bind.node,
                    gpus,
                    bind.gpu_milli,
                    resource_claims=claims,
                )
            )
        elif key in nominated:
            chosen = nominated[key]
            gpus = tuple(sorted(chosen.gpus))
            message = "runs there once the pods evicted for its job are gone"
            milli = pod.spec.gpu.milli
            out.append(
                PodResult(key, source, PodStatus.NOMINATED, chosen.node, gpus, milli, message)
            )
        else:
            out.append(PodResult(key, source, PodStatus.PENDING, message=why.get(key, "")))
    return out
