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
from kgpu.kube.live.scheduler_process import RunningScheduler, RunOptions
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
RACK = "example.com/rack"


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


def rack_gang(
    api: KubeDouble,
    directory: Path,
    racks: dict[str, str],
    *,
    gpus: int = 2,
    waiting: tuple[str, ...] = ("g0", "g1"),
) -> RunOptions:
    """Nodes of 2 GPUs in ``racks`` (node: rack), two idle nodes of one GPU in none, a gang
    of two (``waiting`` its pods that wait, of ``gpus`` GPUs each) that requires a rack,
    and a scheduler's options under a profile that declares racks, with defragmentation
    on."""
    for name, rack in racks.items():
        api.put(node_obj(name, gpus=2, labels={RACK: rack}))
    for name in ("n3", "n4"):
        api.put(node_obj(name, gpus=1))
    api.put(queue_obj("team", deserved={"gpu": 8}))
    api.put(podgroup_obj("train", "team", 2))
    for name in waiting:
        pod = member(name, "train", gpus=gpus)
        pod["metadata"]["annotations"]["kgpu.io/topology-required"] = "rack"
        api.put(pod)
    body = builtin_profiles()["kgpu"].model_dump(mode="json", by_alias=True, exclude={"name"})
    body["defragmentation"] = {"enabled": True}
    body["topology"] = {"levels": [{"name": "rack", "nodeLabel": RACK}]}
    path = directory / "racks.yaml"
    path.write_text(yaml.safe_dump({"kgpu-racks": body}))
    loop = LoopConfig(policy=str(path), unschedulable_retry=0.3, idle_wait=0.05, event_repeat=0.0)
    return fast_options(api, directory, "s1", leader_elect=False, loop=loop)


def test_a_gang_that_requires_a_rack_gets_its_moves_in_one_rack(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The profile declares racks; the gang requires one. Rack r1 is one node of 2 GPUs, too
    small for the gang's 4; r2 has two. Each of the three holds a movable pod. Room is made
    in r2 only (made pod by pod, n1 and n2 would be nearest), and the gang starts there."""
    options = rack_gang(double, tmp_path, {"n1": "r1", "n2": "r2", "n5": "r2"})
    for i, node in enumerate(("n1", "n2", "n5"), 1):
        running(double, f"mover{i}", node, 0)
    caplog.set_level(logging.INFO, logger="kgpu.kube.live.defrag_live")
    with schedulers() as run:
        run(options)
        wait_until(lambda: {double.bound().get(g) for g in ("g0", "g1")} == {"n2", "n5"})
    assert sorted(evictions(double)) == [("mover2", 201), ("mover3", 201)]
    assert double.get("pods", "mover1", "default") is not None
    assert not [r for r in caplog.records if "no moves for" in r.getMessage()]


def test_a_gang_whose_rack_moves_cannot_free_is_told_why(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both racks can hold the gang, but in each a pod that may not move holds one node:
    no move is made, and the reason names each rack tried."""
    options = rack_gang(double, tmp_path, {"n1": "r1", "n2": "r1", "n5": "r2", "n6": "r2"})
    stay = {"kgpu.io/preemptible": "false"}
    running(double, "mover1", "n1", 0)
    running(double, "anchor1", "n2", 0, annotations=stay)
    running(double, "mover2", "n5", 0)
    running(double, "anchor2", "n6", 0, annotations=stay)
    caplog.set_level(logging.INFO, logger="kgpu.kube.live.defrag_live")
    with schedulers() as run:
        run(options)
        wait_until(lambda: bool(events(double, "NotDefragmenting")))
    short = (
        "room for 1 of the 2 pods it needs; pod default/g1: no node near fitting holds a "
        "movable pod (pods refused: preemptibility 1)"
    )
    why = f"gang {GANG}: moves start it in none of the domains it may use: " + "; ".join(
        f"rack {rack}: {short}" for rack in ("r1", "r2")
    )
    assert events(double, "NotDefragmenting") == [f"g0: defragmentation made no room: {why}"]
    assert [r.getMessage() for r in caplog.records if GANG in r.getMessage()] == [
        f"defragmentation: no moves for {GANG}: {why}"
    ]
    assert evictions(double) == []


def test_a_gang_with_a_pod_running_gets_its_moves_in_that_pod_s_rack(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
) -> None:
    """g0 runs in rack r2 (n5), beside a movable pod; g1 (one GPU) waits. Rack r1 (n1, two
    movable pods) comes first by name and moves there would fit g1, but the gang joins its
    running pod's rack: the mover on n5 moves, and g1 starts beside g0."""
    options = rack_gang(double, tmp_path, {"n1": "r1", "n5": "r2"}, gpus=1, waiting=("g1",))
    gang = {"scheduling.k8s.io/group-name": "train", "kgpu.io/topology-required": "rack"}
    running(double, "g0", "n5", 0, annotations=gang)
    running(double, "mover1", "n1", 0)
    running(double, "mover2", "n1", 1)
    running(double, "mover3", "n5", 1)
    with schedulers() as run:
        run(options)
        wait_until(lambda: double.bound().get("g1") == "n5")
    assert evictions(double) == [("mover3", 201)]
