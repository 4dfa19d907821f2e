"""``kgpu explain``, without a cluster: the tiers of a pending pod's answer, the near-miss
nodes with what they lack in numbers, bound pods and their GPUs, and the cluster as the
explanation accounts it from API objects."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kgpu.cli import main
from kgpu.config import load_profile
from kgpu.framework.scheduler import Scheduler
from kgpu.kube.explain.explanation import (
    QUEUES_NOT_ENFORCED,
    ExplainError,
    explain_bound,
    explain_from_objects,
    explain_live,
    explain_object,
    explain_pending,
)
from kgpu.kube.explain.near_miss import near_misses
from kgpu.kube.objects.gpu_env import configmap_env
from kgpu.model.devices import Device, NodeDevices
from kgpu.model.taints import Effect
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod

Obj = dict[str, Any]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "manifests"


@pytest.fixture(scope="module")
def scheduler() -> Scheduler:
    from kgpu.plugins.registry import build_scheduler

    return build_scheduler(load_profile("bestfit"))


def fill(
    state: ClusterState, node: int, gpus: list[int], milli: int = 1000, name: str = ""
) -> None:
    """Occupy ``gpus`` of ``node`` with one pod each (``milli`` of each GPU)."""
    for g in gpus:
        pod = make_pod(f"{name or 'fill'}-{node}-{g}", "busy").cpu(0).memory(0)
        spec = (pod.share(milli) if milli < 1000 else pod.gpus(1)).build()
        state.allocate(spec, node, (g,))


def cluster() -> ClusterState:
    """a100-1: 8 A100, 7 busy; a100-2: 8 A100, 6 busy but 2 cpu left; t4: 4 idle T4s;
    cpu-0: no GPU."""
    state = ClusterState(
        [
            make_node("a100-1").gpus(8, "A100").build(),
            make_node("a100-2").gpus(8, "A100").cpu(2000).build(),
            make_node("t4").gpus(4, "T4", 15360).build(),
            make_node("cpu-0").build(),
        ]
    )
    fill(state, 0, list(range(7)))
    fill(state, 1, list(range(6)))
    return state


# ---------------------------------------------------------------------------- pending pods


def test_a_pending_pod_gets_all_four_tiers(scheduler: Scheduler) -> None:
    pod = make_pod("train", "research").cpu(4000).memory(16384).gpus(2, "A100").build()
    answer = explain_pending(cluster(), pod, scheduler)
    assert answer.lines() == [
        "Pod research/train is pending: no node can take it.",
        "  1. request: 2 GPUs (A100), 4 cpu, 16Gi memory",
        f"  2. queue: no queue label (kgpu.io/queue); {QUEUES_NOT_ENFORCED}",
        "  3. nodes: 0/4 nodes are available: 1 insufficient GPU, 1 insufficient cpu, "
        "1 node(s) had a GPU model the pod does not allow, 1 node(s) had no GPU.",
        "  4. nearest nodes:",
        "     a100-1: needs 2 idle GPUs, has 1; cpu ok; memory ok",
        "     a100-2: needs 4 cpu, has 2; GPU ok; memory ok",
        '     t4: GPU model "T4" is not one of A100; cpu ok; memory ok',
    ]


def test_a_near_miss_names_the_gpus_its_device_marks_unhealthy() -> None:
    # What the node agent reports after a GPU is lost and another's memory failed.
    gpus = tuple(Device(m, f"GPU-{m}", healthy=m not in (1, 3)) for m in range(4))
    state = ClusterState(
        [make_node("h100-0").gpus(4, "H100").with_devices(NodeDevices(gpus=gpus)).build()]
    )
    whole = near_misses(state, make_pod().gpus(3).build())
    assert whole[0].line() == (
        "h100-0: needs 3 idle GPUs, has 2 (GPUs 1, 3 marked unhealthy by its Device); "
        "cpu ok; memory ok"
    )
    fill(state, 0, [0, 2], milli=600)
    share = near_misses(state, make_pod().share(500).build())
    assert share[0].lacks == (
        "needs 0.5 of one GPU, the freest GPU has 0.4 free "
        "(GPUs 1, 3 marked unhealthy by its Device)",
    )
    healthy = ClusterState([make_node("h100-1").gpus(4, "H100").build()])
    assert near_misses(healthy, make_pod().gpus(5).build())[0].lacks == (
        "needs 5 idle GPUs, has 4",
    )


def test_near_misses_rank_by_checks_failed_then_by_how_much_is_lacking() -> None:
    state = cluster()
    pod = make_pod().cpu(4000).memory(1024).gpus(2, "A100").build()
    ranked = near_misses(state, pod, limit=4)
    # Each node fails one check; a100-1 lacks half the GPUs and a100-2 half the cpu (0.5 of
    # the request each, so node order decides), the others miss outright (1.0 each).
    assert [(m.node, m.failed) for m in ranked] == [
        ("a100-1", 1),
        ("a100-2", 1),
        ("t4", 1),
        ("cpu-0", 1),
    ]
    assert ranked[-1].line() == "cpu-0: has no GPU; cpu ok; memory ok"
    two_misses = near_misses(state, make_pod().cpu(4000).gpus(8, "T4").build(), limit=4)
    assert [(m.node, m.failed) for m in two_misses] == [
        ("t4", 1),  # 4 of 8 GPUs short: 0.5
        ("cpu-0", 1),  # no GPU: 1.0
        ("a100-1", 2),  # wrong model, and 7 of 8 GPUs short
        ("a100-2", 3),  # wrong model, 6 of 8 GPUs short, 2 of 4 cpu short
    ]


def test_shares_taints_selectors_cordons_and_pod_limits_in_numbers(scheduler: Scheduler) -> None:
    state = ClusterState(
        [
            make_node("shared").gpus(2, "A100").build(),
            make_node("tainted").gpus(2, "A100").taint("dedicated", "training").build(),
            make_node("elsewhere").gpus(2, "A100").label("zone", "b").build(),
            make_node("cordoned").gpus(2, "A100").cordoned().build(),
            make_node("full").gpus(2, "A100").max_pod_count(2).build(),
        ]
    )
    fill(state, 0, [0, 1], milli=750)
    fill(state, 4, [0, 1], milli=100)
    for node in (1, 2, 3):
        fill(state, node, [0, 1], milli=750, name=f"x{node}")
    pod = make_pod("nb", "lab").share(500).selector("zone", "a").build()
    lines = {m.node: m.line() for m in near_misses(state, pod, limit=5)}
    assert lines == {
        "shared": 'shared: label zone is missing, the pod selects "a"; '
        "needs 0.5 of one GPU, the freest GPU has 0.25 free; cpu ok; memory ok",
        "tainted": 'tainted: label zone is missing, the pod selects "a"; '
        "taint dedicated=training:NoSchedule is not tolerated; "
        "needs 0.5 of one GPU, the freest GPU has 0.25 free; cpu ok; memory ok",
        "elsewhere": 'elsewhere: label zone is "b", the pod selects "a"; '
        "needs 0.5 of one GPU, the freest GPU has 0.25 free; cpu ok; memory ok",
        "cordoned": "cordoned: cordoned (spec.unschedulable); "
        'label zone is missing, the pod selects "a"; '
        "needs 0.5 of one GPU, the freest GPU has 0.25 free; cpu ok; memory ok",
        "full": 'full: label zone is missing, the pod selects "a"; at its limit of 2 pods; '
        "GPU ok; cpu ok; memory ok",
    }
    answer = explain_pending(state, pod, scheduler)
    assert answer.nodes.startswith("0/5 nodes are available: ")
    assert [m.node for m in answer.near_misses] == ["shared", "elsewhere", "full"]


def test_a_pod_that_fits_now_says_where_it_would_go(scheduler: Scheduler) -> None:
    state = cluster()
    pod = make_pod("small").gpus(1, "A100").build()
    answer = explain_pending(state, pod, scheduler)
    # best fit: a100-2, which has the least CPU left, and its lowest idle GPU
    assert answer.summary == (
        "Pod default/small is pending, but fits now: kgpu would place it on a100-2, GPU 6."
    )
    assert answer.nodes == "a100-2 has room and scores best"
    assert answer.near_misses == ()


def test_queue_tier_names_the_queue() -> None:
    from kgpu.kube.explain.explanation import queue_tier

    pod = make_pod().build()
    assert queue_tier(pod) == f"no queue label (kgpu.io/queue); {QUEUES_NOT_ENFORCED}"
    from dataclasses import replace

    assert queue_tier(replace(pod, queue="team-a")) == f'queue "team-a": {QUEUES_NOT_ENFORCED}'


def test_queue_tier_says_the_queue_quota_once_queues_exist() -> None:
    from dataclasses import replace

    from kgpu.kube.explain.explanation import queue_tier
    from kgpu.model.queue import QueueSpec

    pod = replace(make_pod().build(), queue="team-a")
    queues: dict[str, QueueSpec | str] = {
        "team-a": QueueSpec("team-a", deserved={"gpu": 2000}, limit={"gpu": 4000, "A100": 1000}),
        "broken": 'Queue broken: spec.limit[gpu] is "x", expected a quantity',
    }
    assert queue_tier(pod, queues) == 'queue "team-a": deserved gpu 2, limit gpu 4, A100 1'
    assert queue_tier(replace(pod, queue="nope"), queues) == (
        'queue "nope" does not exist: the pod waits until it is created'
    )
    assert queue_tier(replace(pod, queue="broken"), queues) == (
        'queue "broken" cannot be used, so the pod waits: Queue broken: spec.limit[gpu] is "x", '
        "expected a quantity"
    )
    assert queue_tier(replace(pod, queue=""), queues) == (
        'queue "default" (no queue label): no quota and no limit'
    )


def test_an_empty_cluster_has_no_near_misses(scheduler: Scheduler) -> None:
    answer = explain_pending(ClusterState([]), make_pod().gpus(1).build(), scheduler)
    assert answer.nodes == "0/0 nodes are available."
    assert answer.near_misses == ()


# ---------------------------------------------------------------------------- API objects


def k8s_node(name: str, gpus: int = 8, product: str = "A100", ready: bool = True) -> Obj:
    return {
        "metadata": {
            "name": name,
            "labels": {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus)},
        },
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def k8s_pod(
    name: str,
    node: str = "",
    gpus: int = 0,
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
    created: str = "2026-01-01T00:00:00Z",
) -> Obj:
    requests: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: Obj = {
        "schedulerName": "kgpu-scheduler",
        "containers": [{"name": "c", "resources": {"requests": requests}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def allocation(*minors: int, core: int = 100) -> dict[str, str]:
    entries = [{"minor": m, "resources": {"kubernetes.io/gpu-core": core}} for m in minors]
    return {"kgpu.io/device-allocation": json.dumps({"gpu": entries})}


def test_the_live_answer_sees_the_schedulers_snapshot() -> None:
    """Bound pods hold the GPUs their annotations record; other schedulers' pods are
    accounted too; finished pods hold nothing; nodes that are not Ready are left out."""
    nodes = [k8s_node("a100-1", 4), k8s_node("a100-2", 4, ready=False)]
    pods = [
        k8s_pod("annotated", "a100-1", 2, allocation(0, 3)),
        k8s_pod("done", "a100-1", 4, phase="Succeeded"),
        k8s_pod("waiting", gpus=2),
    ]
    foreign = k8s_pod("foreign", "a100-1", 1)
    foreign["spec"]["schedulerName"] = "default-scheduler"
    answer = explain_from_objects(pods[2], nodes, [*pods, foreign], "kgpu-scheduler")
    assert answer.lines() == [
        "Pod ml/waiting is pending: no node can take it.",
        "  1. request: 2 GPUs, 1 cpu, 1Gi memory",
        f"  2. queue: no queue label (kgpu.io/queue); {QUEUES_NOT_ENFORCED}",
        "  3. nodes: 0/1 nodes are available: 1 insufficient GPU.",
        "  4. nearest nodes:",
        # GPUs 0 and 3 from the annotation, GPU 1 the lowest free for the foreign pod
        "     a100-1: needs 2 idle GPUs, has 1; cpu ok; memory ok",
        "  note: 1 of 2 nodes are not Ready: kgpu places no pod there",
    ]


def test_the_schedulers_problems_become_notes() -> None:
    nodes = [k8s_node("a100-1", 2)]
    pods = [
        k8s_pod("a", "a100-1", 1, allocation(0)),
        k8s_pod("b", "a100-1", 1, allocation(0)),  # GPU 0 is a's: b cannot have it
        k8s_pod("waiting", gpus=1),
    ]
    answer = explain_from_objects(pods[2], nodes, pods, "kgpu-scheduler")
    assert answer.notes == (
        "Pod ml/b: annotation kgpu.io/device-allocation names GPUs [0] of node a100-1, "
        "expected GPUs that exist there and have room; accounted on GPUs 1 of a100-1",
    )
    assert answer.nodes == "0/1 nodes are available: 1 insufficient GPU."


def test_bound_pods_say_where_and_on_which_gpus(scheduler: Scheduler) -> None:
    state = ClusterState([])
    bound = k8s_pod("run", "a100-1", 2, allocation(3, 1))
    assert explain_object(state, bound, scheduler, "kgpu-scheduler").lines() == [
        "Pod ml/run runs on node a100-1, GPUs 1,3."
    ]
    shared = k8s_pod("nb", "t4", 1, allocation(2, core=25))
    shared["metadata"]["annotations"]["gpu-fraction"] = "0.25"
    del shared["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
    assert explain_object(state, shared, scheduler, "x").summary == (
        "Pod ml/nb runs on node t4, GPU 2 (0.25 of it)."
    )
    assert explain_object(state, k8s_pod("plain", "a100-1", 1), scheduler, "x").summary == (
        "Pod ml/plain runs on node a100-1 "
        "(GPUs not recorded: no kgpu.io/device-allocation annotation)."
    )
    broken = k8s_pod("broken", "a100-1", 1, {"kgpu.io/device-allocation": "[0]"})
    assert explain_object(state, broken, scheduler, "x").summary.startswith(
        "Pod ml/broken runs on node a100-1 (GPUs not recorded: "
        'Pod ml/broken: annotation kgpu.io/device-allocation is "[0]", expected a JSON object'
    )
    assert explain_object(state, k8s_pod("web", "cpu-0"), scheduler, "x").summary == (
        "Pod ml/web runs on node cpu-0, no GPUs."
    )
    assert explain_bound("ml/nb", "t4", (2,), 250).summary == (
        "Pod ml/nb runs on node t4, GPU 2 (0.25 of it)."
    )
    done = k8s_pod("done", "a100-1", 1, phase="Succeeded")
    assert explain_object(state, done, scheduler, "x").summary == (
        "Pod ml/done has finished (phase Succeeded); it holds nothing."
    )


def test_an_unreadable_pod_stops_at_the_first_tier(scheduler: Scheduler) -> None:
    obj = k8s_pod("typo", annotations={"gpu-fraction": "abc"})
    assert explain_object(ClusterState([]), obj, scheduler, "kgpu-scheduler").lines() == [
        "Pod ml/typo is pending: kgpu cannot read its request.",
        '  1. request: Pod ml/typo: annotation gpu-fraction is "abc", '
        "expected a number with 0 < f <= 1",
        "  note: queue and nodes are not checked until the request can be read",
    ]


def test_a_pod_of_another_scheduler_is_explained_with_a_note() -> None:
    obj = k8s_pod("other", gpus=2)
    del obj["spec"]["schedulerName"]
    answer = explain_from_objects(obj, [k8s_node("a100-1", 1)], [obj], "kgpu-scheduler")
    assert answer.notes[0] == (
        'spec.schedulerName is "default-scheduler", not "kgpu-scheduler": '
        "kgpu does not place this pod; below is what kgpu would see"
    )
    assert [m.line() for m in answer.near_misses] == [
        "a100-1: needs 2 idle GPUs, has 1; cpu ok; memory ok"
    ]


def test_explain_live_reports_an_unreachable_api_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: Config
            clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
            users: [{name: u, user: {token: t}}]
            contexts: [{name: x, context: {cluster: c, user: u}}]
            current-context: x
            """
        )
    )
    with pytest.raises(ExplainError, match="cannot reach the API server"):
        explain_live("p", "default", str(kubeconfig), "kgpu-scheduler")


