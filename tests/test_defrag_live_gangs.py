"""Defragmentation in ``kgpu run`` for a gang, over real HTTP against the API double: the
moves that let all the pods it needs start are evicted together, and none where room for
some of them is all moves can make.

The scene: n1 and n2 of 2 GPUs each hold a movable pod on GPU 0; n3 and n4 of one GPU are
idle. A gang of two pods asking 2 GPUs each fits nowhere, though 4 GPUs sit idle: moving
each movable pod to a small node frees n1 and n2 for it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from kgpu.config import builtin_profiles
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, wait_until
from tests.schedulers import fast_options, schedulers
from tests.test_defrag_live import (  # noqa: F401  (fixtures)
    EVICTIONS,
    ROUNDS,
    Start,
    double,
    events,
    evictions,
    metric,
    running,
    start,
)
from tests.test_kube_queues import member, podgroup_obj, queue_obj

GANG = "default/train"


def scene(
    api: KubeDouble,
    *,
    small_nodes: int = 2,
    members: int = 2,
    required: str = "",
    limit: int | None = None,
) -> None:
    for node in ("n1", "n2"):
        api.put(node_obj(node, gpus=2))
    for i in range(small_nodes):
        api.put(node_obj(f"n{3 + i}", gpus=1))
    running(api, "mover1", "n1", 0)
    running(api, "mover2", "n2", 0)
    quota = {"limit": {"gpu": limit}} if limit is not None else {}
    api.put(queue_obj("team", deserved={"gpu": 8}, **quota))
    api.put(podgroup_obj("train", "team", members))
    for i in range(members):
        pod = member(f"g{i}", "train", gpus=2)
        if required:
            pod["metadata"]["annotations"]["kgpu.io/topology-required"] = required
        api.put(pod)


def test_a_waiting_gang_gets_the_moves_that_start_all_its_pods(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    scene(double)
    scheduler: RunningScheduler = start({"enabled": True})
    wait_until(lambda: double.bound() == {"g0": "n1", "g1": "n2"})
    assert sorted(evictions(double)) == [("mover1", 201), ("mover2", 201)]
    wait_until(lambda: len(events(double, "Defragmenting")) == 2)
    assert sorted(events(double, "Defragmenting")) == [
        "g0: made room on node n1: moved 1 pod(s) off it: default/mover1 (to node n3)",
        "g1: made room on node n2: moved 1 pod(s) off it: default/mover2 (to node n4)",
    ]
    assert metric(scheduler, EVICTIONS.format("evicted")) == 2.0


def test_no_pod_moves_for_a_gang_that_moves_cannot_start(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    scene(double, small_nodes=1)  # room for mover1 only: g1 would still have none
    caplog.set_level(logging.INFO, logger="kgpu.kube.live.defrag_live")
    scheduler = start({"enabled": True})
    wait_until(lambda: metric(scheduler, ROUNDS.format("nothing")) >= 2)
    assert evictions(double) == []
    assert sorted(double.bound()) == ["mover1", "mover2"]  # and no gang pod
    said = [r.getMessage() for r in caplog.records if GANG in r.getMessage()]
    why = f"gang {GANG}: a pod moved for default/g1 has nowhere else to go once the gang is in"
    assert said == [f"defragmentation: no moves for {GANG}: {why}"]  # once, every round alike
    wait_until(lambda: bool(events(double, "NotDefragmenting")))
    assert events(double, "NotDefragmenting") == [f"g0: defragmentation made no room: {why}"]


def test_no_pod_moves_for_a_gang_its_queue_holds_back(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    """The first test's scene, but the queue may hold 3 GPUs, and the gang needs 4."""
    scene(double, limit=3)
    start({"enabled": True})
    quota = "g0: queue team: gpu requested 4, allocated 0, quota 3"
    wait_until(lambda: events(double, "FailedScheduling").count(quota) >= 3)
    assert evictions(double) == []
    assert sorted(double.bound()) == ["mover1", "mover2"]
    assert events(double, "NotDefragmenting") == []


def test_a_gang_that_requires_a_topology_domain_gets_no_moves(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The profile declares racks; the gang requires one. The planner makes room pod by
    pod, not within a rack: it is not asked."""
    scene(double, required="rack")
    body = builtin_profiles()["kgpu"].model_dump(mode="json", by_alias=True, exclude={"name"})
    body["defragmentation"] = {"enabled": True}
    body["topology"] = {"levels": [{"name": "rack", "nodeLabel": "example.com/rack"}]}
    path = tmp_path / "racks.yaml"
    path.write_text(yaml.safe_dump({"kgpu-racks": body}))
    caplog.set_level(logging.INFO, logger="kgpu.kube.live.defrag_live")
    loop = LoopConfig(policy=str(path), unschedulable_retry=0.3, idle_wait=0.05, event_repeat=0.0)
    options = fast_options(double, tmp_path, "s1", leader_elect=False, loop=loop)
    with schedulers() as run:
        run(options)
        wait_until(lambda: any(GANG in r.getMessage() for r in caplog.records))
    assert [r.getMessage() for r in caplog.records if GANG in r.getMessage()] == [
        f"defragmentation: no moves for {GANG}: gang {GANG}: it requires a topology domain, "
        "and defragmentation makes room pod by pod, not within a domain"
    ]
    assert evictions(double) == []
