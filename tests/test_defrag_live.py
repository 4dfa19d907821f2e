"""Defragmentation in ``kgpu run``, over real HTTP against the API double: which pods are
evicted (through pods/eviction, with PodDisruptionBudgets applied by the double as v1.20
applies them), the events and metrics that say so, and the rate limit.

The scene: two nodes of 2 GPUs, each with one GPU held; a pod asking 2 GPUs waits,
though 2 GPUs sit idle, one on each node. Moving ``mover`` (node n1) to n2 makes room.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.config import builtin_profiles
from kgpu.kube.api.client import Timeouts
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, signed, wait_until
from tests.schedulers import fast_options, schedulers
from tests.test_kube_queues import in_queue, queue_obj

Start = Callable[..., RunningScheduler]
HOUR_AGO = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-rs",
         "controller": True}  # fmt: skip
EVICTION = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction")


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble(crds=True, dra=False) as d:
        yield d


def profile_file(directory: Path, **defrag: Any) -> str:
    """The kgpu policy with ``defragmentation`` as given, as a profile file."""
    body = builtin_profiles()["kgpu"].model_dump(mode="json", by_alias=True, exclude={"name"})
    body["defragmentation"] = defrag
    path = directory / "defrag.yaml"
    path.write_text(yaml.safe_dump({"kgpu-defrag": body}))
    return str(path)


@pytest.fixture
def start(double: KubeDouble, tmp_path: Path) -> Iterator[Start]:
    def options(defrag: dict[str, Any] | None) -> dict[str, Any]:
        policy = profile_file(tmp_path, **defrag) if defrag is not None else "kgpu"
        return {
            "metrics_port": 0,
            "metrics_host": "127.0.0.1",
            "leader_elect": False,
            "timeouts": Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0),
            "loop": LoopConfig(
                policy=policy, unschedulable_retry=0.3, idle_wait=0.05, event_repeat=0.0
            ),
        }

    with schedulers() as run:
        yield lambda defrag=None: run(fast_options(double, tmp_path, "s1", **options(defrag)))


def running(
    double: KubeDouble,
    name: str,
    node: str,
    minor: int,
    *,
    started: str = HOUR_AGO,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "default",
) -> None:
    """A pod of ours on one GPU of ``node``, running since ``started``, owned by a
    ReplicaSet (which would start it again once evicted), at priority 0."""
    note = {"gpu": [{"minor": minor, "resources": {"kubernetes.io/gpu-core": 100}}]}
    notes = {"kgpu.io/device-allocation": json.dumps(note), **(annotations or {})}
    pod = pod_obj(name, namespace, gpus=1, node=node, annotations=notes, priority=0)
    pod["metadata"]["labels"] = labels or {}
    pod["metadata"]["ownerReferences"] = [OWNER]
    pod["status"] = {"phase": "Running", "startTime": started}
    double.put(signed(double, pod))


def fragmented(double: KubeDouble, **mover: Any) -> None:
    """n1 and n2, 2 GPUs each; ``mover`` on n1, a pod that may not move on n2; ``big``
    (2 GPUs) waits."""
    for node in ("n1", "n2"):
        double.put(node_obj(node, gpus=2))
    running(double, "mover", "n1", 0, **mover)
    running(double, "anchor", "n2", 0, annotations={"kgpu.io/preemptible": "false"})
    double.put(pod_obj("big", gpus=2))


def budget(name: str, allowed: int, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default", "generation": 1},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}, **spec},
        "status": {"disruptionsAllowed": allowed, "observedGeneration": 1},
    }


def evictions(double: KubeDouble) -> list[tuple[str, int]]:
    """Each eviction asked: the pod and the status answered."""
    return [
        (m.group(2), r.status)
        for r in double.requests
        if r.method == "POST" and (m := EVICTION.fullmatch(r.path))
    ]


def events(double: KubeDouble, reason: str) -> list[str]:
    return [
        f"{e['involvedObject']['name']}: {e['message']}"
        for e in double.objects("events")
        if e["reason"] == reason
    ]


def metric(scheduler: RunningScheduler, line: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics") as answer:
        text = answer.read().decode()
    found = [x for x in text.splitlines() if x.startswith(line + " ")]
    return float(found[0].split()[-1]) if found else 0.0


ROUNDS = 'kgpu_defrag_rounds_total{{outcome="{}"}}'
EVICTIONS = 'kgpu_defrag_evictions_total{{result="{}"}}'


def test_a_movable_pod_is_evicted_and_the_waiting_pod_takes_its_room(
    double: KubeDouble, start: Start
) -> None:
    fragmented(double)
    scheduler = start({"enabled": True})
    wait_until(lambda: double.bound().get("big") == "n1")
    assert double.get("pods", "mover", "default") is None
    assert evictions(double) == [("mover", 201)]
    assert not [r for r in double.requests if r.method == "DELETE" and "mover" in r.path]
    assert double.get("pods", "anchor", "default") is not None
    wait_until(lambda: len(events(double, "Defragmented")) == 1)
    [said] = events(double, "Defragmented")
    assert said.startswith(
        "mover: Defragmentation moves pod default/mover off node n1: frees GPU 0 (1000 milli) "
        "so that pending pod default/big (2 GPUs) fits on GPU 0, 1 there; placed again on "
        "node n2 GPU 1; preemptible at priority 0 < 100; priority 0 <= 0; ran 1h"
    )
    assert said.endswith("no PodDisruptionBudget selects it")
    wait_until(lambda: len(events(double, "Defragmenting")) == 1)
    assert events(double, "Defragmenting") == [
        "big: made room on node n1: moved 1 pod(s) off it: default/mover (to node n2)"
    ]
    assert metric(scheduler, EVICTIONS.format("evicted")) == 1.0
    assert metric(scheduler, ROUNDS.format("planned")) == 1.0


def test_nothing_moves_with_the_switch_off(double: KubeDouble, start: Start) -> None:
    fragmented(double)
    start()
    wait_until(lambda: sum(e.startswith("big:") for e in events(double, "FailedScheduling")) >= 3)
    assert evictions(double) == []
    assert double.get("pods", "mover", "default") is not None
    assert "big" not in double.bound()
    assert not [r for r in double.requests if "poddisruptionbudgets" in r.path]


@pytest.mark.parametrize(
    ("scene", "rule"),
    [
        ("budget", "disruption budget"),
        ("gang", "gang minimum"),
        ("young", "min-runtime"),
        ("priority", "priority"),
        # a pod no controller owns would not start again: it is not offered at all
        ("bare", ""),
        # a budget that cannot be read keeps every pod of its namespace
        ("unreadable", "disruption budget"),
    ],
)
def test_a_protected_pod_stays(
    double: KubeDouble, start: Start, caplog: pytest.LogCaptureFixture, scene: str, rule: str
) -> None:
    caplog.set_level(logging.INFO, "kgpu.kube.live.defrag_live")
    if scene == "budget":
        double.put(budget("keep", 0, {"app": "mover"}))
        fragmented(double, labels={"app": "mover"})
    elif scene == "gang":
        group = {"apiVersion": "kgpu.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "g", "namespace": "default"},
                 "spec": {"minMember": 2}}  # fmt: skip
        double.put(group)
        fragmented(double, annotations={"scheduling.k8s.io/group-name": "g"})
        double.put(node_obj("n3", gpus=1))  # full with the gang's other pod
        running(double, "mate", "n3", 0, annotations={"scheduling.k8s.io/group-name": "g"})
    elif scene == "young":
        minute_ago = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        fragmented(double, started=minute_ago)
    elif scene == "unreadable":
        bad = budget("odd", 1, {})
        bad["spec"]["minAvailable"] = "150%"
        double.put(bad)
        fragmented(double)
    else:
        fragmented(double)
        pod = double.get("pods", "mover", "default") or {}
        if scene == "priority":
            pod["spec"]["priority"] = 5
        else:
            del pod["metadata"]["ownerReferences"]
        double.put(pod)
    scheduler = start({"enabled": True})
    wait_until(lambda: metric(scheduler, ROUNDS.format("nothing")) >= 2)
    assert evictions(double) == []
    # The anchor on n2 is refused as not preemptible; the mover by the rule under test.
    refused = ", ".join(f"{r} 1" for r in sorted([rule, "preemptibility"]) if r)
    said = [r.getMessage() for r in caplog.records if "no moves for default/big" in r.getMessage()]
    assert said == [
        "defragmentation: no moves for default/big: no node near fitting holds a movable pod "
        f"(pods refused: {refused})"
    ]
    assert double.get("pods", "mover", "default") is not None
    assert "big" not in double.bound()
    assert events(double, "Defragmented") == []
    wait_until(lambda: bool(events(double, "NotDefragmenting")))
    assert events(double, "NotDefragmenting") == [
        "big: defragmentation made no room: no node near fitting holds a movable pod "
        f"(pods refused: {refused})"
    ]


def test_no_pod_moves_for_a_pod_its_queue_holds_back(double: KubeDouble, start: Start) -> None:
    """The first test's scene, but big's queue may hold 2 GPUs and the anchor holds one of
    them: room made for big would not let it run, so the mover stays."""
    double.put(queue_obj("team", limit={"gpu": 2}))
    for node in ("n1", "n2"):
        double.put(node_obj(node, gpus=2))
    running(double, "mover", "n1", 0)
    held = {"kgpu.io/preemptible": "false"}
    running(double, "anchor", "n2", 0, labels={"kgpu.io/queue": "team"}, annotations=held)
    double.put(in_queue("big", "team", gpus=2))
    start({"enabled": True})
    quota = "big: queue team: gpu requested 2, allocated 1, quota 2"
    wait_until(lambda: events(double, "FailedScheduling").count(quota) >= 3)
    assert evictions(double) == []
    assert double.get("pods", "mover", "default") is not None
    assert events(double, "NotDefragmenting") == []


def test_a_refused_eviction_moves_nothing_and_is_tried_again_later(
    double: KubeDouble, start: Start
) -> None:
    """The cache said the budget allows one; the server, asked, says 429 (the controller
    took it back meanwhile). Later it allows one again, and the move is made."""
    double.put(budget("keep", 1, {"app": "mover"}))
    fragmented(double, labels={"app": "mover"})

    def taken_back() -> None:
        double.put(budget("keep", 0, {"app": "mover"}))

    double.before("POST", r".*/pods/mover/eviction", taken_back)
    scheduler = start({"enabled": True})
    wait_until(lambda: metric(scheduler, EVICTIONS.format("refused")) == 1.0)
    assert evictions(double) == [("mover", 429)]
    assert double.get("pods", "mover", "default") is not None
    assert events(double, "Defragmented") == []
    wait_until(lambda: metric(scheduler, ROUNDS.format("nothing")) >= 1)  # the cache says 0
    double.put(budget("keep", 1, {"app": "mover"}))
    wait_until(lambda: double.bound().get("big") == "n1")
    assert evictions(double) == [("mover", 429), ("mover", 201)]
    status = (double.get("poddisruptionbudgets", "keep", "default") or {})["status"]
    assert status["disruptionsAllowed"] == 0 and list(status["disruptedPods"]) == ["mover"]
    assert metric(scheduler, EVICTIONS.format("evicted")) == 1.0


def test_evictions_keep_to_the_rate_limit(double: KubeDouble, start: Start) -> None:
    fragmented(double)
    for node in ("n3", "n4"):
        double.put(node_obj(node, gpus=2))
    running(double, "mover2", "n3", 0)
    running(double, "anchor2", "n4", 0, annotations={"kgpu.io/preemptible": "false"})
    double.put(pod_obj("big2", gpus=2))
    scheduler = start({"enabled": True, "maxEvictionsPerMinute": 1})
    wait_until(lambda: metric(scheduler, ROUNDS.format("limited")) >= 1)
    wait_until(lambda: len([p for p in ("big", "big2") if p in double.bound()]) == 1)
    assert len(evictions(double)) == 1
    assert len({"mover", "mover2"} - {p["metadata"]["name"] for p in double.objects("pods")}) == 1
    assert metric(scheduler, EVICTIONS.format("evicted")) == 1.0


def test_a_bad_budget_is_reported_and_refused_alone(double: KubeDouble, start: Start) -> None:
    bad = budget("odd", 1, {"app": "x"})
    bad["metadata"]["namespace"] = "team-b"
    bad["spec"]["selector"] = {
        "matchExpressions": [{"key": "app", "operator": "Sometimes", "values": ["x"]}]
    }
    double.put(bad)
    fragmented(double)
    start({"enabled": True})
    wait_until(lambda: double.bound().get("big") == "n1")  # default's pods move all the same
    wait_until(lambda: len(events(double, "InvalidPodDisruptionBudget")) == 1)
    assert events(double, "InvalidPodDisruptionBudget") == [
        "odd: PodDisruptionBudget team-b/odd: spec.selector.matchExpressions[0].operator is "
        '"Sometimes", expected one of In, NotIn, Exists, DoesNotExist; defragmentation moves '
        "no pod of namespace team-b while it cannot be read"
    ]
    [event] = [e for e in double.objects("events") if e["reason"] == "InvalidPodDisruptionBudget"]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "PodDisruptionBudget"


def test_why_no_room_is_an_event_once_per_reason_not_per_figure(
    double: KubeDouble, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """n1 has 2 GPUs, one held by a pod that stays; big (2 GPUs) waits with 1,000 milli idle.
    A share then takes 500 of them: the log says the new figure, the event stays one."""
    caplog.set_level(logging.INFO, "kgpu.kube.live.defrag_live")
    double.put(node_obj("n1", gpus=2))
    running(double, "anchor", "n1", 0, annotations={"kgpu.io/preemptible": "false"})
    double.put(pod_obj("big", gpus=2))
    start({"enabled": True})

    def said(idle: int) -> bool:
        return any(f"{idle} milli-GPU idle" in r.getMessage() for r in caplog.records)

    wait_until(lambda: said(1000))
    double.put(pod_obj("share", fraction="0.5"))
    wait_until(lambda: said(500))
    assert events(double, "NotDefragmenting") == [
        "big: defragmentation made no room: 1000 milli-GPU idle on the schedulable nodes, it "
        "asks 2000: no move makes room that is not there"
    ]