# ---------------------------------------------------------------------------- the simulator


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (
            "research/train-16gpu",
            [
                "Pod research/train-16gpu is pending: no node can take it.",
                "  1. request: 16 GPUs, 16 cpu, 128Gi memory",
                f"  2. queue: no queue label (kgpu.io/queue); {QUEUES_NOT_ENFORCED}",
                # kgpu places the CPU-only web pod on cpu-0, the node without idle GPUs
                "  3. nodes: 0/4 nodes are available: 2 insufficient memory, 1 insufficient GPU, "
                "1 node(s) had untolerated taint.",
                "  4. nearest nodes:",
                "     gpu-a100-0: needs 16 idle GPUs, has 3; cpu ok; memory ok",
                # one check failed beats two; then the smaller shortfall
                "     cpu-0: has no GPU; needs 128Gi memory, has 124Gi; cpu ok",
                "     gpu-t4-0: needs 16 idle GPUs, has 0; needs 128Gi memory, has 76Gi; cpu ok",
            ],
        ),
        (
            "lab/notebook-typo",
            [
                "Pod lab/notebook-typo is pending: kgpu cannot read its request.",
                '  1. request: Pod lab/notebook-typo: annotation gpu-fraction is "half", '
                "expected a number with 0 < f <= 1",
                "  note: queue and nodes are not checked until the request can be read",
            ],
        ),
        (
            "lab/notebook-alice",
            ["Pod lab/notebook-alice runs on node gpu-t4-0, GPU 1 (0.5 of it)."],
        ),
    ],
)
def test_simulate_manifests_explain(pod: str, expected: list[str]) -> None:
    result = CliRunner().invoke(main, ["simulate", "manifests", str(EXAMPLES), "--explain", pod])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-len(expected) :] == expected


