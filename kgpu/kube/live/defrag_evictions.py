"""Carrying out defragmentation's moves: each moved pod evicted through the Eviction API,
with an event saying why, and counted.

A move is ``POST pods/{name}/eviction`` (an ``Eviction`` of ``policy/v1beta1`` on v1.20
servers, ``policy/v1`` where served), never a plain delete: the API server applies the
pod's PodDisruptionBudget at the moment of the eviction, whatever the scheduler's cache
said. Its ``deleteOptions`` carry the pod's uid as a precondition, so that a pod deleted
and created again under the same name is never the one evicted.

Answers:

- granted: a Normal event ``Defragmented`` on the pod, whose message says which pending
  pod it makes room for, on which node and GPUs, where the pod is to go and why each rule
  lets it move; the next move of the step follows;
- 429 Too Many Requests: a budget allows no disruption now. The move is not made, nor the
  step's later moves (the room would not be whole); a later round plans again;
- 404 or 409: the pod is gone, or replaced: the room it held is free, the step goes on;
- anything else: logged, and the step stops.

Once every move of a step is granted, a Normal event ``Defragmenting`` on the pending pod
says which pods leave which node for it. Only the leader evicts, and it asks again just
before each call, as binders do.

``kgpu_defrag_evictions_total`` counts the evictions asked, by result (``evicted``,
``refused``, ``gone``, ``error``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from kgpu.actions.defrag_planner import Move, Step
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.event_recorder import NORMAL, EventRecorder
from kgpu.kube.api.resource_types import PODS, meta, uid
from kgpu.model.pod import PodKey

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
EVICTED, REFUSED, GONE, ERROR = "evicted", "refused", "gone", "error"
TOO_MANY_REQUESTS = 429


class DefragMetrics:
    """Defragmentation's counters, in the scheduler's registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.evictions = Counter(
            "kgpu_defrag_evictions",
            "Evictions defragmentation asked for, by result: evicted (the pod moves), "
            "refused (429, a PodDisruptionBudget allows no disruption now: planned again "
            "later), gone (404 or 409: the pod had left), error",
            ["result"],
            registry=r,
        )
        self.rounds = Counter(
            "kgpu_defrag_rounds",
            "Defragmentation rounds by outcome: planned (moves handed over), nothing (no "
            "move lets a waiting pod fit), held (earlier moves still under way), limited "
            "(the evictions per minute are spent)",
            ["outcome"],
            registry=r,
        )
        for result in (EVICTED, REFUSED, GONE, ERROR):
            self.evictions.labels(result)
        for outcome in ("planned", "nothing", "held", "limited"):
            self.rounds.labels(outcome)


def eviction_body(pod: Obj, api_version: str) -> dict[str, Any]:
    m = meta(pod)
    return {
        "apiVersion": api_version,
        "kind": "Eviction",
        "metadata": {"name": m.get("name"), "namespace": m.get("namespace") or "default"},
        "deleteOptions": {"preconditions": {"uid": uid(pod)}},
    }


class MoveEvictor:
    """Evicts the moves of one step at a time, in order (called on a pool's thread)."""

    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        metrics: DefragMetrics,
        is_leader: Callable[[], bool],
        api_version: str,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.metrics = metrics
        self.is_leader = is_leader
        self.api_version = api_version

    def carry_out(
        self,
        step: Step,
        pods: Mapping[PodKey, Obj],
        node_name: Callable[[int], str],
        done: Callable[[Move, str], None],
    ) -> None:
        """Evict ``step``'s moves (``pods``: their objects by key) until one is not granted;
        ``done(move, result)`` is told each move's result, and "" for each not tried."""
        left = list(step.moves)
        while left:
            move = left.pop(0)
            result = self._evict(pods[move.pod.key], move)
            done(move, result)
            if result not in (EVICTED, GONE):
                for rest in left:
                    done(rest, "")
                return
        where = node_name(step.node)
        moved = ", ".join(f"{m.pod.key} (to node {node_name(m.target)})" for m in step.moves)
        pending = pods.get(step.pending.key)
        if pending is not None:
            self.recorder.emit(
                pending,
                NORMAL,
                "Defragmenting",
                f"made room on node {where}: moved {len(step.moves)} pod(s) off it: {moved}",
            )

    def _evict(self, pod: Obj, move: Move) -> str:
        if not self.is_leader():
            log.info("%s: not moved, no longer the leader", move.pod.key)
            return ERROR
        m = meta(pod)
        namespace, name = str(m.get("namespace") or "default"), str(m.get("name"))
        path = PODS.path(namespace, name, "eviction")
        try:
            self.client.request("POST", path, body=eviction_body(pod, self.api_version))
        except (NotFound, Conflict):
            result = GONE
        except KubeError as exc:
            result = REFUSED if exc.status == TOO_MANY_REQUESTS else ERROR
            if result == REFUSED:
                log.info("%s: not moved now, the API server refused: %s", move.pod.key, exc)
            else:
                log.warning("%s: eviction for defragmentation failed: %s", move.pod.key, exc)
        else:
            result = EVICTED
            self.recorder.emit(pod, NORMAL, "Defragmented", f"Defragmentation {move.reason}")
            log.info("%s: %s", move.pod.key, move.reason)
        self.metrics.evictions.labels(result).inc()
        return result
