"""``kgpu run``'s loop over real HTTP against the API double, fed seeded hostile objects
(tests/hostile_objects.py) with good nodes and pods among them (issue #18, point 6).

Bounded: a few batches of at most 60 objects, each against a fresh double and scheduler.
Asserted per batch: the good pods bind, to the good nodes; no pod is bound twice, none to a
node that is not there; no GPU holds more than 1000 milli; Queue ``good``'s status is what
its pods hold; the scheduler is still live and ready; once it has seen a node deleted
mid-batch, a pod only that node would take is not bound."""

from __future__ import annotations

import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from kgpu.kube.api.client import Timeouts
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.hostile_objects import HOSTILE_SETTINGS, Obj, batches, tally
from tests.kube_double import KubeDouble
from tests.kube_objects import gpu_use, wait_until
from tests.schedulers import fast_options, schedulers
from tests.test_hostile_simulate import GOOD, GOOD_QUEUE, good_node, good_pod

# A failing batch is shown whole, however long (with -W error this warning would hide it).
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
HOSTILE_NODES = ("h-node-0", "h-node-1", "h-gone", "h-missing")
GOOD_NODES = ("good-0", "good-1")
# Generous: the machine is shared, and a batch's hostile objects are read in every session.
BIND_TIMEOUT = 60.0


def _get(scheduler: RunningScheduler, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}{path}", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _pod_of(binding_path: str) -> tuple[str, str]:
    """(namespace, name) of .../namespaces/NS/pods/NAME/binding."""
    parts = binding_path.split("/")
    return urllib.parse.unquote(parts[-4]), urllib.parse.unquote(parts[-2])


def _bindings(double: KubeDouble) -> Counter[tuple[str, str]]:
    """Bindings the server accepted, by pod (the dry runs that learn its checks left out)."""
    return Counter(
        _pod_of(r.path)
        for r in double.requests
        if r.path.endswith("/binding") and "dryRun" not in r.query and r.status < 300
    )


def _named_in_events(double: KubeDouble, field: str, value: str) -> set[str]:
    """The objects named by events whose ``field`` (type, reason) is ``value``."""
    return {
        str(e["involvedObject"].get("name"))
        for e in double.objects("events")
        if e.get(field) == value
    }


def _untainted(name: str) -> Obj:
    """A plain GPU node that hostile pods may be placed on."""
    node = good_node(name)
    del node["spec"]
    node["metadata"]["labels"]["kgpu-test/only"] = name
    return node


def _only_on(node: str) -> Obj:
    """A good pod that only ``node`` takes."""
    pod = good_pod("whole", queue=False)
    pod["metadata"]["name"] = "after-gone"
    pod["spec"]["nodeSelector"] = {"kgpu-test/only": node}
    return pod


def _key(obj: Obj) -> tuple[object, object]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace"), meta.get("name")


def _record(pod: Obj) -> object:
    annotations = pod["metadata"].get("annotations")
    return (
        (annotations or {}).get("kgpu.io/device-allocation")
        if isinstance(annotations, dict)
        else None
    )


def _allocated_gpus(double: KubeDouble) -> object:
    status = (double.get("queues", GOOD) or {}).get("status") or {}
    return (status.get("allocated") or {}).get("gpu")


def _put_all(double: KubeDouble, objs: list[Obj]) -> int:
    """Store each object as the API server would; the count the double itself refused
    (an object it cannot key, such as a name that is not text)."""
    refused = 0
    for obj in objs:
        try:
            double.put(obj)
        except (KeyError, TypeError, ValueError):
            refused += 1
    return refused