def test_simulate_manifests_explain_unknown_pod() -> None:
    result = CliRunner().invoke(main, ["simulate", "manifests", str(EXAMPLES), "--explain", "nope"])
    assert result.exit_code == 1
    assert "no Pod default/nope in" in result.output


def test_taint_effect_is_shown_as_written() -> None:
    state = ClusterState([make_node("n").taint("gpu", effect=Effect.NO_EXECUTE).build()])
    assert near_misses(state, make_pod().build())[0].lacks == (
        "taint gpu:NoExecute is not tolerated",
    )


def test_a_share_the_webhook_did_not_see_is_explained_as_kgpu_run_refuses_it() -> None:
    nodes = [k8s_node("a100-1", 2)]
    share = k8s_pod("half", annotations={"gpu-fraction": "0.5"})
    answer = explain_from_objects(share, nodes, [share], "kgpu-scheduler")
    assert answer.lines()[0] == "Pod ml/half is pending: kgpu cannot read its request."
    assert "annotation kgpu.io/gpu-env-configmap is missing" in answer.lines()[1]
    assert "create the pod again while the webhook serves" in answer.lines()[1]
    # Mutated, it is placed like any share; and a scheduler that only accounts shares
    # (kgpu run --no-confine-shares) places it without.
    mutated = k8s_pod("half", annotations={"gpu-fraction": "0.5", "kgpu.io/gpu-env-configmap": "kgpu-gpu-env-0123456789ab"})  # fmt: skip
    mutated["spec"]["containers"][0]["env"] = configmap_env("kgpu-gpu-env-0123456789ab")
    assert explain_from_objects(mutated, nodes, [mutated], "kgpu-scheduler").lines()[0] == (
        "Pod ml/half is pending, but fits now: kgpu would place it on a100-1, GPU 0 (0.5 of it)."
    )
    unconfined = explain_from_objects(share, nodes, [share], "kgpu-scheduler", reservation_namespace=None)  # fmt: skip
    assert "cannot read its request" not in unconfined.lines()[0]


def test_a_pod_whose_own_env_would_widen_its_gpus_is_explained_as_refused() -> None:
    """The annotation alone, or a device-plugin pod that sets NVIDIA_VISIBLE_DEVICES itself
    (created while the webhook was not serving): either would see GPUs it was not given."""
    nodes = [k8s_node("a100-1", 2)]
    all_gpus = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    forged = k8s_pod("half", annotations={"gpu-fraction": "0.5", "kgpu.io/gpu-env-configmap": "kgpu-gpu-env-0123456789ab"})  # fmt: skip
    forged["spec"]["containers"][0]["env"] = all_gpus
    whole = k8s_pod("one", gpus=1)
    whole["spec"]["containers"][0]["env"] = all_gpus
    cpu = k8s_pod("cpu")
    cpu["spec"]["containers"][0]["env"] = all_gpus
    for pod, expected in (
        (forged, "NVIDIA_VISIBLE_DEVICES and the MPS limits from ConfigMap kgpu-gpu-env-0123456789ab"),
        (whole, "no NVIDIA_VISIBLE_DEVICES, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, "
         "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT of the pod's own: the device plugin sets them"),
        (cpu, "NVIDIA_VISIBLE_DEVICES=void or none"),
    ):  # fmt: skip
        answer = explain_from_objects(pod, nodes, [pod], "kgpu-scheduler")
        assert answer.lines()[0].endswith("is pending: kgpu cannot read its request.")
        assert (
            'spec.containers[0].env is [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], '
            f"expected {expected}, as kgpu's mutating webhook sets it"
        ) in answer.lines()[1]
    # Without an entry of its own, a pod asking the device plugin is placed.
    del whole["spec"]["containers"][0]["env"]
    assert "fits now" in explain_from_objects(whole, nodes, [whole], "kgpu-scheduler").lines()[0]


def test_a_pod_naming_a_queue_its_namespace_may_not_use_is_told_so() -> None:
    obj = k8s_pod("steal", gpus=1)
    obj["metadata"]["namespace"] = "team-b"
    obj["metadata"]["labels"] = {"kgpu.io/queue": "team-a"}
    queue = {"apiVersion": "kgpu.io/v1alpha1", "kind": "Queue", "metadata": {"name": "team-a"},
             "spec": {"namespaces": ["team-a"]}}  # fmt: skip
    nodes = [k8s_node("a100-1", 1)]
    answer = explain_from_objects(obj, nodes, [obj], "kgpu-scheduler", queues=[queue])
    assert answer.queue == (
        'queue "team-a" cannot be used, so the pod waits: namespace team-b may not use queue '
        "team-a: Queue team-a serves namespace team-a (spec.namespaces)"
    )
    obj["metadata"]["namespace"] = "team-a"
    answer = explain_from_objects(obj, nodes, [obj], "kgpu-scheduler", queues=[queue])
    assert answer.queue == 'queue "team-a": deserved nothing, no limit'