@settings(HOSTILE_SETTINGS, max_examples=10)
@given(hostile=batches(HOSTILE_NODES, ((2, 6), (20, 40), (2, 6), (1, 4), (1, 4))))
def test_the_scheduler_keeps_binding_good_pods_among_hostile_objects(hostile: list[Obj]) -> None:
    loop = LoopConfig(backoff_initial=0.2, backoff_max=1.0, idle_wait=0.05, event_repeat=0.0)
    timeouts = Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0)
    options: dict[str, Any] = {"metrics_port": 0, "metrics_host": "127.0.0.1"}
    options |= {"leader_elect": False, "timeouts": timeouts, "loop": loop}
    with (
        tempfile.TemporaryDirectory() as directory,
        KubeDouble(crds=True) as double,
        schedulers() as run,
    ):
        for obj in [GOOD_QUEUE, *(good_node(n) for n in GOOD_NODES), _untainted("h-gone")]:
            double.put(obj)
        refused_by_double = _put_all(double, hostile)
        scheduler = run(fast_options(double, Path(directory), **options))
        for name in ("whole", "pair"):
            double.put(good_pod(name, queue=True))
        # A hostile node goes while the scheduler works; nothing may be bound to it after.
        double.remove("nodes", "h-gone")
        # Once the scheduler has seen it go, a pod that only it would take is not bound. (Its
        # first list may come after the removal, or before it, the DELETED event after: it
        # has seen the node go once it has listed, holds the good nodes and not h-gone.)
        nodes = scheduler.nodes
        wait_until(
            lambda: (
                nodes.synced.is_set()
                and nodes.get(GOOD_NODES[0]) is not None
                and nodes.get("h-gone") is None
            ),
            timeout=BIND_TIMEOUT,
        )
        double.put(_only_on("h-gone"))
        try:
            wait_until(lambda: {"whole", "pair"} <= set(double.bound()), timeout=BIND_TIMEOUT)
        except AssertionError:
            raise AssertionError(f"good pods not bound: {double.bound()}") from None
        double.put(good_pod("half", queue=False))
        wait_until(lambda: "half" in double.bound(), timeout=BIND_TIMEOUT)
        # Queue good's status is what its two pods hold: 3 GPUs (half is in no queue).
        wait_until(lambda: _allocated_gpus(double) == "3", timeout=BIND_TIMEOUT)
        assert _get(scheduler, "/healthz") == 200
        assert _get(scheduler, "/readyz") == 200
        wait_until(
            lambda: "after-gone" in _named_in_events(double, "reason", "FailedScheduling"),
            timeout=BIND_TIMEOUT,
        )
        assert "after-gone" not in double.bound()
        bound_by_us = _bindings(double)
        final = {
            (p["metadata"]["namespace"], p["metadata"]["name"]): p for p in double.objects("pods")
        }
        present = {n["metadata"]["name"] for n in double.objects("nodes")}
    twice = {pod: n for pod, n in bound_by_us.items() if n > 1}
    assert not twice, f"bound more than once: {twice}"
    ours = [final[key] for key in bound_by_us if key in final]
    # h-gone was there until just after the scheduler started: binds before then may name it.
    missing = [p for p in ours if p["spec"]["nodeName"] not in {*present, "h-gone"}]
    assert not missing, f"bound to a node that never was: {missing}"
    for name in ("whole", "pair", "half"):
        assert final[GOOD, name]["spec"]["nodeName"] in GOOD_NODES
    # The records kgpu wrote (a forged one that kgpu left in place, on a pod given no GPU,
    # is the reserved annotations' concern, not a GPU this scheduler handed out).
    forged = {_key(obj): _record(obj) for obj in hostile if obj.get("kind") == "Pod"}
    written = [p for p in ours if _record(p) not in (None, forged.get(_key(p)))]
    use = gpu_use(written)
    assert all(milli <= 1000 for milli in use.values()), use
    assert all(minor < 4 for node, minor in use if node in GOOD_NODES), use
    warned = _named_in_events(double, "type", "Warning")
    refused = refused_by_double + sum(
        1 for obj in hostile if str(obj["metadata"].get("name")) in warned
    )
    tally("kgpu run against the API double", len(hostile), refused)
